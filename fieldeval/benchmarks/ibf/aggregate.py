"""IBF aggregation: dimension means, MDS and TPR with seeded bootstrap intervals, and the reading bands."""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np

from fieldeval.stats import mean_metric, statistic_metric
from scorers.ibf import DIMENSIONS, PASS_THRESHOLD, mds_batch, reading

def score_matrix(rows: list[dict]) -> np.ndarray:
    """An (items, 5) float matrix of scores with NaN for unscored dimensions."""
    return np.array([[np.nan if r.get(d) is None else float(r[d]) for d in DIMENSIONS] for r in rows],
                    dtype=float).reshape(len(rows), len(DIMENSIONS))


def mds_metric(rows: list[dict], *, seed: int, resamples: int) -> dict:
    """MDS with a seeded bootstrap ci95 that resamples items (items with no score at all are left out)."""
    data = score_matrix(rows)
    return statistic_metric(data[~np.isnan(data).all(axis=1)], mds_batch, seed=seed, resamples=resamples)


def aggregate(rows: list[dict], *, seed: int, resamples: int) -> dict:
    """Per model: dimension means, MDS and TPR with ci95, the seed's reading, unscored counts and scorers.

    A dimension mean leaves out that dimension's unscored values; MDS is the
    mean of the five dimension means (bootstrap over items); TPR counts only
    items whose five dimensions are all scored.
    """
    out: dict = {}
    for dim in DIMENSIONS:
        out[dim] = mean_metric([float(r[dim]) for r in rows if r.get(dim) is not None], seed=seed, resamples=resamples)
    out["mean_dimension_score"] = mds_metric(rows, seed=seed, resamples=resamples)
    complete_rows = [r for r in rows if all(r.get(d) is not None for d in DIMENSIONS)]
    out["threshold_pass_rate"] = mean_metric(
        [float(all(r[d] >= PASS_THRESHOLD for d in DIMENSIONS)) for r in complete_rows],
        seed=seed, resamples=resamples,
    )
    out["reading"] = reading(out["mean_dimension_score"]["value"], out["threshold_pass_rate"]["value"])
    out["unscored"] = {
        **{dim: sum(r.get(dim) is None for r in rows) for dim in DIMENSIONS},
        "items_not_fully_scored": len(rows) - len(complete_rows),
    }
    out["scorer"] = dict(sorted(Counter(r.get("scorer") or "unknown" for r in rows).items()))
    hazards: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        hazards[row.get("hazard") or "unknown"].append(row)
    out["per_hazard"] = {h: {"mean_dimension_score": mds_metric(g, seed=seed, resamples=resamples)}
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
        unscored = entry.get("unscored", {}).get("items_not_fully_scored", 0)
        if unscored:
            line += f"; {unscored} item(s) not fully scored, left out of TPR"
        lines.append(line)
        means = {d: (entry.get(d) or {}).get("value") for d in DIMENSIONS}
        if all(v is not None for v in means.values()) and min(means, key=means.get) == "uncertainty_handling":
            lines.append(f"ibf {model}: uncertainty_handling is the lowest dimension: overconfident generation")
    return lines
