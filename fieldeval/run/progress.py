"""Progress of a run: items planned, done and errored per benchmark and model.

The controller counts items as their reports arrive (with or without
pytest-xdist); :class:`Progress` renders the live lines and keeps the
``--progress-file`` JSON up to date for the HTTP service.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fieldeval.atomic import write_atomic

if TYPE_CHECKING:
    import pytest

TTY_REDRAW_S = 0.5
LOG_LINE_S = 10.0

MIN_RATE_SPAN_S = 1.0
Key = tuple[str, str]  # (benchmark, model)


def _speed(rate: float, unit: str) -> str:
    """``3.1 items/s``, or ``14.2 s/item`` below one a second (a local model), so that neither reads 0.0."""
    return f"{rate:.1f} {unit}/s" if rate >= 1 else f"{1 / rate:.1f} s/{unit.removesuffix('s')}"


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
    concurrency: Callable[[str], str | None] = lambda model: None  # a model's calls in flight and adaptive limit

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
        """Items per second since the model's first item finished (start-up and the first call's latency, which
        concurrent calls share, left out); None until a second one has."""
        first = self.first_done.get(key)
        elapsed = self.clock() - first if first is not None else 0.0
        if self.done[key] < 2 or elapsed < MIN_RATE_SPAN_S:  # a rate over a blink (cached answers) means nothing
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
            pace = "done" if rate is None else f"{_speed(rate, unit)}, done"
        elif rate is None:
            pace = "estimating"
        else:
            pace = f"{_speed(rate, unit)}, {(total - done) / rate:.0f} s left"
        counts = f"{done}/{total} {unit}"
        if epochs > 1:
            counts += f" ({round(total / epochs)} items x {epochs} epochs)"
        calls = self.concurrency(key[1])
        line = f"{key[0]} {key[1]}: {counts}, {self.errors[key]} error(s), {pace}"
        return f"{line}, calls {calls}" if calls else line

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


def keys_from_ids(ids: Sequence[str], module_benchmarks: Mapping[str, tuple[str, ...]],
                  models_for: Callable[[str], list], matched: list[str] | None = None) -> list[Key]:
    """(benchmark, model) of each eval item among xdist's collected node ids (``<eval module>::...-<model>]``);
    ``matched``, when given, receives the node id of each."""
    from fieldeval.calls.cells import test_id_of

    keys = []
    modules: dict[str, tuple[str, ...]] = {}
    for nodeid in ids:
        tail = nodeid.removesuffix("]")
        module = nodeid.split("::")[0]
        if module not in modules:  # as the rootdir names it; else (--pyargs, outside the rootdir) by its path's end
            modules[module] = module_benchmarks.get(module) or next(
                (names for path, names in module_benchmarks.items() if path.endswith(f"/{module}")), ())
        for bench in modules[module]:
            model = max((m for m in models_for(bench) if tail.endswith(f"-{test_id_of(m)}")
                         or tail.endswith(f"[{test_id_of(m)}")), key=lambda m: len(test_id_of(m)), default=None)
            if model is not None:
                keys.append((bench, model))
                if matched is not None:
                    matched.append(nodeid)
                break
    return keys


class ProgressDisplay:
    """The counts shown as they change: a redrawn line on a terminal at default verbosity, else a log line every
    :data:`LOG_LINE_S` seconds, and the ``--progress-file`` JSON. ``on_full_disk(line)`` is called when that file
    cannot be written for want of space."""

    def __init__(self, config: pytest.Config, progress: Progress, progress_file: str | None,
                 on_full_disk: Callable[[str], None]) -> None:
        self.config = config
        self.progress = progress
        self.progress_file = progress_file
        self._on_full_disk = on_full_disk
        self._last_draw = 0.0
        self._shown: set[str] = set()

    def _reporter(self) -> Any:
        return self.config.pluginmanager.get_plugin("terminalreporter")

    def live(self) -> bool:
        """Whether a redrawn progress line stands in for the dots (a terminal, default verbosity)."""
        reporter = self._reporter()
        return (reporter is not None and reporter.isatty and self.config.get_verbosity() == 0
                and bool(self.progress.planned) and not self.config.option.collectonly)

    def say(self, line: str, **markup: bool) -> None:
        """Print ``line`` once per session, on a line of its own."""
        reporter = self._reporter()
        if reporter is not None and line not in self._shown:
            self._shown.add(line)
            reporter.ensure_newline()
            reporter.write_line(line, **markup)

    def write(self) -> None:
        """Replace the ``--progress-file`` with the current counts (when asked for one)."""
        if not self.progress_file:
            return
        try:
            self.progress.write(self.progress_file)
        except OSError as error:
            from fieldeval.run.writable import full_disk_line, out_of_space

            if not out_of_space(error):
                raise
            self._on_full_disk(full_disk_line(self.progress_file, error))

    def draw(self, *, final: bool = False) -> None:
        """Redraw the line, or log the counts, when it is time to (``final``: now)."""
        reporter = self._reporter()
        if reporter is None or self.config.get_verbosity() < 0 or not self.progress.planned:
            return
        now = time.monotonic()
        keys = sorted(self.progress.planned)
        if self.live():
            if final or now - self._last_draw >= TTY_REDRAW_S:
                reporter.rewrite(" | ".join(self.progress.line(k) for k in keys), erase=True)
                self._last_draw = now
        elif final or now - self._last_draw >= LOG_LINE_S:
            reporter.ensure_newline()
            for key in keys:
                reporter.write_line(f"fieldeval progress: {self.progress.line(key)}")
            self._last_draw = now

    def end(self, reporter: Any) -> None:
        """Draw the counts once more, complete, and end their line."""
        if self.progress.planned and self.live():
            self.draw(final=True)
            reporter.ensure_newline()
            reporter.write_line("")
        elif self.progress.planned:
            self.draw(final=True)
