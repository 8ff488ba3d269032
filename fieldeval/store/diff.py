"""The item-level diff of two stored runs: which items got worse or better, the outcome transitions, the flips.

:func:`diff_rows` is a pure function of two runs' rows (as :meth:`Store.run_rows` gives them);
:func:`run_diff` reads them from a store. Items pair by (benchmark, case) as paired differences do
(:func:`fieldeval.rows.case_key`); each is named by its case id, the id the store keeps it under.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fieldeval.errors import UsageError
from fieldeval.rows import by_nodeid, case_key
from scorers.ibf import DIMENSIONS as IBF_DIMENSIONS
from scorers.ibf import PASS_THRESHOLD as IBF_PASS

Rows = Mapping[str, Sequence[Mapping[str, Any]]]  # rows by benchmark
EBS_CLASSES = ("exact", "descendant", "ancestor", "unrelated", "parse failure")


def _flag(value: Any) -> bool | None:
    """A stored yes/no (bool, 0/1, or an epochs mean: the majority) as a bool; None when absent."""
    if value is None:
        return None
    return float(value) >= 0.5


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class Outcomes:
    """How one benchmark's item is read: its headline score, its binary metric and its outcome transitions."""

    score: Callable[[Mapping[str, Any]], float | None]
    binary_metric: str
    binary: Callable[[Mapping[str, Any]], bool | None]
    transitions: Callable[[Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]], list[dict[str, Any]]]


def ebs_relationship(row: Mapping[str, Any]) -> str:
    """``exact`` / ``descendant`` / ``ancestor`` / ``unrelated``, or ``parse failure`` when nothing parsed."""
    if row.get("parse_success") in (False, 0) or not row.get("relationship"):
        return "parse failure"
    return str(row["relationship"])


def _ebs_transitions(pairs: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> list[dict[str, Any]]:
    counts = Counter((ebs_relationship(a), ebs_relationship(b)) for a, b in pairs)
    order = {name: i for i, name in enumerate(EBS_CLASSES)}
    return [{"from": f, "to": t, "count": n}
            for (f, t), n in sorted(counts.items(), key=lambda kv: (order.get(kv[0][0], 9), order.get(kv[0][1], 9),
                                                                   kv[0]))]


def _correct(row: Mapping[str, Any]) -> str:
    flag = _flag(row.get("correct"))
    return "unscored" if flag is None else "correct" if flag else "wrong"


def _microbiorel_transitions(pairs: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> list[dict[str, Any]]:
    counts = Counter((str(a.get("gold")), _correct(a), _correct(b)) for a, b in pairs)
    return [{"class": gold, "from": f, "to": t, "count": n} for (gold, f, t), n in sorted(counts.items())]


def _level(value: Any) -> int | str:
    return "unscored" if value is None else round(float(value))


def _ibf_transitions(pairs: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> list[dict[str, Any]]:
    out = []
    for dim in IBF_DIMENSIONS:
        counts = Counter((_level(a.get(dim)), _level(b.get(dim))) for a, b in pairs)
        out += [{"dimension": dim, "from": f, "to": t, "count": n}
                for (f, t), n in sorted(counts.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1])))]
    return out


def _ibf_score(row: Mapping[str, Any]) -> float | None:
    values = [float(row[d]) for d in IBF_DIMENSIONS if row.get(d) is not None]
    return sum(values) / len(values) if values else None


def _ibf_pass(row: Mapping[str, Any]) -> bool | None:
    if any(row.get(d) is None for d in IBF_DIMENSIONS):
        return None
    return all(float(row[d]) >= IBF_PASS for d in IBF_DIMENSIONS)


OUTCOMES: dict[str, Outcomes] = {
    "ebs": Outcomes(lambda r: _number(r.get("ontology_score")), "exact_match", lambda r: _flag(r.get("exact_match")),
                    _ebs_transitions),
    "microbiorel": Outcomes(lambda r: None if _flag(r.get("correct")) is None else float(_flag(r.get("correct"))),
                            "accuracy", lambda r: _flag(r.get("correct")), _microbiorel_transitions),
    "ibf": Outcomes(_ibf_score, "threshold_pass_rate", _ibf_pass, _ibf_transitions),
}


def updown(transitions: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """IBF's transitions as ``[{"dimension", "up", "down", "unchanged"}]`` (unscored on either side left out)."""
    out: dict[str, dict[str, Any]] = {}
    for entry in transitions:
        row = out.setdefault(entry["dimension"], {"dimension": entry["dimension"], "up": 0, "down": 0, "unchanged": 0})
        f, t = entry["from"], entry["to"]
        if isinstance(f, int) and isinstance(t, int):
            row["up" if t > f else "down" if t < f else "unchanged"] += entry["count"]
    return list(out.values())


def mcnemar_p(worse: int, better: int) -> float:
    """The exact McNemar p-value: the two-sided binomial test of ``worse`` in ``worse + better`` at 0.5."""
    if worse + better == 0:
        return 1.0
    from scipy.stats import binomtest

    return float(binomtest(worse, worse + better, 0.5).pvalue)


def item_id(row: Mapping[str, Any]) -> str:
    """The id the store keeps the row's item under (``corpus_item_id``): its case id, item id, else its node id."""
    return str(next((row[key] for key in ("corpus_item_id", "case_id", "item_id", "nodeid") if row.get(key)), ""))


def _by_case(rows: Sequence[Mapping[str, Any]], model: str) -> dict[str, dict[str, Any]]:
    """One model's rows by case key, in node-id order; an item's repeated samples collapsed to one row."""
    from fieldeval.stats.epochs import collapse_epochs, has_epochs

    mine = [dict(r) for r in by_nodeid(rows) if str(r.get("model")) == model]
    return {case_key(r): r for r in (collapse_epochs(mine) if has_epochs(mine) else mine)}


def pick_model(run_id: str, bench: str, rows: Sequence[Mapping[str, Any]], model: str | None, flag: str) -> str:
    """The model to diff of one run's benchmark: ``model`` when it ran, else the run's only model."""
    models = sorted({str(r.get("model")) for r in rows})
    if model is not None:
        if model not in models:
            raise UsageError(f"runs diff {flag} {model!r}: not a model of {bench} in run {run_id}; "
                             f"pass one of {', '.join(models)}")
        return model
    if len(models) != 1:
        raise UsageError(f"runs diff: run {run_id} holds {len(models)} models in {bench} ({', '.join(models)}); "
                         f"pass {flag} with one of them")
    return models[0]


def shared_benchmarks(base_run: str, base_rows: Rows, run: str, rows: Rows, benchmark: str | None) -> list[str]:
    """The benchmarks to diff: ``benchmark`` when both runs hold it, else every one they share."""
    shared = sorted(b for b in set(base_rows) & set(rows) if b in OUTCOMES)
    if benchmark is not None:
        if benchmark not in shared:
            raise UsageError(f"runs diff --benchmark {benchmark!r}: not a benchmark both {base_run} and {run} hold "
                             f"items of; pass one of {', '.join(shared) or '(none shared)'}")
        return [benchmark]
    if not shared:
        raise UsageError(f"runs diff: runs {base_run} and {run} share no benchmark with items; pick two runs of "
                         "the same benchmark from `fieldeval runs list`")
    return shared


def diff_rows(base_run: str, base_rows: Rows, run: str, rows: Rows, benchmark: str, *,
              base_model: str | None = None, model: str | None = None) -> dict[str, Any]:
    """The diff of one benchmark's items between two runs (``run`` against ``base_run``).

    Args:
        base_run: the base run's id.
        base_rows: its rows by benchmark (each with ``model``, ``nodeid`` and its scores).
        run: the other run's id.
        rows: its rows by benchmark.
        benchmark: ebs, microbiorel or ibf; both runs must hold items of it.
        base_model: the base run's model to diff (default: its only model in ``benchmark``).
        model: the other run's model (default: its only model in ``benchmark``).

    Returns:
        ``{"benchmark", "base_run", "run", "paired_items", "only_in_base", "only_in_run", "items",
        "transitions", "flips"}``: ``items`` every paired item ``{"case_id", "base", "run", "delta"}``
        (headline scores; worst first, unscored last), ``only_in_*`` the unpaired case ids,
        ``transitions`` ``{"from", "to", "count"}`` (MicrobioRel also ``class``, IBF ``dimension``),
        ``flips`` ``[{"metric", "worse", "better", "p_value"}]`` (exact McNemar).

    Raises:
        UsageError: a benchmark or model that is not in both runs, or several models and none chosen.
    """
    shared_benchmarks(base_run, base_rows, run, rows, benchmark)
    outcome = OUTCOMES[benchmark]
    a = _by_case(base_rows[benchmark], pick_model(base_run, benchmark, base_rows[benchmark], base_model,
                                                  "--base-model"))
    b = _by_case(rows[benchmark], pick_model(run, benchmark, rows[benchmark], model, "--model"))
    shared = [key for key in a if key in b]
    items = []
    for key in shared:
        before, after = outcome.score(a[key]), outcome.score(b[key])
        delta = None if before is None or after is None else after - before
        items.append({"case_id": item_id(b[key]), "base": before, "run": after, "delta": delta})
    items.sort(key=lambda item: (item["delta"] is None, item["delta"] or 0.0, item["case_id"]))
    pairs = [(a[key], b[key]) for key in shared]
    flips = Counter((outcome.binary(x), outcome.binary(y)) for x, y in pairs)
    worse, better = flips[(True, False)], flips[(False, True)]
    return {"benchmark": benchmark, "base_run": base_run, "run": run, "paired_items": len(shared),
            "only_in_base": [item_id(a[key]) for key in a if key not in b],
            "only_in_run": [item_id(b[key]) for key in b if key not in a],
            "items": items, "transitions": outcome.transitions(pairs),
            "flips": [{"metric": outcome.binary_metric, "worse": worse, "better": better,
                       "p_value": mcnemar_p(worse, better)}]}


def run_diff(store: Any, base_run: str, run: str, *, benchmark: str | None = None, base_model: str | None = None,
             model: str | None = None) -> list[dict[str, Any]]:
    """:func:`diff_rows` of two stored runs, one per benchmark (``benchmark``, else every one they share)."""
    base_rows, rows = store.run_rows(base_run), store.run_rows(run)
    return [diff_rows(base_run, base_rows, run, rows, bench, base_model=base_model, model=model)
            for bench in shared_benchmarks(base_run, base_rows, run, rows, benchmark)]


def paired_ci(store: Any, diff: Mapping[str, Any], *, base_model: str | None = None,
              model: str | None = None) -> dict[str, Any] | None:
    """The paired difference (run - base, ci95) of a diff's binary metric, as ``runs compare`` gives it."""
    from fieldeval.stats.paired import differences

    bench = diff["benchmark"]
    base_rows, rows = store.run_rows(diff["base_run"])[bench], store.run_rows(diff["run"])[bench]
    chosen_a = pick_model(diff["base_run"], bench, base_rows, base_model, "--base-model")
    chosen_b = pick_model(diff["run"], bench, rows, model, "--model")
    settings = store.run_settings(diff["base_run"])
    kwargs = {k: settings[k] for k in ("seed", "resamples") if settings.get(k) is not None}
    found, _ = differences(diff["base_run"], {bench: [r for r in base_rows if r.get("model") == chosen_a]},
                           diff["run"], {bench: [r for r in rows if r.get("model") == chosen_b]},
                           cluster_by=settings.get("cluster_by") or "benchmark",
                           metrics=[f["metric"] for f in diff["flips"]], **kwargs)
    return found[0] if found else None


def worse_better(items: Sequence[Mapping[str, Any]]) -> tuple[list[dict], list[dict], int, int]:
    """``(worse worst first, better best first, unchanged count, unscored count)`` of a diff's items."""
    worse = [dict(i) for i in items if i["delta"] is not None and i["delta"] < 0]
    better = sorted((dict(i) for i in items if i["delta"] is not None and i["delta"] > 0),
                    key=lambda i: (-i["delta"], i["case_id"]))
    unchanged = sum(1 for i in items if i["delta"] == 0)
    return worse, better, unchanged, sum(1 for i in items if i["delta"] is None)


def grouped(transitions: Sequence[Mapping[str, Any]], key: str) -> dict[str, list[dict[str, Any]]]:
    """Transitions by their ``class`` or ``dimension``."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for entry in transitions:
        out[str(entry.get(key))].append(dict(entry))
    return dict(out)


__all__ = ["EBS_CLASSES", "OUTCOMES", "diff_rows", "ebs_relationship", "item_id", "mcnemar_p", "paired_ci", "run_diff",
           "updown", "worse_better"]
