"""What an item of a run is: its columns, its scored or errored record, and the whole of it that a reader sees.

An item is one stored response (``evaluation_responses``, status ``scored``)
or one errored item (``evaluation_errors``, status ``errored``); every item has
the columns of :data:`BASE_COLUMNS` and its benchmark's score columns.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from fieldeval.store.schema import Tables, iso

BASE_COLUMNS = ("benchmark", "model", "case_id", "cluster", "stratum", "status")
CALL_COLUMNS = ("prompt_tokens", "completion_tokens", "response_time_s", "est_cost_usd")  # what each item's calls cost


def score_columns(benchmark: str | None = None) -> dict[str, tuple[str, ...]]:
    """Each installed benchmark's item score columns (only ``benchmark``'s when given)."""
    from fieldeval.benchmark import benchmarks

    found = {name: bench.items.scores or tuple(m.name for m in bench.metrics) for name, bench in benchmarks().items()}
    return {benchmark: found.get(benchmark, ())} if benchmark else found


def item_columns(benchmark: str | None = None) -> tuple[str, ...]:
    """The columns ``where`` and ``sort`` may name: :data:`BASE_COLUMNS`, every score column, then the call's
    :data:`CALL_COLUMNS`."""
    names = dict.fromkeys(BASE_COLUMNS)
    for scores in score_columns(benchmark).values():
        names.update(dict.fromkeys(scores))
    names.update(dict.fromkeys(CALL_COLUMNS))
    return tuple(names)


def _loaded(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        value = json.loads(value)
    return dict(value or {})


def item_record(row: Mapping[str, Any], tables: Tables, run_id: str) -> dict[str, Any]:
    """A scored item from its ``evaluation_responses`` row: the item columns, its score columns, the spec's
    response fields, the call's tokens, cost, latency and cache flag, and ``row`` (every key its item recorded)."""
    metrics, extra = _loaded(row.get("metrics")), _loaded(row.get("row_extra"))
    recorded = {**metrics, **extra, **{name: row[name] for name in tables.response_columns
                                        if row.get(name) is not None}}
    bench = row["benchmark"]
    scores = {name: recorded.get(name) for name in score_columns(bench).get(bench, ())}
    text = row.get("raw_response")
    return {
        "benchmark": bench, "model": row["model"], "case_id": row["corpus_item_id"],
        "cluster": extra.get("cluster"), "stratum": extra.get("cluster_stratum", metrics.get("stratum")),
        "status": "scored", **scores, "response_text": text,
        "response_id": row["response_id"], "run_id": run_id, "corpus_item_id": row["corpus_item_id"],
        "raw_response": text, **{name: row.get(name) for name in _declared(bench) if name in tables.response_columns},
        "scored_at": iso(row.get("scored_at")),
        "prompt_tokens": row.get("prompt_tokens"), "completion_tokens": row.get("completion_tokens"),
        "est_cost_usd": row.get("est_cost_usd"), "response_time_s": row.get("response_time_s"),
        "cached": row.get("cached"), "error": None,
        "row": {**recorded, "benchmark": bench, "model": row["model"], "corpus_item_id": row["corpus_item_id"]},
    }


def _declared(benchmark: str) -> tuple[str, ...]:
    """The ``evaluation_responses`` columns ``benchmark`` declares (IBF's five dimensions, say)."""
    from fieldeval.store import declared_columns

    found = declared_columns().get(benchmark)
    return tuple(found.response) if found is not None else ()


def error_record(row: Mapping[str, Any], run_id: str) -> dict[str, Any]:
    """An errored item from its ``evaluation_errors`` row."""
    return {
        "benchmark": row["benchmark"], "model": row["model"], "case_id": row.get("case_id") or row["item_id"],
        "nodeid": row["item_id"], "cluster": None,
        "stratum": None, "status": "errored", "response_text": None, "response_id": None, "run_id": run_id,
        "corpus_item_id": row.get("case_id") or row["item_id"], "raw_response": None, "scored_at": None,
        "prompt_tokens": None, "completion_tokens": None, "est_cost_usd": None, "response_time_s": None,
        "cached": None, "error": {"error_class": row["error_class"], "message": row.get("message")}, "row": {},
    }


def explanation(item: Mapping[str, Any]) -> str | None:
    """Why a scored item scored what it did, in one or two sentences (its benchmark's ``items.explain``);
    None for an errored item or a benchmark that explains nothing."""
    from fieldeval.benchmark import benchmarks

    face = benchmarks().get(item["benchmark"])
    if face is None or item["status"] != "scored":
        return None
    return face.items.explain(item.get("row") or {}) or None


def whole(item: Mapping[str, Any]) -> dict[str, Any]:
    """An item of :func:`item_record` / :func:`error_record` in :func:`~fieldeval.store.items.item_whole`'s shape."""
    row = dict(item.get("row") or {})
    names = score_columns(item["benchmark"]).get(item["benchmark"], ())
    shown = {*names, *BASE_COLUMNS, "system", "prompt", "earlier_calls", "response_text", "raw_response",
             "corpus_item_id", "prompt_tokens", "completion_tokens", "est_cost_usd", "response_time_s", "cached",
             "cluster_stratum", "scored_at"}
    out = {name: item.get(name) for name in BASE_COLUMNS}
    out.update({
        "system": row.get("system"), "prompt": row.get("prompt"), "earlier_calls": row.get("earlier_calls") or [],
        "response_text": item.get("response_text"),
        "scores": {name: item.get(name) for name in names} if item["status"] == "scored" else {},
        "explanation": explanation(item),
    })
    spec = set(_declared(item["benchmark"]))
    out.update({key: value for key, value in item.items()
                if key not in out and key != "row" and (key not in names or key in spec)})
    out["recorded"] = {key: value for key, value in row.items() if key not in shown}
    return out
