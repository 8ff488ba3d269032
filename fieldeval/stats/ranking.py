"""Which models (or matrix combinations) of one run are statistically tied with the best one.

Over a model x temperature matrix, the best point value is rarely the only good choice. Each
other combination's lead metric is compared with the best one's on the items both answered (a
paired difference, :func:`fieldeval.stats.paired.differences`), the p-values are adjusted by Holm
over the family (every combination against the best), and a combination whose drop is not
significant after the correction is tied with the best.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from fieldeval.stats import DEFAULT_RESAMPLES, DEFAULT_SEED
from fieldeval.stats.paired import SIGNIFICANT


def tied_with_best(bench: str, rows: Sequence[dict], entries: Mapping[str, Mapping[str, Any]], *,
                   metric: str | None = None, seed: int = DEFAULT_SEED, resamples: int = DEFAULT_RESAMPLES,
                   cluster_by: str = "benchmark") -> dict[str, Any] | None:
    """The best combination of one benchmark's run by ``metric`` (default: the lead metric), those tied with it,
    and those below it after Holm's correction; None when fewer than two combinations have a value.

    Args:
        bench: the benchmark.
        rows: the run's rows of that benchmark (every model's).
        entries: the run's report entries of that benchmark, ``{model: entry}``.

    Returns:
        ``{"metric", "best", "value", "tied": [model, ...], "below": [model, ...], "family",
        "differences": [{"model", "value", "ci95", "p_value", "p_holm"}]}``.
    """
    from fieldeval.benchmark import benchmarks
    from fieldeval.stats.paired import adjust, differences

    metric = metric or benchmarks()[bench].lead_metric
    scored = {m: e[metric]["value"] for m, e in entries.items() if (e.get(metric) or {}).get("value") is not None}
    if len(scored) < 2:
        return None
    best = min(scored, key=lambda m: (-scored[m], m))  # the highest value; on a tie, the first name
    by_model: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_model[str(row.get("model"))].append(row)
    found = []
    for model in sorted(scored):
        if model == best:
            continue
        diffs, _ = differences("best", {bench: by_model[best]}, model, {bench: by_model[model]}, seed=seed,
                               resamples=resamples, cluster_by=cluster_by, metrics=[metric])
        for diff in diffs:
            found.append({"model": model, "value": diff["value"], "ci95": diff["ci95"],
                          "p_value": diff["p_value"]})
    adjust(found)
    below = [d["model"] for d in found if d["p_holm"] is not None and d["p_holm"] < SIGNIFICANT]
    return {"metric": metric, "best": best, "value": scored[best],
            "tied": [d["model"] for d in found if d["model"] not in below], "below": below,
            "family": sum(1 for d in found if d["p_value"] is not None), "differences": found}


def tied_line(bench: str, ranking: Mapping[str, Any]) -> str:
    """``ebs.ontology_score: best m-t0 (0.855); tied with it after Holm over 3 comparisons: m-t0.7; below: m-t1``."""
    tied = ", ".join(ranking["tied"]) or "none"
    below = ", ".join(ranking["below"]) or "none"
    return (f"{bench}.{ranking['metric']}: best {ranking['best']} ({ranking['value']:.3f}); tied with it after "
            f"Holm over {ranking['family']} comparisons: {tied}; below it: {below}")


__all__ = ["tied_line", "tied_with_best"]
