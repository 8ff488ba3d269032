"""An eval session's payload and rows flattened into the store's table rows; no database here."""

from __future__ import annotations

import functools
import json
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from fieldeval.benchmark import StoreColumns
from fieldeval.errors import UsageError
from fieldeval.rows import column
from fieldeval.store.schema import utcnow

# row keys with a column of their own in evaluation_responses (or none at all), and the bulky text of an item
# (what was sent, the scorer's evidence): not copied into ``metrics``, which --where and --sort read, but row_extra
ROW_COLUMNS = {"benchmark", "model", "case_id", "item_id", "corpus_item_id", "nodeid", "response_text", "raw_response",
               "response_time_s", "prompt_tokens", "completion_tokens", "est_cost_usd", "cached", "scored_at",
               "case_key", "cluster", "cluster_stratum", "system", "prompt", "earlier_calls", "evidence", "options"}
UNDECLARED = StoreColumns()


@dataclass(frozen=True)
class FlatRun:
    """One run as rows of ``evaluations``, ``evaluation_benchmarks``, ``evaluation_metrics``, ``evaluation_responses``."""

    run_id: str
    run: dict[str, Any]
    benchmarks: list[dict[str, Any]]
    metrics: list[dict[str, Any]]
    responses: ResponseRows
    errors: list[dict[str, Any]] = field(default_factory=list)
    scored_at: Any = None  # the time of a response row that has none of its own


@dataclass
class ResponseRows:
    """A run's ``evaluation_responses`` rows, built and made storable a batch at a time: a run of 100,000
    items never holds them all at once."""

    make: Callable[[], Iterator[dict[str, Any]]]
    count: int

    def __len__(self) -> int:
        return self.count

    def batches(self, size: int | None = None) -> Iterator[list[dict[str, Any]]]:
        """The rows, ``size`` (default :data:`CHECK_CHUNK`) at a time, their JSON columns already encoded as text
        under the parameter names of :data:`JSON_TEXT`."""
        rows = self.make()
        while batch := list(islice(rows, size or CHECK_CHUNK)):
            yield batch


# the JSON columns of evaluation_responses, passed to the insert as their encoded text under these names
JSON_TEXT = {"metrics": "metrics_text", "row_extra": "row_extra_text"}


def _plain_json(value: Any) -> Any:
    """A value JSON has no form for, made plain: a numpy scalar's item, else its text."""
    return value.item() if hasattr(value, "item") else str(value)


_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=_plain_json).encode


def _clean_text(text: str) -> bool:
    """Whether a string (or a JSON text, which writes NUL as ``\\u0000``) is free of NUL and lone surrogates."""
    if "\x00" in text or "\\u0000" in text:
        return False
    if text.isascii():  # a lone surrogate is not ASCII
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def metric_entries(entry: Mapping[str, Any], prefix: str = "") -> Iterable[tuple[str, Mapping[str, Any]]]:
    """``(dotted name, {"value","ci95","n"})`` for every metric in a payload entry, nested ones included."""
    for key, value in entry.items():
        if not isinstance(value, Mapping):
            continue
        name = f"{prefix}{key}"
        if "value" in value and ("ci95" in value or "n" in value):
            yield name, value
        else:
            yield from metric_entries(value, prefix=f"{name}.")


def number(value: Any) -> float | None:
    """A float, or None for missing and non-numeric values."""
    if value is None or isinstance(value, str):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def integer(value: Any) -> int | None:
    """An int, or None for missing values."""
    found = number(value)
    return None if found is None else int(round(found))


def storable(value: Any) -> Any:
    """Strings that every store accepts, in dicts and lists too: NUL as ``\\x00`` and lone surrogates as
    ``\\udXXX`` (PostgreSQL rejects both in text and JSON); every other character is kept."""
    if isinstance(value, list | tuple) and len(value) > CHECK_CHUNK:  # a run's rows: checked a chunk at a time
        return [item for start in range(0, len(value), CHECK_CHUNK)
                for item in storable(value[start:start + CHECK_CHUNK])]
    if isinstance(value, Mapping | list | tuple) and _clean(value):
        return value
    return _storable(value)


CHECK_CHUNK = 2_000  # rows encoded at once by storable's check (bounds its memory)


def _clean(value: Any) -> bool:
    """Whether nothing in a dict or list needs :func:`storable`'s care (one JSON encoding, no walk in Python)."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=repr)
    except (TypeError, ValueError, RecursionError):
        return False
    return _clean_text(text)


def _storable(value: Any) -> Any:
    if isinstance(value, str):
        if "\x00" in value:
            value = value.replace("\x00", "\\x00")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            value = value.encode("utf-8", "backslashreplace").decode("utf-8")
        return value
    if isinstance(value, Mapping):
        return {_storable(k): _storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_storable(v) for v in value]
    return value


_PLAIN = {str, int, float, bool, type(None)}
_TEXT = {str}


def json_ready(value: Any) -> Any:
    """The value after a JSON round trip (numpy scalars, paths and sets become plain JSON)."""
    if type(value) is dict and set(map(type, value)) <= _TEXT and set(map(type, value.values())) <= _PLAIN:
        return dict(value)  # a flat row of plain values: the round trip would give it back as it is
    return json.loads(json.dumps(value, default=_plain_json))


def _per_benchmark(value: str | Mapping[str, str] | None, benchmark: str) -> str | None:
    """A meta value that is either one string for every benchmark or a dict by benchmark."""
    if isinstance(value, Mapping):
        found = value.get(benchmark)
        return None if found is None else str(found)
    return None if value is None else str(value)


def _headline(benchmark: str, entry_models: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The benchmark's headline metrics as it declares them, or every metric of the run."""
    from fieldeval.benchmark import benchmarks

    bench = benchmarks().get(benchmark)
    if bench is not None:
        return bench.headline
    names: dict[str, None] = {}
    for entry in entry_models.values():
        names.update((name, None) for name, _ in metric_entries(entry) if "." not in name)
    return list(names)


def _totals(rows_by_benchmark: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Items, tokens, cost, time and cache hits per model, over every benchmark: time and cost summed exactly
    (:func:`~fieldeval.run.totals.summed`), kept in full precision; a view rounds them as the report does
    (:func:`~fieldeval.run.totals.shown`)."""
    from fieldeval.run.totals import summed

    totals: dict[str, dict[str, Any]] = {}
    seconds: dict[str, list[float]] = {}
    costs: dict[str, list[float]] = {}
    for rows in rows_by_benchmark.values():
        for model, group in _by_model(rows).items():
            total = totals.setdefault(model, {
                "items": 0, "cached": 0, "prompt_tokens": 0, "completion_tokens": 0,
                "est_cost_usd": None, "response_time_s": 0.0})
            total["items"] += len(group)
            total["cached"] += sum(map(bool, column(group, "cached")))
            for key in ("prompt_tokens", "completion_tokens"):
                total[key] += sum(integer(value) or 0 for value in column(group, key))
            seconds.setdefault(model, []).extend(number(value) or 0.0 for value in column(group, "response_time_s"))
            costs.setdefault(model, []).extend(number(value) for value in column(group, "est_cost_usd"))
    for model, total in totals.items():
        total["response_time_s"] = summed(seconds[model]) or 0.0
        total["est_cost_usd"] = summed(costs[model])
    return totals


def _by_model(rows: Sequence[Mapping[str, Any]]) -> dict[str, Sequence[Mapping[str, Any]]]:
    """A benchmark's rows by model (``str`` of each row's ``model``), in row order: the rows themselves when
    they are all one model's."""
    models = list(map(str, column(rows, "model")))
    if len(set(models)) <= 1:
        return {models[0]: rows} if models else {}
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for model, row in zip(models, rows):
        groups.setdefault(model, []).append(row)
    return groups


def _benchmark_rows(run_id: str, bench_payload: Mapping[str, Mapping[str, Any]],
                    rows_by_benchmark: Mapping[str, Sequence[Mapping[str, Any]]],
                    meta: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One ``evaluation_benchmarks`` row per benchmark of the run."""
    headlines = meta.get("headline") or {}
    out = []
    for bench in sorted({*bench_payload, *rows_by_benchmark}):
        entries = bench_payload.get(bench, {})
        items = sum(integer(e.get("items")) or 0 for e in entries.values()) if entries else None
        row_versions = {str(r["corpus_version"]) for r in rows_by_benchmark.get(bench, []) if r.get("corpus_version")}
        out.append({
            "run_id": run_id, "benchmark": bench,
            "corpus_version": _per_benchmark(meta.get("corpus_version"), bench)
            or (row_versions.pop() if len(row_versions) == 1 else None),
            "content_hash": _per_benchmark(meta.get("content_hash"), bench),
            "headline": list(headlines.get(bench) or _headline(bench, entries)),
            "total_items": items if items is not None else len(rows_by_benchmark.get(bench, [])),
        })
    return out


def _metric_rows(run_id: str, bench_payload: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One ``evaluation_metrics`` row per (benchmark, model, metric), nested metrics under dotted names."""
    out = []
    for bench, entries in bench_payload.items():
        for model, entry in entries.items():
            for metric, value in metric_entries(entry):
                ci = list(value.get("ci95") or [None, None]) + [None, None]
                out.append({"run_id": run_id, "benchmark": bench, "model": str(model), "metric": metric,
                            "value": number(value.get("value")), "ci_lo": number(ci[0]),
                            "ci_hi": number(ci[1]), "n": integer(value.get("n"))})
    return out


def _declared_run_values(bench_payload: Mapping[str, Mapping[str, Any]],
                         columns: Mapping[str, StoreColumns]) -> dict[str, float | None]:
    """The declared ``evaluations`` columns of each benchmark that ran exactly one model (the seed's one-model run)."""
    values: dict[str, float | None] = {}
    for bench, declared in columns.items():
        entries = bench_payload.get(bench, {})
        if len(entries) != 1:
            continue
        (entry,) = entries.values()
        for name in declared.run:
            value = entry.get(name)
            values[name] = number(value.get("value") if isinstance(value, Mapping) else value)
    return values


@functools.lru_cache(maxsize=256)
def _split(keys: tuple[str, ...], item_id: str | None) -> tuple[tuple[str, ...], Callable, tuple[str, ...], Callable]:
    """A row's keys split into its ``metrics`` (no column of their own, not the item id) and its ``row_extra``,
    each with what takes their values from a row: computed once per shape of row (a benchmark's rows share one)."""
    metric_keys = tuple(k for k in keys if k not in ROW_COLUMNS and k != item_id)
    extra_keys = tuple(k for k in keys if k not in metric_keys)
    return metric_keys, _taker(metric_keys), extra_keys, _taker(extra_keys)


def _taker(keys: tuple[str, ...]) -> Callable[[Mapping[str, Any]], tuple]:
    """What takes the values of ``keys`` from a row, as a tuple in their order."""
    if len(keys) == 1:
        return lambda row: (row[keys[0]],)
    return operator.itemgetter(*keys) if keys else (lambda row: ())


def declared_response_columns(columns: Mapping[str, StoreColumns]) -> dict[str, None]:
    """Every benchmark's declared ``evaluation_responses`` columns, in order: what :func:`response_row` fills."""
    return {name: None for declared in columns.values() for name in declared.response}


def response_row(run_id: str, bench: str, row: Mapping[str, Any], declared: StoreColumns,
                 response_columns: Iterable[str], scored_at: Any) -> dict[str, Any]:
    """One ``evaluation_responses`` row: the benchmark's declared columns as integers, other benchmarks' None;
    ``metrics`` and ``row_extra`` (together, the row) encoded once as JSON text under :data:`JSON_TEXT`'s names,
    every text :func:`storable`."""
    item_keys = ("corpus_item_id", declared.item_id, "case_id", "item_id", "nodeid")
    metric_keys, take_metrics, extra_keys, take_extra = _split(tuple(row), declared.item_id)
    metrics = dict(zip(metric_keys, take_metrics(row)))
    extra = dict(zip(extra_keys, take_extra(row)))
    out = {
        "run_id": run_id, "benchmark": bench, "model": str(row.get("model")),
        "corpus_item_id": str(next((row[key] for key in item_keys if row.get(key)), "")),
        "raw_response": row.get("raw_response", row.get("response_text")),
        "metrics_text": _encode(metrics),
        "row_extra_text": _encode(extra),
        "response_time_s": number(row.get("response_time_s")),
        "prompt_tokens": integer(row.get("prompt_tokens")),
        "completion_tokens": integer(row.get("completion_tokens")),
        "est_cost_usd": number(row.get("est_cost_usd")),
        "cached": None if row.get("cached") is None else bool(row.get("cached")),
        "scored_at": row.get("scored_at") or scored_at,
        **{name: integer(row.get(name)) if name in declared.response else None for name in response_columns},
    }
    if _clean_text("\x1f".join(v for v in out.values() if type(v) is str)):  # one check of every text
        return out
    out.update({k: _storable(v) for k, v in out.items() if type(v) is str and k not in JSON_TEXT.values()})
    out.update({text: _encode(_storable(json_ready(part))) for text, part in
                ((JSON_TEXT["metrics"], metrics), (JSON_TEXT["row_extra"], extra))})
    return out


def _error_rows(run_id: str, errors: Iterable[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    """One ``evaluation_errors`` row per errored item of ``meta["errors"]``."""
    out = []
    for error in errors or ():
        if not isinstance(error, Mapping):
            raise UsageError(f"save_run: meta['errors'] holds {error!r}; pass dicts with benchmark, model, item, "
                             "error_class and message")
        out.append({"run_id": run_id, "benchmark": str(error.get("benchmark") or ""),
                    "model": str(error.get("model") or ""), "item_id": str(error.get("item") or ""),
                    "error_class": str(error.get("error_class") or "Exception"),
                    "message": None if error.get("message") is None else str(error["message"]),
                    "case_id": None if error.get("case_id") is None else str(error["case_id"])})
    return out


def flatten_run(payload: Mapping[str, Any], rows_by_benchmark: Mapping[str, Sequence[Mapping[str, Any]]],
                meta: Mapping[str, Any], columns: Mapping[str, StoreColumns]) -> FlatRun:
    """The table rows of one run (see :meth:`fieldeval.store.Store.save_run` for the arguments)."""
    run_id = str(payload.get("run_id") or "")
    if not run_id:
        raise UsageError("save_run: the payload has no run_id; pass EvalSession.payload()")
    bench_payload: Mapping[str, Mapping[str, Any]] = payload.get("benchmarks") or {}
    now = utcnow()
    bench_rows = _benchmark_rows(run_id, bench_payload, rows_by_benchmark, meta)
    scored_at = meta.get("completed_at") or now
    response_columns = declared_response_columns(columns)

    def response_rows() -> Iterator[dict[str, Any]]:
        return (response_row(run_id, b["benchmark"], row, columns.get(b["benchmark"], UNDECLARED),
                             response_columns, scored_at)
                for b in bench_rows for row in rows_by_benchmark.get(b["benchmark"], []))

    if meta.get("rows_from"):  # a merged run refers to its shards' stored rows
        responses = ResponseRows(lambda: iter(()), 0)
    else:
        responses = ResponseRows(response_rows, sum(len(rows_by_benchmark.get(b["benchmark"], [])) for b in bench_rows))
    versions = {r["corpus_version"] for r in bench_rows}
    hashes = {r["content_hash"] for r in bench_rows}
    ontology = payload.get("ontology_version")
    run = {
        "run_id": run_id,
        "model_id": None,
        "label": meta.get("label"),
        "benchmarks": [r["benchmark"] for r in bench_rows],
        "models": sorted({str(m) for b in bench_payload.values() for m in b}
                         | {str(r.get("model")) for rows in rows_by_benchmark.values() for r in rows}),
        "corpus_version": versions.pop() if len(versions) == 1 else None,
        "content_hash": hashes.pop() if len(hashes) == 1 else None,
        "ontology_version": ontology if isinstance(ontology, str) or ontology is None else json.dumps(ontology),
        "git_commit": meta.get("git_commit"),
        "status": meta.get("status") or "completed",
        "total_items": sum(r["total_items"] or 0 for r in bench_rows),
        "totals": json_ready(meta.get("totals") or _totals(rows_by_benchmark)),
        "payload": json_ready(payload),
        "created_at": payload.get("started_at") or now,
        "completed_at": meta.get("completed_at") or now,
        "run_group": meta.get("run_group"), "shard_index": integer(meta.get("shard_index")),
        "shard_count": integer(meta.get("shard_count")), "settings": json_ready(meta.get("settings")),
        "settings_hash": meta.get("settings_hash"),
        "items_planned": integer(meta.get("items_planned")),
        "items_done": integer(meta.get("items_done")),
        "items_errored": integer(meta.get("items_errored")),
        "unverified": True if meta.get("unverified") else None,
        **_declared_run_values(bench_payload, columns),
    }
    return FlatRun(run_id, storable(run), storable(bench_rows), storable(_metric_rows(run_id, bench_payload)),
                   responses, storable(_error_rows(run_id, meta.get("errors"))), scored_at)
