"""Progress of a run: items planned, done and errored per benchmark and model.

The controller counts items as their reports arrive (with or without
pytest-xdist); :class:`Progress` renders the live lines and keeps the
``--progress-file`` JSON up to date for the HTTP service.
"""

from __future__ import annotations

import json
import time
from collections import Counter
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

    def plan(self, keys: list[Key]) -> None:
        """Set the planned items from the collected ``(benchmark, model)`` of each item."""
        self.planned = Counter(keys)
        self.started = time.monotonic()

    def finish(self, key: Key, *, failed: bool) -> None:
        """Count one finished item."""
        self.done[key] += 1
        if failed:
            self.errors[key] += 1

    def line(self, key: Key) -> str:
        """``ebs gpt-4o-mini: 40/100 items, 2 errors, 3.1 items/s, 19 s left``."""
        done, total = self.done[key], self.planned.get(key, 0)
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = done / elapsed
        left = f"{(total - done) / rate:.0f} s left" if rate > 0 and total > done else ("done" if done >= total else "-")
        return (f"{key[0]} {key[1]}: {done}/{total} items, {self.errors[key]} error(s), "
                f"{rate:.1f} items/s, {left}")

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
