"""The item-level diff of two stored runs: which items got worse or better, the outcome transitions, the flips.

:func:`diff_rows` is a pure function of two runs' rows (as :meth:`Store.run_rows` gives them);
:func:`run_diff` reads them from a store. Items pair by (benchmark, case) as paired differences do
(:func:`fieldeval.rows.case_key`); each is named by its case id, the id the store keeps it under.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from fieldeval.errors import UsageError
from fieldeval.rows import by_nodeid, case_key

if TYPE_CHECKING:
    from fieldeval.benchmark import ItemDiff

Rows = Mapping[str, Sequence[Mapping[str, Any]]]  # rows by benchmark


def _diffed(names: set[str]) -> set[str]:
    """The installed benchmarks among ``names`` whose items can be diffed (their ``items.diff``)."""
    from fieldeval.benchmark import benchmarks

    known = benchmarks()
    return {name for name in names if name in known and known[name].items.diff is not None}


def _item_diff(benchmark: str) -> ItemDiff:
    from fieldeval.benchmark import get_benchmark

    found = get_benchmark(benchmark).items.diff
    assert found is not None, "shared_benchmarks keeps only benchmarks with an item diff"
    return found


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
    both = set(base_rows) & set(rows)
    shared = sorted(_diffed(both))
    if not shared and both:
        raise UsageError(f"runs diff: {', '.join(sorted(both))} declares no item diff (Benchmark.items.diff); "
                         "compare its runs with `fieldeval runs compare`")
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
        benchmark: a benchmark with an item diff (``Benchmark.items.diff``); both runs must hold items of it.
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
    outcome = _item_diff(benchmark)
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


__all__ = ["diff_rows", "item_id", "mcnemar_p", "paired_ci", "run_diff", "updown", "worse_better"]
