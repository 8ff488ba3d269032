"""Every reach of fieldeval into pytest's, pytest-json-report's, syrupy's and Hypothesis's internals, in one place.

Each is here for the 100,000-item goals (memory that follows the items still to
run, an exit in seconds) or a session's CPU; none has a public API that does the
same. ``tests/test_upstream_internals.py`` fails, naming the reach, when a
release of the other project changes what it relies on. What each buys:

- :func:`release_report` (pytest's terminal reporter ``stats`` lists and
  pytest-json-report's ``_json_tests``, above the trim limit, 10,000 eval items):
  a passed item keeps no setup, teardown or call report (one shared
  :data:`PASSED` stand-in still counts in ``N passed``) and no JSON entry
  (:func:`restore_summary` counts it back into ``summary``). Not with ``-rp``,
  ``-rP``, ``-rA`` or ``--store-durations``, which read passed reports at the end.
- :class:`ItemReleaser` (``session.items``, 1,000 eval items and nothing else):
  each finished item is replaced by a :class:`FinishedItem`, so the process's
  memory follows the items still to run.
- :func:`slim_items` (``item._request``, ``item.funcargs``): the fixture request
  pytest builds for each item at collection goes (pytest makes it again when the
  item runs).
- :func:`release_deselected` (the reporter's ``deselected`` list) and
  :func:`release_syrupy_items` (syrupy's ``config._syrupy.start()``): a shard of
  25,000 items of a 100,000 suite holds 209 MB after collection instead of 395 MB
  (``benchmarks/RESULTS.md``, An EBS run at scale, and ``docs/architecture.md``, Scale).
- :func:`drop_idle_hypothesis_plugin` (Hypothesis's plugin, by its registered name):
  an eval-only session saves about 1.5 CPU-s per process, the import of the whole
  library in Hypothesis's terminal summary (``benchmarks/RESULTS.md``, the design
  card's ``pytest evals -n 8``).
- :func:`freeze` (``gc.freeze``, the whole process, 1,000 eval items or more): the
  cyclic collector never walks the collected items or the parsed rows again.
- :func:`trim_heap` (glibc's ``malloc_trim``): the finished items' free C-heap pages
  (30 MB at 100,000 items) go back to the system before the rows are parsed.
- :func:`share_locations` (``Item.location``, a cached property): the items of one
  parametrised function take the file and line found for the first of them; each
  item's own would look the function's file up again (``getfslineno``, a ``stat``
  each), 0.05-0.1 ms an item (``benchmarks/RESULTS.md``).
- :func:`json_report`: pytest-json-report's report, read after its
  ``pytest_sessionfinish`` built it, so the run's files write it (per run, atomically).
- :func:`json_stage` (pytest-json-report's ``_json_report_extra``, its captured output
  of each stage): the entry of a stage with no ``longrepr``, without the terminal writer
  pytest builds to render an empty text, some 10 us a stage (``benchmarks/RESULTS.md``).
  ``tests/test_json_report_stage.py`` compares the entries with pytest-json-report's own.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import sys
from collections.abc import Sequence
from typing import Any

import pytest

HYPOTHESIS_PLUGIN = "hypothesispytest"  # the name Hypothesis registers its pytest plugin under
JSON_REPORT_ATTR = "_json_report"  # the config attribute pytest-json-report keeps its plugin in
SYRUPY_ATTR = "_syrupy"  # the config attribute syrupy keeps its snapshot session in


class _PassedStandIn:
    """One object for every passed eval item's call report in the terminal reporter's counts."""

    __slots__ = ()
    count_towards_summary = True
    when = "call"
    outcome = "passed"
    passed = True
    failed = False
    skipped = False
    nodeid = ""
    duration = 0.0
    sections: tuple = ()

    def __repr__(self) -> str:
        return "<passed eval item (its report is not kept above the trim limit)>"


PASSED = _PassedStandIn()


def keeps_passed_reports(config: pytest.Config) -> bool:
    """Whether something of this session reads passed reports at the end (``-rp/-rP/-rA``, ``--store-durations``)."""
    chars = str(getattr(config.option, "reportchars", "") or "")
    return bool({"p", "P", "A"} & set(chars)) or bool(getattr(config.option, "store_durations", False))


def release_report(config: pytest.Config, report: pytest.TestReport) -> bool:
    """Let go of a passed eval item's report once every plugin has seen it; True when its JSON entry went too.

    Called after all ``pytest_runtest_logreport`` implementations ran, so the
    report (the last one the terminal reporter added) is found at the end of its list.
    """
    if not report.passed:
        return False
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    stats = getattr(reporter, "stats", None)
    if isinstance(stats, dict):
        if report.when == "call":
            bucket = stats.get("passed")
            if bucket and bucket[-1] is report:
                bucket[-1] = PASSED
        else:
            bucket = stats.get("")
            if bucket and bucket[-1] is report:
                bucket.pop()
    if report.when != "teardown":
        return False
    tests = getattr(getattr(config, JSON_REPORT_ATTR, None), "_json_tests", None)
    entry = tests.get(report.nodeid) if isinstance(tests, dict) else None
    if entry is not None and entry.get("outcome") == "passed":
        del tests[report.nodeid]
        return True
    return False


def restore_summary(json_report: dict, dropped: int) -> None:
    """Count the passed items whose JSON entries were let go of back into ``json_report["summary"]``."""
    summary = json_report.get("summary")
    if dropped and isinstance(summary, dict):
        summary["passed"] = summary.get("passed", 0) + dropped
        summary["total"] = summary.get("total", 0) + dropped


def slim_items(items: Sequence[pytest.Item]) -> None:
    """Drop the fixture request pytest builds for every item at collection; pytest makes it again when the
    item runs, and drops it after, as it does for every item."""
    for item in items:
        if getattr(item, "_request", None) and getattr(item, "funcargs", None) == {}:
            item._request = False
            item.funcargs = None


class _Deselected:
    """What the terminal reporter keeps of each deselected item once the item itself is let go of (plugins
    that walk every entry of its stats read their ``__dict__``)."""


DESELECTED = _Deselected()


def release_deselected(config: pytest.Config) -> None:
    """The terminal reporter keeps every deselected item only to count them (``N deselected``): a shard of
    pytest-split deselects three quarters of the suite it collected. Keep the count, not the items."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    stats = getattr(reporter, "stats", None)
    if isinstance(stats, dict) and stats.get("deselected"):
        stats["deselected"] = [DESELECTED] * len(stats["deselected"])


def release_syrupy_items(session: pytest.Session, eval_items: int) -> bool:
    """A large session of eval items only, none of which asks for a ``snapshot``: syrupy's snapshot session
    starts over empty (its own ``start()``), so it holds none of the collected items.

    Syrupy keeps every collected item (a shard's deselected ones too) for its report on unused snapshots,
    which such a session has nothing for. The plugin stays registered, so each xdist worker still sends
    its (empty) report. Returns whether syrupy's session was emptied.
    """
    snapshots = getattr(session.config, SYRUPY_ATTR, None)  # syrupy's SnapshotSession, made at sessionstart
    if (snapshots is None or not callable(getattr(snapshots, "start", None)) or not session.items
            or eval_items < len(session.items)
            or any("snapshot" in getattr(item, "fixturenames", ()) for item in session.items)):
        return False
    snapshots.start()
    return True


class FinishedItem:
    """What ``session.items`` keeps of an eval item that has run, once :class:`ItemReleaser` let go of it:
    its node id."""

    __slots__ = ("nodeid",)

    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid

    def __repr__(self) -> str:
        return f"<finished eval item {self.nodeid} (let go of after it ran)>"


class ItemReleaser:
    """Lets go of each eval item once it has run (:meth:`ran`, called by the plugin's ``pytest_runtest_protocol``
    after the item's protocol ended), in every process that runs items.

    Made by :func:`release_items` in a large session of eval items only. ``session.items`` is the
    last holder of a finished item: pytest's run loop reads an item only when it runs it (and as the next
    item of the one before, for its teardown), and what the session keeps of it (its reports, its row, its
    counts) does not refer to it. Each finished eval item is replaced there by a :class:`FinishedItem` that
    keeps its node id, so the process gives back the item, its keywords, its stash and the caches pytest
    adds while it runs (``item.location``), and its memory follows the items still to run.
    """

    def __init__(self, session: pytest.Session) -> None:
        self.session = session
        self._cursor = 0  # where the last finished item was: items run in order (-n 0) or in rising order (xdist)
        self._positions: dict[int, int] | None = None  # id(item) -> position, built on the first miss

    def _position(self, item: pytest.Item) -> int | None:
        items = self.session.items
        for at in (self._cursor, self._cursor + 1):
            if at < len(items) and items[at] is item:
                return at
        if self._positions is None:
            self._positions = {id(candidate): at for at, candidate in enumerate(items)
                               if not isinstance(candidate, FinishedItem)}
        at = self._positions.pop(id(item), None)
        return at if at is not None and at < len(items) and items[at] is item else None

    def ran(self, item: pytest.Item) -> None:
        """Replace ``item``, which ran, tore down and reported, by its :class:`FinishedItem` in ``session.items``."""
        at = self._position(item) if isinstance(item, pytest.Function) else None
        if at is not None:
            self.session.items[at] = FinishedItem(item.nodeid)
            keywords = getattr(item, "keywords", None)
            if getattr(keywords, "node", None) is item:
                keywords.node = None  # the item's one reference cycle, which a frozen collector never breaks
            self._cursor = at


def release_items(session: pytest.Session, eval_items: int) -> ItemReleaser | None:
    """In a session of eval items only (the caller decides from how many on), the :class:`ItemReleaser` for its
    items, else None: a session with other tests keeps its items, as a plugin may read them at the end."""
    if not session.items or eval_items < len(session.items):
        return None
    return ItemReleaser(session)


def drop_idle_hypothesis_plugin(config: pytest.Config, *, only_evals: bool) -> bool:
    """In a session of eval items only where nothing imported Hypothesis, unregister Hypothesis's pytest plugin,
    whose terminal summary imports the whole library to report nothing; whether it was dropped."""
    if not only_evals or "hypothesis" in sys.modules:
        return False
    plugin = config.pluginmanager.get_plugin(HYPOTHESIS_PLUGIN)
    if plugin is None:
        return False
    config.pluginmanager.unregister(plugin)
    return True


def freeze() -> None:
    """Move every object alive now into the collector's permanent generation, so no collection walks it again."""
    gc.freeze()


def collect_and_freeze() -> None:
    """Collect the garbage there is, then :func:`freeze` what is left (no garbage is kept for the whole run)."""
    gc.collect()
    gc.freeze()


def share_locations(nodes: Sequence[Any]) -> int:
    """Give each plain :class:`pytest.Function` among ``nodes`` (a collector's result) the location of the first
    item of the same function under the same parent, with its own test name, as pytest would find it; how many.

    The file and line are the function's (``getfslineno(item.obj)``), the same for every parametrised item of it;
    the name is the item's ``getmodpath()``. Items of another class (a plugin's) are left to pytest.
    """
    first: dict[tuple[Any, str], tuple[str, int | None]] = {}
    shared = 0
    for node in nodes:
        if type(node) is not pytest.Function or "location" in node.__dict__:
            continue
        key = (node.parent, node.originalname)
        where = first.get(key)
        if where is None:
            path, lineno, _ = node.location
            first[key] = (path, lineno)
        else:
            node.__dict__["location"] = (*where, node.getmodpath())
            shared += 1
    return shared


def json_report(config: pytest.Config) -> dict | None:
    """pytest-json-report's report of the session once its ``pytest_sessionfinish`` built it, else None."""
    report = getattr(getattr(config, JSON_REPORT_ATTR, None), "report", None)
    return report if isinstance(report, dict) else None


def trim_heap() -> bool:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``); whether it could.

    The items let go of during the run leave free memory that stays resident (30 MB at 100,000 items,
    which the session's end then adds its rows to). A C library without ``malloc_trim`` (musl, macOS)
    is left alone.
    """
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


@functools.cache
def _malloc_trim() -> Any:
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def json_stage(report: pytest.TestReport) -> dict | None:
    """pytest-json-report's entry for a stage with nothing to render (no ``longrepr``, not relayed by a
    pytest-xdist worker, whose text names the worker): the dict its own hook makes. None for any other stage,
    which pytest-json-report makes itself."""
    if report.longrepr is not None or hasattr(report, "node"):
        return None
    stage = {"duration": report.duration, "outcome": report.outcome}
    captured = getattr(report, "_json_report_extra", {}).get(report.when, {})
    for name in ("stdout", "stderr", "log"):
        if captured.get(name):
            stage[name] = captured[name]
    return stage


__all__ = ["PASSED", "FinishedItem", "ItemReleaser", "collect_and_freeze", "drop_idle_hypothesis_plugin", "freeze",
           "json_report", "json_stage", "keeps_passed_reports", "release_deselected", "release_items",
           "release_report", "release_syrupy_items", "restore_summary", "share_locations", "slim_items", "trim_heap"]
