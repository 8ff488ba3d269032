"""A metric as a statistic of per-item data (:class:`Estimator`), and its value with its two seeded intervals."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from fieldeval.defaults import DEFAULT_RESAMPLES, DEFAULT_SEED
from fieldeval.stats import robust
from fieldeval.stats._bootstrap import Design
from fieldeval.stats._entry import MetricValue, PairedValue, _round, _round_p, metric
from fieldeval.stats._interval import interval

Statistic = Callable[[np.ndarray, np.ndarray], np.ndarray]
CONFIDENCE = 0.95


def weighted_mean(data: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The weighted mean of ``data`` (NaN: not defined for the item) under each row of ``weights``."""
    defined = ~np.isnan(data)
    w = weights * defined
    with np.errstate(invalid="ignore", divide="ignore"):
        return (w @ np.where(defined, data, 0.0)) / w.sum(axis=1)


@dataclass(frozen=True)
class Estimator:
    """A metric as a statistic of per-item data under item weights.

    Attributes:
        data: ``(n, ...)``, one entry per row of the run (aligned, so two runs' items pair up).
        statistic: ``(data, weights (k, n)) -> k values``; weights of ones give the metric itself.
        defined: which items count for the metric (its ``n``).
        bounds: the range the metric takes, or None.
    """

    data: np.ndarray
    statistic: Statistic
    defined: np.ndarray
    bounds: tuple[float, float] | None = None

    @classmethod
    def mean(cls, values: Sequence[float | None], bounds: tuple[float, float] | None = None) -> Estimator:
        """The mean of per-item values (None: not defined for the item) in the metric's range ``bounds``."""
        data = np.array(values, dtype=float)  # None: NaN
        return cls(data, weighted_mean, ~np.isnan(data), bounds)

    def take(self, index: np.ndarray) -> Estimator:
        """The estimator of the items at ``index`` (in that order)."""
        return Estimator(self.data[index], self.statistic, self.defined[index], self.bounds)

    def is_mean(self, keep: np.ndarray) -> bool:
        """Whether the metric is the plain mean of its data on the items ``keep`` (closed forms apply)."""
        return self.statistic is weighted_mean and self.data.ndim == 1 and not np.isnan(self.data[keep]).any()


@dataclass(frozen=True)
class Evidence:
    """What a metric's two intervals rest on, kept so that p-values answer the same questions.

    Attributes:
        point: the metric's value.
        spread: the clustered ci95's CR2 standard error and degrees of freedom (None: items are independent,
            and ``ci95`` is the percentile interval of ``boot``).
        boot: the item bootstrap's values (only without clusters).
        within: the values of the bootstrap of items within their clusters (``ci95_within``).
    """

    point: float
    spread: robust.Spread | None
    boot: np.ndarray | None
    within: np.ndarray

    def p_value(self, *, within: bool = False) -> float | None:
        """Two-sided p of "the metric is 0" for the question ``ci95`` (or ``ci95_within``) answers."""
        if self.spread is None or within:
            draws = self.within if within else self.boot
            return None if draws is None or draws.size == 0 else min(1.0, 2 * min(
                _share(draws <= 0), _share(draws >= 0)))
        if not self.spread.se:
            return 1.0 if self.point == 0 else 0.0
        return min(1.0, 2 * robust.t_cdf(-abs(self.point) / self.spread.se, self.spread.df))

    def p_below(self, threshold: float, *, within: bool = False) -> float | None:
        """One-sided p of "the metric is at least ``threshold``" (small: it is below)."""
        if self.spread is None or within:
            draws = self.within if within else self.boot
            return None if draws is None or draws.size == 0 else _share(draws >= threshold)
        if not self.spread.se:
            return 0.0 if self.point < threshold else 1.0
        return robust.t_cdf((self.point - threshold) / self.spread.se, self.spread.df)


def _share(hits: np.ndarray) -> float:
    """A bootstrap p-value's share, ``(hits + 1) / (draws + 1)``: never 0 on finitely many draws."""
    return (int(hits.sum()) + 1) / (hits.size + 1)


def _fit(point: float, statistic: Callable[[np.ndarray], np.ndarray], n: int, design: Design,
         bounds: tuple[float, float] | None, *, means: np.ndarray | None, resamples: int,
         seed: int) -> tuple[dict[str, list[float | None]], Evidence | None]:
    """``{"ci95", "ci95_within"}`` of a statistic of ``n`` items, with the evidence behind them.

    Without clusters both are the item bootstrap's percentile interval. With clusters, ``ci95`` is
    ``point +/- t(df) * se`` from :func:`fieldeval.stats.robust.spread`, kept within the metric's range and
    within what any resample of the clusters can give (``[None, None]`` unless the clusters outnumber the
    strata); ``ci95_within`` is the percentile interval of the bootstrap of items within their clusters.
    """
    none = {"ci95": [None, None], "ci95_within": [None, None]}
    if np.isnan(point):
        return none, None
    if not design.clustered:
        boot = (design.mean_draws(means, resamples=resamples, seed=seed) if means is not None else
                np.concatenate([statistic(w) for w in design.weight_blocks(n, resamples=resamples, seed=seed)]))
        ci = list(interval(point, boot, 1.0, bounds))
        return {"ci95": ci, "ci95_within": ci}, Evidence(point, None, boot[~np.isnan(boot)], boot[~np.isnan(boot)])
    stratum, cluster = design.cells(n)
    within = (design.mean_draws(means, resamples=resamples, seed=seed, within=True) if means is not None else
              np.concatenate([statistic(w) for w in design.within_weight_blocks(n, resamples=resamples, seed=seed)]))
    within = within[~np.isnan(within)]
    ci_within = list(interval(point, within, 1.0, bounds))
    if design.n_clusters(n) - design.n_strata(n) < 1:
        return {"ci95": [None, None], "ci95_within": ci_within}, None
    if means is not None:
        cluster_means = np.bincount(cluster, weights=means) / np.bincount(cluster)
        found = robust.spread(statistic, point, n, cluster, stratum, cluster_means=cluster_means)
    else:
        drawn = np.concatenate([statistic(w) for w in design.weight_blocks(n, resamples=resamples, seed=seed)])
        found = robust.spread(statistic, point, n, cluster, stratum, extremes=drawn[~np.isnan(drawn)])
    half = robust.t_ppf(0.5 + CONFIDENCE / 2, found.df) * found.se if found.se else 0.0
    lo, hi = max(point - half, found.low), min(point + half, found.high)
    if bounds is not None:
        lo, hi = max(lo, bounds[0]), min(hi, bounds[1])
    lo, hi = min(lo, point), max(hi, point)
    return {"ci95": [_round(lo), _round(hi)], "ci95_within": ci_within}, Evidence(point, found, None, within)


def estimate(est: Estimator, design: Design = Design(), *, resamples: int = DEFAULT_RESAMPLES,
             seed: int = DEFAULT_SEED) -> MetricValue:
    """The metric with its two seeded ci95s (:func:`metric`), ``n`` and ``n_clusters``.

    Items where the metric is not defined are left out first, so ``n`` and the clusters count only
    the items that count.
    """
    return estimate_with_evidence(est, design, resamples=resamples, seed=seed)[0]


def estimate_with_evidence(est: Estimator, design: Design = Design(), *, resamples: int = DEFAULT_RESAMPLES,
                           seed: int = DEFAULT_SEED) -> tuple[MetricValue, Evidence | None]:
    """:func:`estimate`, and the :class:`Evidence` its intervals rest on (None: no interval)."""
    keep = np.asarray(est.defined, dtype=bool)
    data, sub = est.data[keep], design.subset(keep)
    n = int(keep.sum())
    if n == 0:
        return metric(None, [None, None], 0, 0), None
    point = float(est.statistic(data, np.ones((1, n)))[0])
    cis, evidence = _fit(point, lambda w: est.statistic(data, w), n, sub, est.bounds,
                         means=data if est.is_mean(keep) else None, resamples=resamples, seed=seed)
    entry = metric(None if np.isnan(point) else _round(point), cis["ci95"], n, sub.n_clusters(n), cis["ci95_within"])
    return entry, evidence


def paired_difference(base: Estimator, other: Estimator, design: Design = Design(), *,
                      resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> PairedValue:
    """``other - base`` on the same items (aligned), with paired intervals: one set of resamples for both.

    Returns:
        ``{"value", "ci95", "ci95_within", "n", "n_clusters", "p_value"}`` over the items defined in both;
        ``p_value`` is the two-sided p of "no difference" for the question ``ci95`` answers.
    """
    entry, evidence = paired_difference_with_evidence(base, other, design, resamples=resamples, seed=seed)
    return {**entry, "p_value": None if evidence is None else _round_p(evidence.p_value())}


def paired_difference_with_evidence(base: Estimator, other: Estimator, design: Design = Design(), *,
                                    resamples: int = DEFAULT_RESAMPLES,
                                    seed: int = DEFAULT_SEED) -> tuple[MetricValue, Evidence | None]:
    """:func:`paired_difference` without its p-value, and the :class:`Evidence` behind its intervals."""
    keep = np.asarray(base.defined, dtype=bool) & np.asarray(other.defined, dtype=bool)
    n = int(keep.sum())
    if n == 0:
        return metric(None, [None, None], 0, 0), None
    sub = design.subset(keep)
    a, b = base.data[keep], other.data[keep]
    point = float(other.statistic(b, np.ones((1, n)))[0] - base.statistic(a, np.ones((1, n)))[0])
    bounds = None
    if base.bounds is not None and other.bounds is not None:
        bounds = (other.bounds[0] - base.bounds[1], other.bounds[1] - base.bounds[0])
    means = b - a if base.is_mean(keep) and other.is_mean(keep) else None
    cis, evidence = _fit(point, lambda w: other.statistic(b, w) - base.statistic(a, w), n, sub, bounds,
                         means=means, resamples=resamples, seed=seed)
    return metric(_round(point), cis["ci95"], n, sub.n_clusters(n), cis["ci95_within"]), evidence


def mean_metric(
    values: Sequence[float],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    design: Design = Design(),
) -> MetricValue:
    """The mean of ``values`` with its two seeded 95% intervals, as :func:`estimate` gives them.

    Args:
        values: one number per item (booleans count as 0/1).
        resamples: bootstrap resamples.
        seed: generator seed; the same values and seed give the same intervals.
        design: each value's cluster (and stratum); i.i.d. items by default.

    Returns:
        ``{"value": mean, "ci95": [lo, hi], "ci95_within": [lo, hi], "n": len(values), "n_clusters"}``; a None
        value and None bounds when empty.

    Example:
        >>> mean_metric([1, 0, 1, 1], resamples=200, seed=1)["value"]
        0.75
    """
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return metric(None, [None, None], 0, 0)
    est = Estimator(data, weighted_mean, np.ones(data.size, dtype=bool))
    return estimate(est, design, resamples=resamples, seed=seed)


def statistic_metric(
    data: np.ndarray,
    statistic: Statistic,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    design: Design = Design(),
    bounds: tuple[float, float] | None = None,
) -> MetricValue:
    """Any statistic of per-item data with its two seeded 95% intervals, as :func:`estimate` gives them.

    ``statistic`` receives the data and a ``(k, n)`` matrix of item weights (ones for the
    metric itself, then every resample at once) and returns ``k`` values. A resample on which
    the statistic is undefined (NaN) is left out of the interval.
    """
    n = len(data)
    if n == 0:
        return metric(None, [None, None], 0, 0)
    return estimate(Estimator(np.asarray(data), statistic, np.ones(n, dtype=bool), bounds), design,
                    resamples=resamples, seed=seed)


__all__ = ["CONFIDENCE", "Estimator", "Evidence", "Statistic", "estimate", "estimate_with_evidence", "mean_metric",
           "paired_difference", "paired_difference_with_evidence", "statistic_metric", "weighted_mean"]
