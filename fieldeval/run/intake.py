"""The one place an eval item's report arrives (controller): its row, its error, its progress.

Each row reaches the intake as the compact JSON text the ``record`` fixture
wrote; that text goes to the spool (the aggregates and ``rows.jsonl``) and to
the store's stage unparsed, and is parsed once, at the end (:meth:`Intake.rows`).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fieldeval.calls.failures import failure_class
from fieldeval.defaults import CASE_KEY, EPOCH_KEY, ERROR_KEY, ITEM_KEY, ROW_KEY
from fieldeval.run.spool import RowSpool

if TYPE_CHECKING:
    import pytest

Key = tuple[str, str]  # (benchmark, model)
SHARED_DISTINCT = 5_000  # a row field with more distinct texts than this is not shared any more (Intake._shared)
_DISTINCT: dict = {}  # the mark of such a field


class Intake:
    """The rows and errors of one session's eval items, taken from their reports.

    ``on_failed()`` is called for each failed report (``--maxfail``), ``on_error(model, error)`` for each errored
    item, ``on_item(key, errored)`` once per finished item, and ``on_chunk()`` after the stage wrote a chunk.
    """

    def __init__(self, session_dir: Path | None, *, on_failed: Callable[[], None],
                 on_error: Callable[[str, dict], None], on_item: Callable[[Key, bool], None],
                 on_chunk: Callable[[], None]) -> None:
        self.spool = RowSpool(session_dir)
        self.stage: Any = None  # the store's rows built while the run goes (fieldeval.store.stage), SQLite only
        self.open = True  # rows join until the session begins to end
        self.errors: Counter[Key] = Counter()
        self.errored_epochs: dict[Key, Counter[str]] = defaultdict(Counter)  # by the repeated item's case
        self.error_details: dict[Key, Counter[str]] = defaultdict(Counter)
        self.failed_items: list[dict] = []  # the store's errored items: benchmark, model, item, error_class, message
        self.skipped_after_permanent: Counter[str] = Counter()
        self._rows: dict[str, list[dict]] = defaultdict(list)
        self._strings: dict[str, dict[str, str]] = {}  # each row field's text values, one copy each (_shared)
        self._item_properties: dict[Key, tuple[str, str]] = {}
        self._item_keys: dict[str, Key] = {}  # an item tag's text -> (benchmark, model)
        self._on_failed, self._on_error, self._on_item, self._on_chunk = on_failed, on_error, on_item, on_chunk

    def item_property(self, tag: tuple[str, Any]) -> tuple[str, str]:
        """The ``user_properties`` entry that marks an eval item of (benchmark, model): one shared tuple each."""
        found = self._item_properties.get(tag)
        if found is None:
            found = self._item_properties[tag] = (ITEM_KEY, json.dumps({"benchmark": tag[0], "model": str(tag[1])}))
        return found

    def take(self, report: pytest.TestReport, *, slim: bool) -> None:
        """Take the row, error and progress an eval item's report carries; other reports are left alone. With
        ``slim`` (a session above the report's trim limit), the report lets go of the row it carried."""
        if not self.open:
            return
        props = dict(report.user_properties)
        if ITEM_KEY not in props:
            return
        key = self._item_keys.get(props[ITEM_KEY])
        if key is None:  # each distinct tag is parsed once (three reports an item, from any process)
            item = json.loads(props[ITEM_KEY])
            key = self._item_keys[props[ITEM_KEY]] = (item["benchmark"], item["model"])
        # an item skipped after its model failed permanently was not evaluated: it counts as errored
        errored = report.failed or (report.skipped and ERROR_KEY in props)
        if report.skipped and ERROR_KEY in props:
            self.skipped_after_permanent[key[1]] += 1
        if report.failed:
            self._on_failed()
        if errored:
            self._count_error(key, report, props)
        if report.when == "call" and report.passed:
            for name, value in report.user_properties:
                if name == ROW_KEY:  # to the spool as its JSON text, parsed once at the end (run.spool)
                    self.spool.add(key[0], report.nodeid, value)
                    if self.stage is not None and self.stage.add(key[0], report.nodeid, value):
                        self._on_chunk()
        if slim and report.when in ("call", "teardown"):
            # the row is taken: neither the reports pytest keeps nor pytest-json-report hold a second copy of it
            report.user_properties = [(k, v) for k, v in report.user_properties if k != ROW_KEY]
        if report.when == "call" or (report.when == "setup" and not report.passed):  # the item is over
            self._on_item(key, errored)

    def _count_error(self, key: Key, report: pytest.TestReport, props: dict[str, str]) -> None:
        self.errors[key] += 1
        if EPOCH_KEY in props:
            self.errored_epochs[key][props[EPOCH_KEY]] += 1
        error = json.loads(props[ERROR_KEY]) if ERROR_KEY in props else {"kind": "error", "detail": report.when}
        self.error_details[key][error["detail"]] += 1
        self._on_error(key[1], error)
        self.failed_items.append({"benchmark": key[0], "model": key[1], "item": report.nodeid,
                                  "case_id": props.get(CASE_KEY), **failure_class(report, props.get(ERROR_KEY))})

    def add_rows(self, bench: str, rows: list[dict]) -> None:
        """Add rows scored before this session (``--resume``), kept in node id order."""
        self.rows()[bench].extend(rows)
        self._rows[bench].sort(key=itemgetter("nodeid"))

    def rows(self) -> dict[str, list[dict]]:
        """Every recorded row by benchmark, in node id order; the spooled rows are parsed here, once, when first
        read after new ones came."""
        if self.spool:
            for name, rows in self.spool.drain(self._shared).items():  # each in node id order
                if self._rows[name]:  # after a --resume's stored rows, or rows parsed earlier
                    self._rows[name].extend(rows)
                    self._rows[name].sort(key=itemgetter("nodeid"))
                else:
                    self._rows[name] = rows
        return self._rows

    def sorted_rows(self, benchmark: str) -> list[dict]:
        """A copy of a benchmark's rows, in node id order whatever order the workers finished in."""
        return list(self.rows().get(benchmark, []))

    def row_lines(self) -> Iterator[dict | bytes]:
        """Every row for the rows file, by benchmark and then node id: as its spool line where that is the row's
        own JSON, else as the row. The spool file goes once they have all been given."""
        for name in sorted(self.rows()):
            yield from self.spool.lines(name, self.sorted_rows(name))
        self.spool.discard()

    def counts(self) -> dict[str, int]:
        """Rows taken per benchmark, parsed or not."""
        return dict(Counter({name: len(rows) for name, rows in self._rows.items()}) + self.spool.counts())

    def has_results(self) -> bool:
        """Whether any eval item reported a row or an error."""
        return bool(self._rows or self.spool or self.errors)

    def errored_items(self) -> int:
        """Errored items, a repeated item (``--epochs``) once however many of its epochs errored."""
        return sum(len(self.errored_epochs[key]) if self.errored_epochs.get(key) else count
                   for key, count in self.errors.items())

    def error_lines(self) -> list[str]:
        """One line per model with errors: the count and the most common reasons."""
        lines = []
        for (bench, model), count in sorted(self.errors.items()):
            reasons = "; ".join(f"{detail} (x{n})" for detail, n in self.error_details[(bench, model)].most_common(2))
            repeated = self.errored_epochs.get((bench, model))
            failed = f"{count} epoch(s) of {len(repeated)} item(s)" if repeated else f"{count} item(s)"
            lines.append(f"fieldeval errors: {bench} {model}: {failed} failed: {reasons}")
        for model, count in sorted(self.skipped_after_permanent.items()):
            lines.append(f"fieldeval: {model}: {count} item(s) skipped after its permanent failure, "
                         "no call made (counted as errors)")
        return lines

    def _shared(self, row: dict) -> dict:
        """The row, each text value now the one copy earlier rows hold of it, field by field. A field whose values
        mostly differ (a case id) stops being shared once it has :data:`SHARED_DISTINCT` distinct values."""
        memos = self._strings
        for key, value in row.items():
            if type(value) is str:
                memo = memos.get(key)
                if memo is None:
                    memo = memos[key] = {}
                elif memo is _DISTINCT:
                    continue
                row[key] = memo.setdefault(value, value)
                if len(memo) > SHARED_DISTINCT:
                    memos[key] = _DISTINCT
        return row

    def close(self) -> None:
        """Close the spool (its file goes with the session folder)."""
        self.spool.close()


__all__ = ["Intake", "SHARED_DISTINCT"]
