"""Paired comparisons of two runs, and the regression gate built on them.

Two runs of one benchmark are paired by case (:func:`fieldeval.run.entries.case_key`):
each headline metric's difference (run - base) is computed on the shared items,
and its ci95 resamples the same clusters for both runs, so the interval is the
difference's own (Miller, "Adding Error Bars to Evals", arXiv:2411.00640,
section 4: paired differences are far tighter than two separate intervals).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from fieldeval.benchmark import benchmarks
from fieldeval.run.entries import by_nodeid, case_key, without_clusters
from fieldeval.stats import DEFAULT_RESAMPLES, DEFAULT_SEED, Design, paired_difference

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
                metrics: Sequence[str] | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """Each headline metric's ``run - base_run`` on the shared items, with a paired (cluster) bootstrap ci95.

    Args:
        base_run: the base run's id.
        base_rows: its rows by benchmark (each with ``model`` and ``nodeid``).
        run: the other run's id.
        rows: its rows by benchmark.
        seed: the bootstrap seed.
        resamples: the bootstrap resamples.
        cluster_by: ``benchmark`` (resample the clusters the rows carry) or ``none`` (items).
        metrics: the metrics to compare (default: each benchmark's headline metrics).

    Returns:
        The differences, ``[{"benchmark", "metric", "model", "base_run", "run", "value", "ci95": [lo, hi],
        "n_items", "n_clusters"}]``, and one line per pairing whose runs share no items or only some.
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
                diff = paired_difference(est_a[metric], est_b[metric], design, seed=seed, resamples=resamples)
                out.append({"benchmark": bench, "metric": metric, "model": label, "base_run": base_run, "run": run,
                            "value": diff["value"], "ci95": diff["ci95"], "n_items": diff["n"],
                            "n_clusters": diff["n_clusters"]})
    return out, notes


def excludes_zero(difference: Mapping[str, Any]) -> bool:
    """Whether a difference's ci95 lies entirely above or below 0."""
    lo, hi = difference["ci95"]
    return lo is not None and hi is not None and (lo > 0 or hi < 0)


def regression_gates(diffs: Sequence[Mapping[str, Any]], *, tolerance: float) -> list[dict[str, Any]]:
    """One gate result per difference: failed when its paired ci95 lies entirely below ``-tolerance``.

    The results have the threshold gates' shape (``metric``, ``model``, ``gate_on`` = ``baseline``,
    ``value``, ``threshold``, ``passed``) plus ``ci95`` and ``baseline_run``.
    """
    results = []
    for diff in diffs:
        hi = diff["ci95"][1]
        result = {"metric": f"{diff['benchmark']}.{diff['metric']}", "model": diff["model"], "gate_on": "baseline",
                  "value": diff["value"], "ci95": list(diff["ci95"]), "threshold": -tolerance or 0.0,
                  "baseline_run": diff["base_run"], "n_items": diff["n_items"], "n_clusters": diff["n_clusters"],
                  "passed": not (hi is not None and hi < -tolerance)}
        results.append(result)
    return results


def regression_line(gate: Mapping[str, Any]) -> str:
    """``FAILED gate ebs.ontology_score for m: -0.120 (ci95 -0.200 to -0.050) vs baseline run_x, below -0``."""
    lo, hi = gate["ci95"]
    return (f"FAILED gate {gate['metric']} for {gate['model']}: worse than baseline run {gate['baseline_run']} by "
            f"{gate['value']:+.3f} (paired ci95 {lo:+.3f} to {hi:+.3f}, {gate['n_items']} items in "
            f"{gate['n_clusters']} clusters), entirely below -{abs(gate['threshold']):g}")


__all__ = ["differences", "excludes_zero", "model_pairs", "regression_gates", "regression_line"]
