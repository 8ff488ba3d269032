"""``fieldeval power BENCH --difference D``: items and clusters needed to detect a paired difference.

Miller, "Adding Error Bars to Evals" (arXiv:2411.00640), section 5: to detect a
difference ``D`` between two models on the same items with power ``1 - beta`` at
level ``alpha``, a paired comparison needs

    n = (z_{1-alpha/2} + z_{1-beta})^2 * omega^2 * deff / D^2

items, where ``omega^2`` is the variance of the per-item paired difference and
``deff`` the design effect of the clusters (clustered variance over the i.i.d.
one). From a single run, ``omega^2 = 2 * sigma^2 * (1 - rho)``: ``sigma^2`` is the
metric's observed per-item variance (``n`` times its i.i.d. bootstrap variance,
so any metric works, F1 and MDS too) and ``rho`` the correlation of two models'
scores on an item (``--correlation``, default 0.5). ``deff`` is the run's
cluster bootstrap variance over its item bootstrap variance.

A run with repeated samples (``--epochs K``) is read as one row per item (the
mean of its K answers), so ``sigma^2`` is the variance of K-answer means; with
``--epochs K2`` the per-item variance is rescaled by the run's variance split,
``(between + within / K2) / (between + within / K)``.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fieldeval.errors import UsageError
from fieldeval.stats import DEFAULT_RESAMPLES, DEFAULT_SEED, FEW_CLUSTERS, Design, Estimator

ALPHA = 0.05
POWER = 0.80


def clustered_se(values: Sequence[float], clusters: Sequence[Any]) -> tuple[float, float]:
    """``(SE_iid, SE_clustered)`` of a mean by Miller's formula (his eq. for clustered standard errors).

    ``SE_clustered^2 = SE_iid^2 + (1/n^2) * sum_c sum_{i != j in c} (s_i - mean)(s_j - mean)``, with
    ``SE_iid^2 = (1/n^2) * sum_i (s_i - mean)^2``.

    Example:
        >>> [round(x, 4) for x in clustered_se([1, 1, 0, 0], ["a", "a", "b", "b"])]
        [0.25, 0.3536]
    """
    s = np.asarray(values, dtype=float)
    n = s.size
    dev = s - s.mean()
    iid = float((dev ** 2).sum()) / n ** 2
    keys = np.array([str(c) for c in clusters])
    cross = 0.0
    for key in np.unique(keys):
        d = dev[keys == key]
        cross += float(d.sum() ** 2 - (d ** 2).sum())  # sum over i != j of d_i d_j
    return math.sqrt(iid), math.sqrt(max(iid + cross / n ** 2, 0.0))


@dataclass(frozen=True)
class Power:
    """The outcome of a power analysis for one metric of one run."""

    metric: str
    value: float | None
    items: int
    clusters: int
    sigma2: float
    design_effect: float
    omega2: float
    difference: float
    items_needed: int
    clusters_needed: int
    detectable: float

    def lines(self, bench: str, run_id: str, model: str, correlation: float) -> list[str]:
        """What ``fieldeval power`` prints."""
        mean_size = self.items / max(self.clusters, 1)
        return [
            f"{bench}.{self.metric} of {model} in run {run_id}: {self.value:.3f} on {self.items} items in "
            f"{self.clusters} clusters (per-item variance {self.sigma2:.4f}, design effect {self.design_effect:.2f})",
            f"to detect a paired difference of {self.difference:g} with {POWER:.0%} power at alpha {ALPHA:g} "
            f"(two models' item scores correlated {correlation:g}): {self.items_needed} items, about "
            f"{self.clusters_needed} clusters of {mean_size:.1f} items",
            f"this suite ({self.items} items, {self.clusters} clusters) can detect a difference of about "
            f"{self.detectable:.3f}",
        ]


def power_analysis(est: Estimator, design: Design, *, metric: str, difference: float, correlation: float = 0.5,
                   seed: int = DEFAULT_SEED, resamples: int = DEFAULT_RESAMPLES, variance_scale: float = 1.0) -> Power:
    """Items and clusters needed to detect ``difference`` in ``metric`` (Miller section 5), from one run."""
    from scipy.stats import norm

    keep = np.asarray(est.defined, dtype=bool)
    data, sub = est.data[keep], design.subset(keep)
    n = int(keep.sum())
    if n < 2:
        raise UsageError(f"power: {metric} is defined on {n} item(s) of the run; it needs at least 2")
    value = float(est.statistic(data, np.ones((1, n)))[0])
    iid = est.statistic(data, Design().weights(n, resamples=resamples, seed=seed))
    var_iid = float(np.nanvar(iid, ddof=1))
    if sub.clustered:
        clustered = est.statistic(data, sub.weights(n, resamples=resamples, seed=seed))
        var_clustered = float(np.nanvar(clustered, ddof=1))
    else:
        var_clustered = var_iid
    deff = var_clustered / var_iid if var_iid > 0 else 1.0
    sigma2 = n * var_iid * variance_scale
    omega2 = 2 * sigma2 * (1 - correlation)
    z = float(norm.ppf(1 - ALPHA / 2) + norm.ppf(POWER))
    needed = math.ceil(z ** 2 * omega2 * deff / difference ** 2) if omega2 > 0 else 1
    clusters = sub.n_clusters(n)
    return Power(metric=metric, value=round(value, 6), items=n, clusters=clusters, sigma2=sigma2,
                 design_effect=deff, omega2=omega2, difference=difference, items_needed=needed,
                 clusters_needed=math.ceil(needed / (n / clusters)),
                 detectable=z * math.sqrt(omega2 * deff / n))


def epoch_scale(rows: Sequence[dict], metric: str, epochs: int | None) -> tuple[float, str | None]:
    """The factor on the per-item variance for ``epochs`` answers per item instead of the run's, and the line
    that says so (None when the run has one answer per item and no ``--epochs`` was asked)."""
    from fieldeval.stats.epochs import group_epochs, has_epochs, variance_split

    if epochs is not None and epochs < 1:
        raise UsageError(f"--epochs {epochs}: must be at least 1")
    if not has_epochs(rows):
        if epochs is not None and epochs > 1:
            raise UsageError(f"--epochs {epochs}: the run has one answer per item, so its within-item variance is "
                             "unknown; pass a run made with pytest --epochs 2 or more")
        return 1.0, None
    groups = list(group_epochs(rows).values())
    values = [[float(r[metric]) for r in g if isinstance(r.get(metric), bool | int | float)] for g in groups]
    split = variance_split(values)
    k = split["epochs"] or 1
    if split["within"] is None:
        return 1.0, None
    within, between = split["within"], split["between"]
    target = epochs or k
    now = between + within / k
    scale = (between + within / target) / now if now > 0 else 1.0
    return scale, (f"{metric}: {k:g} answers per item in the run; variance {within:.4f} within items, {between:.4f} "
                   f"between; figures below for {target:g} answer(s) per item")


def _baseline_run(store: Any, bench: str, model: str) -> str:
    """The newest stored completed run of ``bench`` with its offline baseline ``model``."""
    for run in reversed(store.list_runs(benchmark=bench)):
        if run.status == "completed" and model in run.models:
            return run.run_id
    raise UsageError(f"power {bench}: no completed run of the offline baseline {model} in the store {store.url}; "
                     f"run `pytest evals/test_{bench}.py` first, or pass --from-run RUN")


def _power_cli(args: argparse.Namespace) -> int:
    from fieldeval.benchmark import get_benchmark
    from fieldeval.rows import by_nodeid, without_clusters
    from fieldeval.stats.epochs import collapse_epochs, has_epochs
    from fieldeval.store.shell import command_store

    bench = get_benchmark(args.bench)
    if not args.difference > 0:
        raise UsageError(f"--difference {args.difference:g}: must be above 0 (in {args.bench}'s metric units, "
                         "e.g. 0.05)")
    if not 0 <= args.correlation < 1:
        raise UsageError(f"--correlation {args.correlation:g}: must be at least 0 and below 1")
    metric = args.metric or bench.lead_metric
    if metric not in {m.name for m in bench.metrics}:
        raise UsageError(f"--metric {metric}: {bench.name} has no such metric; choose from "
                         f"{', '.join(m.name for m in bench.metrics)}")
    declared = bench.metric(metric)
    if args.difference > declared.high - declared.low:
        raise UsageError(f"--difference {args.difference:g}: larger than {bench.name}.{metric}'s whole range "
                         f"({declared.low:g} to {declared.high:g}); pass a difference in the metric's units, e.g. "
                         f"{(declared.high - declared.low) / 20:g}")
    with command_store(args) as store:
        run_id = args.from_run or _baseline_run(store, bench.name, bench.baseline)
        rows = store.run_rows(run_id).get(bench.name)
        settings = store.run_settings(run_id)
    if not rows:
        raise UsageError(f"--from-run {run_id}: the run has no {bench.name} items; pick a run of {bench.name}")
    models = sorted({str(r.get("model")) for r in rows})
    model = args.model or (bench.baseline if bench.baseline in models else models[0])
    if model not in models:
        raise UsageError(f"--model {model}: not in run {run_id}; choose from {', '.join(models)}")
    rows = by_nodeid([r for r in rows if str(r.get("model")) == model])
    if args.cluster_by == "none":
        rows = without_clusters(rows)
    scale, epoch_line = epoch_scale(rows, metric, args.epochs)
    if has_epochs(rows):
        rows = collapse_epochs(rows)  # one row per item: the mean of its answers
    estimators = bench.metric_estimators(rows)
    if metric not in estimators:
        raise UsageError(f"--metric {metric}: {bench.name} cannot resample it; choose from {', '.join(estimators)}")
    result = power_analysis(estimators[metric], Design.of_rows(rows), metric=metric, difference=args.difference,
                            correlation=args.correlation, seed=int(settings.get("seed") or DEFAULT_SEED),
                            variance_scale=scale)
    if epoch_line:
        print(epoch_line)
    for line in result.lines(bench.name, run_id, model, args.correlation):
        print(line)
    if result.clusters < FEW_CLUSTERS and result.clusters < result.items:
        print(f"note: {result.clusters} clusters (under {FEW_CLUSTERS}): the design effect rests on few clusters, so "
              "these figures are approximate; more clusters, not more items per cluster, shrink the interval")
    return 0


def register_cli(sub: argparse._SubParsersAction) -> None:
    """Add ``fieldeval power BENCH --difference D [--from-run RUN] [--metric M]``."""
    from fieldeval.store.shell import add_store_option

    power = sub.add_parser(
        "power", help="items and clusters needed to detect a paired difference with 80%% power at alpha 0.05")
    power.add_argument("bench", metavar="BENCH", help="benchmark name, e.g. ebs")
    power.add_argument("--difference", type=float, required=True, metavar="D",
                       help="the paired difference to detect, in the metric's units (e.g. 0.05)")
    power.add_argument("--from-run", metavar="RUN", dest="from_run",
                       help="the stored run whose variances to use (default: the newest run of the offline baseline)")
    power.add_argument("--metric", metavar="M", help="the metric (default: the benchmark's lead metric, e.g. ebs ontology_score, ibf "
                            "mean_dimension_score)")
    power.add_argument("--model", metavar="MODEL", help="the run's model to use (default: the offline baseline, "
                                                         "else the first)")
    power.add_argument("--correlation", type=float, default=0.5, metavar="RHO",
                       help="correlation of two models' scores on an item (default: 0.5)")
    power.add_argument("--epochs", type=int, default=None, metavar="K",
                       help="answers per item to plan for (default: the run's); needs a run made with --epochs")
    power.add_argument("--cluster-by", choices=("benchmark", "none"), default="benchmark", dest="cluster_by",
                       help="use the run's clusters (default) or treat items as independent")
    add_store_option(power)
    power.set_defaults(func=_power_cli)


__all__ = ["Power", "clustered_se", "epoch_scale", "power_analysis", "register_cli"]
