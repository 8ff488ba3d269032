"""Paired comparisons of two runs, and the regression gate built on them.

Two runs of one benchmark are paired by case (:func:`fieldeval.rows.case_key`):
each headline metric's difference (run - base) is computed on the shared items,
and its two intervals are the difference's own (:func:`fieldeval.stats.paired_difference`:
one statistic of both runs under the same item weights), not two separate intervals
(Miller, "Adding Error Bars to Evals", arXiv:2411.00640, section 4).

Many differences read at once are a family: each difference's ``p_value`` (two-sided, from
the same evidence as its ci95) gets a ``p_holm``, Holm's step-down adjustment over every
difference one ``runs compare`` prints (:func:`adjust`), and a difference is marked by its
``p_holm``. The regression gate's family is every difference one session checks: it fails on
a drop whose one-sided ``p_holm`` is below :data:`GATE_ALPHA`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from fieldeval.benchmark import benchmarks
from fieldeval.rows import by_nodeid, case_key, without_clusters
from fieldeval.stats import DEFAULT_RESAMPLES, DEFAULT_SEED, Design, paired_difference_with_evidence
from fieldeval.stats._entry import _round_p
from fieldeval.stats.robust import holm

GATE_ALPHA = 0.05  # the regression gate's one-sided level, after Holm's correction over the session's family
SIGNIFICANT = 0.05  # a difference is marked when its two-sided p_holm is below this

Rows = Mapping[str, Sequence[dict]]  # rows by benchmark


def _by_model(rows: Sequence[dict]) -> dict[str, dict[str, dict]]:
    """``{model: {case key: row}}`` in node-id order; an item's repeated samples (``--epochs``) as one row, the
    mean of its answers."""
    from fieldeval.stats.epochs import collapse_epochs, has_epochs

    grouped: dict[str, list[dict]] = defaultdict(list)
    for row in by_nodeid(rows):
        grouped[str(row.get("model"))].append(row)
    out: dict[str, dict[str, dict]] = defaultdict(dict)
    for model, model_rows in grouped.items():
        for row in collapse_epochs(model_rows) if has_epochs(model_rows) else model_rows:
            out[model][case_key(row)] = row
    return out


def model_pairs(base: Sequence[str], other: Sequence[str]) -> list[tuple[str, str]]:
    """Which models to pair: the same names; else, when each run has one model, those two."""
    same = [(m, m) for m in other if m in base]
    if same:
        return same
    if len(base) == 1 and len(other) == 1:
        return [(base[0], other[0])]
    return []


def differences(base_run: str, base_rows: Rows, run: str, rows: Rows, *, seed: int = DEFAULT_SEED,
                resamples: int = DEFAULT_RESAMPLES, cluster_by: str = "benchmark",
                metrics: Sequence[str] | None = None,
                tolerance: float | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """Each headline metric's ``run - base_run`` on the shared items, with its paired intervals and p-values.

    Args:
        base_run: the base run's id.
        base_rows: its rows by benchmark (each with ``model`` and ``nodeid``).
        run: the other run's id.
        rows: its rows by benchmark.
        seed: the bootstrap seed.
        resamples: the bootstrap resamples.
        cluster_by: ``benchmark`` (resample the clusters the rows carry) or ``none`` (items).
        metrics: the metrics to compare (default: each benchmark's headline metrics).
        tolerance: for the regression gate: each difference also gets ``p_drop`` and ``p_drop_within``, the
            one-sided p of "run is no worse than base by more than ``tolerance``" for each question.

    Returns:
        The differences, ``[{"benchmark", "metric", "model", "base_run", "run", "value", "ci95": [lo, hi],
        "ci95_within": [lo, hi], "n_items", "n_clusters", "p_value", "p_holm"}]`` (``p_holm`` over this
        list), and one line per pairing whose runs share no items or only some.
    """
    out: list[dict[str, Any]] = []
    notes: list[str] = []
    installed = benchmarks()
    for bench in sorted(set(base_rows) & set(rows)):
        if bench not in installed:
            continue
        spec = installed[bench]
        base_models, other_models = _by_model(base_rows[bench]), _by_model(rows[bench])
        for model_a, model_b in model_pairs(sorted(base_models), sorted(other_models)):
            a, b = base_models[model_a], other_models[model_b]
            shared = [key for key in a if key in b]
            label = model_b if model_a == model_b else f"{model_b} - {model_a}"
            if not shared:
                notes.append(f"{bench} {label}: runs {base_run} and {run} share no items ({len(a)} and {len(b)} "
                             "items); nothing to pair")
                continue
            if len(shared) < max(len(a), len(b)):
                notes.append(f"{bench} {label}: runs {base_run} and {run} share {len(shared)} of {len(a)} and "
                             f"{len(b)} items; pairing the {len(shared)} shared")
            rows_a, rows_b = [a[k] for k in shared], [b[k] for k in shared]
            if cluster_by == "none":
                rows_a, rows_b = without_clusters(rows_a), without_clusters(rows_b)
            design = Design.of_rows(rows_a)
            if not design.clustered:  # a base run stored before clusters were recorded: the other run's
                design = Design.of_rows(rows_b)
            est_a, est_b = spec.metric_estimators(rows_a), spec.metric_estimators(rows_b)
            for metric in metrics or spec.headline:
                if metric not in est_a or metric not in est_b:
                    continue
                diff, evidence = paired_difference_with_evidence(est_a[metric], est_b[metric], design, seed=seed,
                                                                 resamples=resamples)
                found = {"benchmark": bench, "metric": metric, "model": label, "base_run": base_run, "run": run,
                         "value": diff["value"], "ci95": diff["ci95"], "ci95_within": diff["ci95_within"],
                         "n_items": diff["n"], "n_clusters": diff["n_clusters"],
                         "p_value": None if evidence is None else _round_p(evidence.p_value())}
                if tolerance is not None:
                    found["p_drop"] = None if evidence is None else _round_p(evidence.p_below(-tolerance))
                    found["p_drop_within"] = (None if evidence is None
                                              else _round_p(evidence.p_below(-tolerance, within=True)))
                out.append(found)
    return adjust(out), notes


def adjust(diffs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``diffs`` with each ``p_holm`` set by Holm's adjustment over all of them (the family one table prints)."""
    for diff, p in zip(diffs, holm([d.get("p_value") for d in diffs])):
        diff["p_holm"] = _round_p(p)
    return diffs


def family_size(diffs: Sequence[Mapping[str, Any]]) -> int:
    """How many differences were tested (had a p-value): the size of the family Holm corrects for."""
    return sum(1 for d in diffs if d.get("p_value") is not None)


def significant(difference: Mapping[str, Any]) -> bool:
    """Whether a difference is marked: its ``p_holm`` below :data:`SIGNIFICANT` (a difference stored before
    p-values were recorded: its ci95 excludes 0)."""
    if "p_holm" in difference:
        return difference["p_holm"] is not None and difference["p_holm"] < SIGNIFICANT
    return excludes_zero(difference)


def excludes_zero(difference: Mapping[str, Any]) -> bool:
    """Whether a difference's ci95 lies entirely above or below 0."""
    lo, hi = difference["ci95"]
    return lo is not None and hi is not None and (lo > 0 or hi < 0)


def regression_gates(diffs: Sequence[Mapping[str, Any]], *, tolerance: float,
                     interval: str = "clusters") -> list[dict[str, Any]]:
    """One gate result per difference: failed when its drop below ``-tolerance`` is significant after Holm.

    The family is every difference given (one session's checks): each one's one-sided p (``p_drop``, or
    ``p_drop_within`` for ``interval="within"``) is adjusted by Holm over the family, and a drop fails
    when its ``p_holm`` is below :data:`GATE_ALPHA`.

    The results have the threshold gates' shape (``metric``, ``model``, ``gate_on`` = ``baseline``,
    ``value``, ``threshold``, ``passed``) plus ``ci95`` (the interval ``interval`` names), ``interval``,
    ``baseline_run``, ``n_items``, ``n_clusters``, ``p_value`` (one-sided), ``p_holm`` and ``family`` (how many
    drops were tested).
    """
    key, ci_key = ("p_drop_within", "ci95_within") if interval == "within" else ("p_drop", "ci95")
    adjusted = holm([d.get(key) for d in diffs])
    family = sum(1 for p in adjusted if p is not None)
    results = []
    for diff, p_holm in zip(diffs, adjusted):
        result = {"metric": f"{diff['benchmark']}.{diff['metric']}", "model": diff["model"], "gate_on": "baseline",
                  "value": diff["value"], "ci95": list(diff.get(ci_key) or diff["ci95"]), "interval": interval,
                  "threshold": -tolerance or 0.0, "baseline_run": diff["base_run"], "n_items": diff["n_items"],
                  "n_clusters": diff["n_clusters"], "p_value": diff.get(key), "p_holm": _round_p(p_holm),
                  "family": family, "passed": not (p_holm is not None and p_holm < GATE_ALPHA)}
        results.append(result)
    return results


def regression_line(gate: Mapping[str, Any]) -> str:
    """``FAILED gate ebs.ontology_score for m: worse than baseline run_x by -0.120 (paired ci95 ...), one-sided
    p 0.004, Holm-adjusted 0.012 over 3 comparisons, below 0.05``."""
    lo, hi = gate["ci95"]
    question = "on more samples from these clusters" if gate.get("interval") == "within" else "on new clusters"
    ci = "-" if lo is None or hi is None else f"{lo:+.3f} to {hi:+.3f}"
    return (f"FAILED gate {gate['metric']} for {gate['model']}: worse than baseline run {gate['baseline_run']} by "
            f"{gate['value']:+.3f} (paired ci95 {question}: {ci}, {gate['n_items']} items in "
            f"{gate['n_clusters']} clusters); a drop beyond -{abs(gate['threshold']):g} has one-sided p "
            f"{gate['p_value']:.3g}, Holm-adjusted {gate['p_holm']:.3g} over {gate['family']} comparisons, "
            f"below {GATE_ALPHA:g}")


__all__ = ["GATE_ALPHA", "adjust", "differences", "excludes_zero", "family_size", "model_pairs", "regression_gates",
           "regression_line", "significant"]
