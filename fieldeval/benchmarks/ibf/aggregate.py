"""IBF aggregation: dimension means, MDS and TPR with seeded bootstrap intervals, and the reading bands."""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np

from fieldeval.stats import Design, Estimator, estimate
from scorers.ibf import DIMENSIONS, PASS_THRESHOLD, mds_weights, reading


def score_matrix(rows: list[dict]) -> np.ndarray:
    """An (items, 5) float matrix of scores with NaN for unscored dimensions."""
    return np.array([[np.nan if r.get(d) is None else float(r[d]) for d in DIMENSIONS] for r in rows],
                    dtype=float).reshape(len(rows), len(DIMENSIONS))


def mds_estimator(rows: list[dict]) -> Estimator:
    """MDS as a statistic of the (items, 5) score matrix; items with no score at all do not count."""
    data = score_matrix(rows)
    return Estimator(data, mds_weights, ~np.isnan(data).all(axis=1), (0.0, 4.0))


def mds_metric(rows: list[dict], *, seed: int, resamples: int) -> dict:
    """MDS with a seeded (cluster) bootstrap ci95 (items with no score at all are left out)."""
    return estimate(mds_estimator(rows), Design.of_rows(rows), seed=seed, resamples=resamples)


def estimators(rows: list[dict]) -> dict[str, Estimator]:
    """Dimension means, MDS and TPR (over fully scored items) as statistics of the rows."""
    out: dict[str, Estimator] = {dim: Estimator.mean([r.get(dim) for r in rows], (0.0, 4.0)) for dim in DIMENSIONS}
    out["mean_dimension_score"] = mds_estimator(rows)
    out["threshold_pass_rate"] = Estimator.mean([
        float(all(r[d] >= PASS_THRESHOLD for d in DIMENSIONS)) if all(r.get(d) is not None for d in DIMENSIONS)
        else None for r in rows], (0.0, 1.0))
    return out


def aggregate(rows: list[dict], *, seed: int, resamples: int) -> dict:
    """Per model: dimension means, MDS and TPR with ci95, the seed's reading, unscored counts and scorers.

    A dimension mean leaves out that dimension's unscored values; MDS is the
    mean of the five dimension means (bootstrap over items, or over the rows'
    clusters, their hazards, when they carry them); TPR counts only items whose
    five dimensions are all scored.
    """
    design = Design.of_rows(rows)
    out: dict = {name: estimate(est, design, seed=seed, resamples=resamples) for name, est in estimators(rows).items()}
    complete_rows = [r for r in rows if all(r.get(d) is not None for d in DIMENSIONS)]
    out["reading"] = reading(out["mean_dimension_score"]["value"], out["threshold_pass_rate"]["value"])
    out["unscored"] = {
        **{dim: sum(r.get(dim) is None for r in rows) for dim in DIMENSIONS},
        "items_not_fully_scored": len(rows) - len(complete_rows),
    }
    out["scorer"] = dict(sorted(Counter(r.get("scorer") or "unknown" for r in rows).items()))
    from fieldeval.benchmarks.ibf.judge import spread

    judge = spread(rows)
    if judge is not None:
        out["judge_spread"] = judge
    hazards: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        hazards[row.get("hazard") or "unknown"].append(row)
    # one hazard's MDS is conditional on that hazard: its items are resampled, not its (one) cluster
    out["per_hazard"] = {h: {"mean_dimension_score": estimate(mds_estimator(g), Design(), seed=seed,
                                                               resamples=resamples)}
                         for h, g in sorted(hazards.items())}
    return out


def summary_notes(models: dict) -> list[str]:
    """The seed's reading bands under the terminal table, one line per model."""
    lines = []
    for model, entry in models.items():
        mds = (entry.get("mean_dimension_score") or {}).get("value")
        tpr = (entry.get("threshold_pass_rate") or {}).get("value")
        if mds is None:
            lines.append(f"ibf {model}: no scored items")
            continue
        r = entry["reading"]
        tpr_text = "-" if tpr is None else f"{tpr:.2f}" + ("" if r["tpr_meets_minimum"] else " (below 0.4)")
        line = f"ibf {model}: MDS {mds:.2f} ({r['mds_band']}), TPR {tpr_text} -> {r['overall']}"
        judge = entry.get("judge_spread")
        if judge:
            sds = ", ".join(f"{d} {sd:.2f}" for d, sd in judge["within_item_sd"].items() if sd is not None)
            straddle = (f"; {len(judge['straddles'])} item(s) straddle the pass threshold (first: "
                        f"{', '.join(judge['straddles'][:3])})" if judge["straddles"] else "")
            lines.append(f"ibf {model}: the judge asked {judge['epochs']} times per response, within-item SD "
                         f"{sds or '-'}{straddle}")
        unscored = entry.get("unscored", {}).get("items_not_fully_scored", 0)
        if unscored:
            line += f"; {unscored} item(s) not fully scored, left out of TPR"
        lines.append(line)
        means = {d: (entry.get(d) or {}).get("value") for d in DIMENSIONS}
        if all(v is not None for v in means.values()) and min(means, key=means.get) == "uncertainty_handling":
            lines.append(f"ibf {model}: uncertainty_handling is the lowest dimension: overconfident generation")
    return lines
