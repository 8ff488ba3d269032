"""Progress of a run: items planned, done and errored per benchmark and model.

The controller counts items as their reports arrive (with or without
pytest-xdist); :class:`Progress` renders the live lines and keeps the
``--progress-file`` JSON up to date for the HTTP service.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fieldeval.atomic import write_atomic

Key = tuple[str, str]  # (benchmark, model)


@dataclass
class Progress:
    """Counts of one session's eval items; ``planned`` is known after collection."""

    planned: Counter[Key] = field(default_factory=Counter)
    done: Counter[Key] = field(default_factory=Counter)
    errors: Counter[Key] = field(default_factory=Counter)
    started: float = field(default_factory=time.monotonic)
    status: str = "running"
    clock: Callable[[], float] = time.monotonic
    first_done: dict[Key, float] = field(default_factory=dict)
    epochs_of: Callable[[Key], int] = lambda key: 1  # answers per item (``--epochs``): counts are of answers

    def plan(self, keys: list[Key]) -> None:
        """Set the planned items from the collected ``(benchmark, model)`` of each item."""
        self.planned = Counter(keys)
        self.started = self.clock()

    def finish(self, key: Key, *, failed: bool) -> None:
        """Count one finished item."""
        self.done[key] += 1
        self.first_done.setdefault(key, self.clock())
        if failed:
            self.errors[key] += 1

    def rate(self, key: Key) -> float | None:
        """Items per second since the model's first item finished; None until a second one has.

        Counting from the first finished item, not the session start, leaves out
        start-up and the first call's latency, which concurrent calls share: the
        first estimate of a 46 s run said 428 s when it counted them (issue 20).
        """
        first = self.first_done.get(key)
        elapsed = self.clock() - first if first is not None else 0.0
        if self.done[key] < 2 or elapsed <= 0:
            return None
        return (self.done[key] - 1) / elapsed

    def line(self, key: Key) -> str:
        """``ebs gpt-4o-mini: 40/100 items, 2 errors, 3.1 items/s, 19 s left``; with ``--epochs 3``,
        ``ebs m-t0.7: 40/300 answers (100 items x 3 epochs), ...``."""
        done, total = self.done[key], self.planned.get(key, 0)
        rate = self.rate(key)
        epochs = self.epochs_of(key)
        unit = "items" if epochs <= 1 else "answers"
        if done >= total:
            pace = "done" if rate is None else f"{rate:.1f} {unit}/s, done"
        elif rate is None:
            pace = "estimating"
        else:
            pace = f"{rate:.1f} {unit}/s, {(total - done) / rate:.0f} s left"
        counts = f"{done}/{total} {unit}"
        if epochs > 1:
            counts += f" ({round(total / epochs)} items x {epochs} epochs)"
        return f"{key[0]} {key[1]}: {counts}, {self.errors[key]} error(s), {pace}"

    def as_dict(self) -> dict:
        """The ``--progress-file`` payload."""
        return {"status": self.status, "total": sum(self.planned.values()), "done": sum(self.done.values()),
                "errors": sum(self.errors.values()),
                "per_model": [{"benchmark": b, "model": m, "total": self.planned.get((b, m), 0),
                               "done": self.done[(b, m)], "errors": self.errors[(b, m)]}
                              for b, m in sorted({*self.planned, *self.done})]}

    def write(self, path: str | Path) -> None:
        """Replace ``path`` atomically with the current counts."""
        write_atomic(Path(path), json.dumps(self.as_dict()))
