"""A run's items, one at a time or a page at a time, read through the store's indexes (never the whole run).

An item is one stored response (``evaluation_responses``, status ``scored``)
or one errored item (``evaluation_errors``, status ``errored``). Every item
has the columns of :data:`BASE_COLUMNS` and its benchmark's score columns
(``Benchmark.items.scores``), which ``where`` filters on and ``sort`` orders by.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from fieldeval.errors import UsageError
from fieldeval.store.item_records import (
    BASE_COLUMNS,
    error_record,
    explanation,
    item_columns,
    item_record,
    score_columns,
    whole,
)
from fieldeval.store.run_reads import require_runs, row_runs
from fieldeval.store.schema import Tables
from fieldeval.store.where import Where

_NUMBER_TYPES = {"sqlite": ("integer", "real", "true", "false"), "postgresql": ("number", "boolean")}


@dataclass(frozen=True)
class _Part:
    """One of the two tables items come from, with what each item column is in it."""

    table: sa.Table
    status: str
    key: sa.ColumnElement
    case_id: sa.ColumnElement

    def text(self, name: str, dialect: str) -> sa.ColumnElement:
        """Column ``name`` of this part as text (None where the part has no such column)."""
        t = self.table
        if name in ("benchmark", "model"):
            return t.c[name]
        if name == "case_id":
            return self.case_id
        if name == "status":
            return sa.literal(self.status)
        if self.status == "errored":
            return sa.null()
        if name == "cluster":
            return _json_text(t.c.row_extra, "cluster", dialect)
        if name == "stratum":
            return sa.func.coalesce(_json_text(t.c.row_extra, "cluster_stratum", dialect),
                                    _json_text(t.c.metrics, "stratum", dialect))
        if name in t.c:
            return sa.cast(t.c[name], sa.Text)
        return _json_text(t.c.metrics, name, dialect)

    def number(self, name: str, dialect: str) -> sa.ColumnElement:
        """Column ``name`` of this part as a number (None where it is not a number or a boolean)."""
        t = self.table
        if self.status == "errored" or name in BASE_COLUMNS:
            return sa.null()
        if name in t.c:
            return sa.cast(t.c[name], sa.Float)
        kind = _json_type(t.c.metrics, name, dialect)
        if dialect == "postgresql":
            value = _json_text(t.c.metrics, name, dialect)
            return sa.case((kind == "number", sa.cast(value, sa.Float)),
                           (kind == "boolean", sa.case((value == "true", 1.0), else_=0.0)))
        return sa.case((kind.in_(_NUMBER_TYPES["sqlite"]), sa.func.json_extract(t.c.metrics, _path(name))))


def _path(key: str) -> str:
    return '$."' + key.replace('"', '') + '"'


def _json_text(column: sa.ColumnElement, key: str, dialect: str) -> sa.ColumnElement:
    if dialect == "postgresql":
        return column.op("->>")(sa.literal(key))
    return sa.func.json_extract(column, _path(key))


def _json_type(column: sa.ColumnElement, key: str, dialect: str) -> sa.ColumnElement:
    if dialect == "postgresql":
        return sa.func.jsonb_typeof(column.op("->")(sa.literal(key)))
    return sa.func.json_type(column, _path(key))


def _is_case(part: _Part, case_id: str) -> Any:
    """The condition that a row of ``part`` is the item of ``case_id``: an errored item stored before its case id
    was (and not filled in by migration 9) is matched by its node id's parameters, where the case id is one part
    (``[forest_biome-case009-m]``)."""
    if part.status == "scored":
        return part.case_id == case_id
    errors = part.table
    by_node = sa.or_(*(errors.c.item_id.contains(text, autoescape=True)
                       for text in (f"[{case_id}-", f"-{case_id}-", f"-{case_id}]")))
    return sa.or_(errors.c.case_id == case_id, sa.and_(errors.c.case_id.is_(None), by_node))


def _parts(tables: Tables) -> tuple[_Part, _Part]:
    r, e = tables.evaluation_responses, tables.evaluation_errors
    return (_Part(r, "scored", r.c.response_id, r.c.corpus_item_id),
            _Part(e, "errored", e.c.error_id, sa.func.coalesce(e.c.case_id, e.c.item_id)))



def _filters(part: _Part, run_ids: Sequence[str], benchmark: str | None, model: str | None,
             where: Where | None, dialect: str) -> list[sa.ColumnElement]:
    t = part.table
    out = [t.c.run_id.in_(run_ids) if len(run_ids) > 1 else t.c.run_id == run_ids[0]]
    if benchmark:
        out.append(t.c.benchmark == benchmark)
    if model:
        out.append(t.c.model == model)
    if where is not None:
        out.append(where.clause(part, dialect))
    return out


def _source_order(part: _Part, run_ids: Sequence[str]) -> list[sa.ColumnElement]:
    if len(run_ids) == 1:
        return [part.key]
    return [sa.case({r: i for i, r in enumerate(run_ids)}, value=part.table.c.run_id), part.key]


def _sort_key(sort: str, columns: Sequence[str]) -> tuple[str, bool]:
    name, descending = (sort[1:], True) if sort.startswith("-") else (sort, False)
    if name not in columns:
        raise UsageError(f"--sort {sort!r}: unknown column {name!r}; choose from {', '.join(columns)} "
                         "(a leading - sorts descending)")
    return name, descending


def items_page(store: Any, run_id: str, *, benchmark: str | None = None, model: str | None = None,
               where: str | None = None, sort: str | None = None, limit: int | None = 50,
               offset: int = 0) -> dict[str, Any]:
    """One page of a run's items, scored then errored (or in ``sort``'s order), and how many items match.

    Args:
        store: an open :class:`~fieldeval.store.Store`.
        run_id: a stored run id.
        benchmark: only this benchmark's items.
        model: only this model's items.
        where: a filter on the item columns, e.g. ``"ontology_score < 0.5"`` or ``"relationship == 'ancestor'"``.
        sort: a column to order by (``-column``: descending); items without a value come last.
        limit: items per page (None: every matching item).
        offset: items skipped before the page.

    Returns:
        ``{"total": N, "items": [...]}``: each item as :func:`item_record` gives it, without its system
        text and prompt.

    Raises:
        UsageError: an unknown run, column or a malformed ``where``; a negative limit or offset.

    Example:
        >>> items_page(store, "run_3b9e204a", where="ontology_score < 0.5", limit=2)["total"]  # doctest: +SKIP
        17
    """
    if limit is not None and limit < 0 or offset < 0:
        raise UsageError(f"limit {limit} / offset {offset}: pass whole numbers of at least 0")
    columns = item_columns(benchmark)
    parsed = Where(where, columns) if where else None
    order = _sort_key(sort, columns) if sort else None
    scored, errored = _parts(store.tables)
    with store.engine.connect() as conn:
        require_runs(conn, store.tables, [run_id], store.url)
        sources = row_runs(conn, store.tables, run_id)
        dialect = conn.dialect.name
        conds = {p.status: _filters(p, sources, benchmark, model, parsed, dialect) for p in (scored, errored)}
        counts = {p.status: conn.execute(sa.select(sa.func.count()).select_from(p.table)
                                         .where(*conds[p.status])).scalar_one() for p in (scored, errored)}
        keys = _page_keys(conn, (scored, errored), conds, counts, sources, order, limit, offset, dialect)
        items = _read(conn, store.tables, keys, run_id)
    return {"total": counts["scored"] + counts["errored"], "items": items}


def _page_keys(conn: Connection, parts: tuple[_Part, _Part], conds: Mapping[str, list], counts: Mapping[str, int],
               sources: Sequence[str], order: tuple[str, bool] | None, limit: int | None, offset: int,
               dialect: str) -> list[tuple[str, int]]:
    """The (status, key) of each item on the page, in the page's order."""
    if order is None:
        out: list[tuple[str, int]] = []
        for part in parts:
            skip = max(0, offset - (counts["scored"] if part.status == "errored" else 0))
            room = None if limit is None else limit - len(out)
            if room == 0 or skip >= counts[part.status]:
                continue
            query = (sa.select(part.key).where(*conds[part.status]).order_by(*_source_order(part, sources))
                     .offset(skip).limit(room))
            out.extend((part.status, key) for key in conn.execute(query).scalars())
        return out
    name, descending = order
    selects = []
    for rank, part in enumerate(parts):
        numeric = part.number(name, dialect)
        text = part.text(name, dialect) if name in BASE_COLUMNS or part.status == "errored" else sa.null()
        if part.status == "scored" and name not in BASE_COLUMNS:
            text = sa.case((numeric.is_(None), part.text(name, dialect)))
        position = (sa.case({r: i for i, r in enumerate(sources)}, value=part.table.c.run_id)
                    if len(sources) > 1 else sa.literal(0))
        selects.append(sa.select(sa.literal(rank).label("part"), part.key.label("key"), position.label("pos"),
                                 numeric.label("num"), text.label("txt")).where(*conds[part.status]))
    u = sa.union_all(*selects).subquery()
    keyed = [u.c.num.desc() if descending else u.c.num.asc(), u.c.txt.desc() if descending else u.c.txt.asc()]
    query = (sa.select(u.c.part, u.c.key)
             .order_by(u.c.num.is_(None), keyed[0], u.c.txt.is_(None), keyed[1], u.c.part, u.c.pos, u.c.key)
             .offset(offset).limit(limit))
    return [(parts[p].status, key) for p, key in conn.execute(query).all()]


def _read(conn: Connection, tables: Tables, keys: Sequence[tuple[str, int]], run_id: str) -> list[dict[str, Any]]:
    """The items of these keys, in their order."""
    r, e = tables.evaluation_responses, tables.evaluation_errors
    found: dict[tuple[str, int], dict[str, Any]] = {}
    scored = [k for s, k in keys if s == "scored"]
    errored = [k for s, k in keys if s == "errored"]
    for start in range(0, len(scored), 500):
        for row in conn.execute(sa.select(r).where(r.c.response_id.in_(scored[start:start + 500]))):
            found["scored", row.response_id] = item_record(row._asdict(), tables, run_id)
    for start in range(0, len(errored), 500):
        for row in conn.execute(sa.select(e).where(e.c.error_id.in_(errored[start:start + 500]))):
            found["errored", row.error_id] = error_record(row._asdict(), run_id)
    return [found[key] for key in keys if key in found]


def find_item(store: Any, run_id: str, case_id: str, *, benchmark: str | None = None,
              model: str | None = None) -> dict[str, Any]:
    """One item of a run by its case id, as :func:`item_record` or :func:`error_record` gives it.

    Raises:
        UsageError: the run or the case is not stored, or the case id names items of several benchmarks or
            models (pass ``benchmark`` / ``model``).
    """
    t = store.tables
    with store.engine.connect() as conn:
        require_runs(conn, t, [run_id], store.url)
        sources = row_runs(conn, t, run_id)
        found: list[dict[str, Any]] = []
        for part in _parts(t):
            conds = _filters(part, sources, benchmark, model, None, conn.dialect.name)
            query = sa.select(part.table).where(*conds, _is_case(part, case_id)).limit(20)
            for row in conn.execute(query):
                values = row._asdict()
                found.append(item_record(values, t, run_id) if part.status == "scored" else error_record(values, run_id))
    if not found:
        raise ItemNotFound(run_id, case_id, benchmark, model)
    pairs = sorted({(item["benchmark"], item["model"]) for item in found})
    if len(pairs) > 1:
        raise AmbiguousItem(run_id, case_id, pairs)
    return found[0]


def _options(pairs: Sequence[tuple[str, Any]], *, flags: bool) -> str:
    """The given (name, value) pairs as ``--name value`` (flags) or ``name=value``, each after a space."""
    return "".join(f" --{name} {value}" if flags else f" {name}={value}" for name, value in pairs if value)


class ItemNotFound(UsageError):
    """No item of the run has the case id (in the benchmark / model asked for)."""

    def __init__(self, run_id: str, case_id: str, benchmark: str | None, model: str | None) -> None:
        self.run_id, self.case_id, self.narrowed = run_id, case_id, (("benchmark", benchmark), ("model", model))
        super().__init__(f"case {case_id!r}: no item of run {run_id}{_options(self.narrowed, flags=True)}; "
                         f"run `fieldeval runs items {run_id}` for its case ids")

    def worded(self, *, flags: bool, listing: str) -> str:
        """The message with the options written as flags (``--model m``) or query parameters (``model=m``)."""
        return f"case {self.case_id!r}: no item of run {self.run_id}{_options(self.narrowed, flags=flags)}; {listing}"


class AmbiguousItem(UsageError):
    """The case id names items of several benchmarks or models."""

    def __init__(self, run_id: str, case_id: str, pairs: Sequence[tuple[str, str]]) -> None:
        self.run_id, self.case_id, self.pairs = run_id, case_id, list(pairs)
        super().__init__(self.worded(flags=True))

    def worded(self, *, flags: bool) -> str:
        """The message naming the options to pass as flags (``--model``) or query parameters (``model=``)."""
        names = ["model"] if len({b for b, _ in self.pairs}) == 1 else ["benchmark", "model"]
        choose = " and ".join(f"--{n}" if flags else f"{n}=" for n in names)
        return (f"case {self.case_id!r} of run {self.run_id} is an item of "
                f"{', '.join(f'{b}/{m}' for b, m in self.pairs)}; pass {choose} to choose one")


def item_whole(store: Any, run_id: str, case_id: str, *, benchmark: str | None = None,
               model: str | None = None) -> dict[str, Any]:
    """One item whole, as ``fieldeval runs item --json`` prints it and
    ``GET /api/evaluations/{run_id}/responses/{case_id}`` returns it.

    Keys: the item columns (``benchmark``, ``model``, ``case_id``, ``cluster``, ``stratum``, ``status``);
    ``system`` and ``prompt`` exactly as sent (None for a run recorded before prompts were kept),
    ``earlier_calls`` (the item's calls before its answer, e.g. MicrobioRel's summary: ``system``, ``prompt``,
    ``response_text`` each), ``response_text``; ``scores`` (every score column), ``explanation``;
    ``prompt_tokens``, ``completion_tokens``, ``est_cost_usd``, ``response_time_s``, ``cached``; ``error``
    (``error_class`` and ``message``, for an errored item); the spec's response fields (``response_id``,
    ``run_id``, ``corpus_item_id``, ``raw_response``, the benchmark's declared columns, ``scored_at``); and
    ``recorded``: every other key the item recorded.

    Raises:
        UsageError: as :func:`find_item`.
    """
    item = find_item(store, run_id, case_id, benchmark=benchmark, model=model)
    return whole(item)



FRAME_TAIL = ("response_text", "system", "prompt", "prompt_tokens", "completion_tokens", "est_cost_usd",
              "response_time_s", "cached", "error_class", "error_message", "scored_at", "response_id")


def items_frame(run_id: str, store: Any = None) -> Any:
    """A stored run's items as a pandas DataFrame, one row per item (scored, then errored).

    Columns: :data:`BASE_COLUMNS`, the score columns of each benchmark the run holds, then
    :data:`FRAME_TAIL` (what was sent, the response, what the call cost and the error of an errored item).

    Args:
        run_id: a stored run id.
        store: an open :class:`~fieldeval.store.Store`, a store URL, or None: ``$FIELDEVAL_STORE``, else
            ``reports/fieldeval.db``.

    Raises:
        UsageError: no store there, or no such run.

    Example:
        >>> frame = items_frame("run_3b9e204a")  # doctest: +SKIP
        >>> frame.groupby("relationship")["ontology_score"].mean()  # doctest: +SKIP
    """
    import pandas as pd

    from fieldeval.store import declared_columns, open_store

    if store is None or isinstance(store, str):
        with open_store(store, columns=declared_columns(), create=False) as opened:
            return items_frame(run_id, opened)
    items = items_page(store, run_id, limit=None)["items"]
    columns = dict.fromkeys(BASE_COLUMNS)
    for bench in dict.fromkeys(item["benchmark"] for item in items):
        columns.update(dict.fromkeys(score_columns(bench).get(bench, ())))
    columns.update(dict.fromkeys(FRAME_TAIL))
    records = []
    for item in items:
        row, error = item.get("row") or {}, item.get("error") or {}
        records.append({**{name: item.get(name) for name in columns}, "system": row.get("system"),
                        "prompt": row.get("prompt"), "error_class": error.get("error_class"),
                        "error_message": error.get("message")})
    return pd.DataFrame.from_records(records, columns=list(columns))


__all__ = ["BASE_COLUMNS", "FRAME_TAIL", "AmbiguousItem", "ItemNotFound", "Where", "error_record", "explanation", "find_item", "item_columns", "item_record",
           "item_whole", "items_frame", "items_page", "score_columns", "whole"]
