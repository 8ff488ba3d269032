"""What a large eval session lets go of, so its memory follows the items still to run and not its finished ones.

In a session of 1,000 eval items or more and nothing else, each item itself is
let go of once it has run (:class:`ItemReleaser`): ``session.items`` keeps a
:class:`FinishedItem` with its node id in its place.

Above the report's trim limit (10,000 eval items), once an eval item passed:

- pytest's terminal reporter keeps no :class:`~pytest.TestReport` of its setup
  or teardown (they count towards nothing) and, for its call, one shared
  :data:`PASSED` stand-in that still counts in the final ``N passed`` line;
- pytest-json-report keeps no entry for it (``report.json`` would drop it
  anyway); :func:`restore_summary` adds the dropped items back into the
  report's ``summary`` counts.

Reports of items that failed, errored or were skipped stay whole. Nothing is
let go of when the user asked for passed reports (``-rp``, ``-rP``, ``-rA``)
or for pytest-split's ``--store-durations``, which read them at the end.

:func:`slim_items` drops the fixture request pytest builds for every collected
item at collection (pytest builds it again when the item runs and drops it
after, as it does for every item).

:func:`trim_heap` hands the C heap's free pages back to the system as the
session ends, before its rows are parsed, and after each chunk of rows the
store's stage builds while the items run.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence
from typing import Any

import pytest

from fieldeval.defaults import ITEM_KEY


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
    tests = getattr(getattr(config, "_json_report", None), "_json_tests", None)
    entry = tests.get(report.nodeid) if isinstance(tests, dict) else None
    if entry is not None and entry.get("outcome") == "passed":
        del tests[report.nodeid]
        return True
    return False


class ReportReleaser:
    """The plugin (controller only) that lets go of passed eval items' reports above the trim limit."""

    def __init__(self, config: pytest.Config, state: Any) -> None:
        self.config = config
        self.state = state
        self.releases = not keeps_passed_reports(config)  # the options are parsed before pytest_configure

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport):
        result = yield  # every other plugin has seen the report
        state = self.state
        if (self.releases and state.eval_items > state.trim_limit
                and any(key == ITEM_KEY for key, _ in report.user_properties)):
            state.released_entries += release_report(self.config, report)
        return result


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
    snapshots = getattr(session.config, "_syrupy", None)  # syrupy's SnapshotSession, made at sessionstart
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
    """The plugin (every process that runs items) that lets go of each eval item once it has run.

    Registered by :func:`release_items` in a large session of eval items only. ``session.items`` is the
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

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        result = yield  # the item ran, tore down and reported
        at = self._position(item) if isinstance(item, pytest.Function) else None
        if at is not None:
            self.session.items[at] = FinishedItem(item.nodeid)
            keywords = getattr(item, "keywords", None)
            if getattr(keywords, "node", None) is item:
                keywords.node = None  # the item's one reference cycle, which a frozen collector never breaks
            self._cursor = at
        return result


def release_items(session: pytest.Session, eval_items: int) -> bool:
    """In a session of eval items only (the caller decides from how many on), register :class:`ItemReleaser`;
    returns whether it was registered. A session with other tests keeps its items: a plugin may read
    them at the end."""
    manager = session.config.pluginmanager
    if not session.items or eval_items < len(session.items) or manager.has_plugin("fieldeval-items"):
        return False
    manager.register(ItemReleaser(session), "fieldeval-items")
    return True


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


__all__ = ["PASSED", "FinishedItem", "ItemReleaser", "ReportReleaser", "keeps_passed_reports", "trim_heap",
           "release_deselected", "release_items", "release_report", "release_syrupy_items", "restore_summary",
           "slim_items"]
