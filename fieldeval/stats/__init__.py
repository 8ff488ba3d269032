"""Seeded intervals that respect how the items were drawn, vectorised with numpy.

Items of one eval are rarely independent: EBS cases come from a handful of
studies, MicrobioRel pairs from shared paragraphs, IBF items from shared
hazards. Following Miller, "Adding Error Bars to Evals" (arXiv:2411.00640),
every metric carries two intervals, each answering one question:

- ``ci95``, on new clusters (new studies, paragraphs, hazards): with clusters,
  ``point +/- t(df) * se``, where ``se`` is the bias-reduced cluster-robust (CR2)
  standard error and ``df`` the Imbens-Kolesar degrees of freedom at the least
  favourable intraclass correlation (:mod:`fieldeval.stats.robust`), kept inside
  the metric's range and inside what any resample of the clusters can give;
  without clusters (``--cluster-by none``), the percentile interval of the item
  bootstrap;
- ``ci95_within``, on more items from these clusters: the percentile interval of
  the bootstrap of items within their clusters.

A resample is a ``(k, n)`` matrix of item weights (how often each item is drawn),
so a statistic is computed for every resample at once, and a paired difference
applies the same weights to both runs. :class:`Evidence` keeps what the intervals
rest on so that p-values (two-sided, and one-sided for the regression gate)
answer the same questions.
"""

from __future__ import annotations

import functools

from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from itertools import compress
from math import sqrt

import numpy as np

from fieldeval.rows import column
from fieldeval.defaults import DEFAULT_RESAMPLES, DEFAULT_SEED
from fieldeval.stats import robust
from fieldeval.stats.robust import T_SERIES_DF, t_quantile  # noqa: F401  (T_SERIES_DF: re-exported)

FEW_CLUSTERS = 10  # under this many clusters an interval is wide and approximate (said in every table)
Z_975 = 1.959963984540054

Statistic = Callable[[np.ndarray, np.ndarray], np.ndarray]
RESAMPLE_BLOCK_CELLS = 4_000_000  # bootstrap indices drawn at once (32 MB)


def resample_indices(n: int, *, resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> np.ndarray:
    """A ``(resamples, n)`` matrix of i.i.d. bootstrap row indices from a seeded generator."""
    return np.random.default_rng(seed).integers(0, n, size=(resamples, n))


@dataclass(frozen=True)
class Design:
    """How a benchmark's items were drawn: each item's cluster and, optionally, its stratum.

    Attributes:
        clusters: one hashable key per item (items sharing a key are resampled together); None: i.i.d. items.
        strata: one key per item; clusters are resampled within each stratum (a cluster in two strata is
            one cluster per stratum). None: one stratum.
    """

    clusters: tuple[Hashable, ...] | None = None
    strata: tuple[Hashable, ...] | None = None

    @classmethod
    def of_rows(cls, rows: Sequence[dict]) -> Design:
        """The design the engine recorded on rows (``cluster``, ``cluster_stratum``); i.i.d. when any row lacks one."""
        clusters = column(rows, "cluster")
        if not rows or None in clusters or "" in clusters:
            return cls()
        strata = column(rows, "cluster_stratum")
        return cls(tuple(clusters), tuple(strata) if None not in strata else None)

    def subset(self, mask: np.ndarray | Sequence[bool]) -> Design:
        """The design of the items where ``mask`` holds (a clustered design's codes are carried over, renumbered,
        not computed again from the keys)."""
        keep = np.asarray(mask, dtype=bool)
        if keep.all():
            return self
        kept = keep.tolist()  # Python bools: compress reads them without a numpy scalar per item
        pick = (lambda keys: None if keys is None else tuple(compress(keys, kept)))
        sub = Design(pick(self.clusters), pick(self.strata))
        if self.clusters is not None:  # codes are ranks of sorted keys: the kept ranks, renumbered, are the subset's
            sub.__dict__["_codes"] = tuple(np.unique(codes[keep], return_inverse=True)[1].astype(np.int64).ravel()
                                           for codes in self._codes)
        return sub

    @property
    def clustered(self) -> bool:
        """Whether items are resampled by cluster."""
        return self.clusters is not None

    def cells(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """``(stratum code, cluster code)`` per item; a cluster code is unique over strata."""
        if self.clusters is None:
            return np.zeros(n, dtype=np.int64), np.arange(n, dtype=np.int64)
        return self._codes

    @functools.cached_property
    def _codes(self) -> tuple[np.ndarray, np.ndarray]:
        """(stratum code, cluster code) per item of a clustered design, computed once per design."""
        strata = list(map(str, self.strata)) if self.strata is not None else ["0"] * len(self.clusters)
        return _ranks(strata), _ranks(list(zip(strata, map(str, self.clusters))))

    def n_clusters(self, n: int) -> int:
        """Clusters among ``n`` items (``n`` without clusters)."""
        if self.clusters is None:
            return n
        return int(self._codes[1].max()) + 1 if len(self.clusters) else 0

    def n_strata(self, n: int) -> int:
        """Strata among ``n`` items (1 without strata)."""
        if self.strata is None:
            return 1
        return int(self._codes[0].max()) + 1 if len(self.strata) else 0

    def weights(self, n: int, *, resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> np.ndarray:
        """A ``(resamples, n)`` matrix of item weights: how often each item is drawn in each resample.

        Without clusters these are the counts of :func:`resample_indices` (the same draws). With
        clusters each stratum's clusters are drawn with replacement, as many as it has, and an item
        weighs as often as its cluster was drawn.
        """
        return np.concatenate(list(self.weight_blocks(n, resamples=resamples, seed=seed, block=resamples)))

    def weight_blocks(self, n: int, *, resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
                      block: int | None = None) -> Iterator[np.ndarray]:
        """The rows of :meth:`weights` a block of resamples at a time (at most :data:`RESAMPLE_BLOCK_CELLS`
        cells each by default), so a large run never holds a ``(resamples, n)`` matrix; one block when it fits,
        which gives exactly :meth:`weights`."""
        if self.clusters is None:
            block = _block(n, block)
            rng = np.random.default_rng(seed)
            for start in range(0, resamples, block):
                k = min(block, resamples - start)
                yield _counts(rng.integers(0, n, size=(k, n)), n).astype(float)
            return
        _, cluster = self.cells(n)
        for per_cluster in self.cluster_weight_blocks(n, resamples=resamples, seed=seed, block=block):
            yield per_cluster[:, cluster]

    def cluster_weight_blocks(self, n: int, *, resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
                              block: int | None = None) -> Iterator[np.ndarray]:
        """The resample weights of a clustered design per cluster (columns: the cluster codes of :meth:`cells`),
        in the blocks and from the draws of :meth:`weight_blocks`, which gives every item its cluster's weight."""
        block = _block(n, block)
        rng = np.random.default_rng(seed)
        stratum, cluster = self.cells(n)
        by_stratum = [np.unique(cluster[stratum == s]) for s in range(stratum.max() + 1 if n else 0)]
        for start in range(0, resamples, block):
            k = min(block, resamples - start)
            per_cluster = np.zeros((k, cluster.max() + 1 if n else 0))
            for members in by_stratum:
                draws = rng.integers(0, len(members), size=(k, len(members)))
                per_cluster[:, members] = _counts(draws, len(members))
            yield per_cluster


    def within_weight_blocks(self, n: int, *, resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
                             block: int | None = None) -> Iterator[np.ndarray]:
        """Item weights of resamples that keep every cluster and draw its items with replacement (as many as it
        has): the bootstrap of "more items from these clusters". Without clusters, :meth:`weight_blocks`."""
        if self.clusters is None:
            yield from self.weight_blocks(n, resamples=resamples, seed=seed, block=block)
            return
        block = _block(n, block)
        rng = np.random.default_rng(seed)
        cluster = self.cells(n)[1]
        order = np.argsort(cluster, kind="stable")  # items by cluster: each cluster a run of positions
        sizes = np.bincount(cluster)
        start = np.concatenate([[0], np.cumsum(sizes)[:-1]])[cluster[order]]
        size = sizes[cluster[order]]
        for first in range(0, resamples, block):
            k = min(block, resamples - first)
            picked = order[start + (rng.random((k, n)) * size).astype(np.int64)]
            yield _counts(picked, n).astype(float)


def _ranks(keys: Sequence[Hashable]) -> np.ndarray:
    """Each key's rank among the distinct keys, sorted (``np.unique(keys, return_inverse=True)[1]`` without
    building a fixed-width text array of every key)."""
    rank = {key: code for code, key in enumerate(sorted(set(keys)))}
    return np.fromiter(map(rank.__getitem__, keys), dtype=np.int64, count=len(keys))


def _block(n: int, block: int | None) -> int:
    """Resamples drawn at once: ``block``, else as many as :data:`RESAMPLE_BLOCK_CELLS` cells of ``n`` items allow."""
    return block if block is not None else max(1, RESAMPLE_BLOCK_CELLS // max(n, 1))


def _counts(index: np.ndarray, n: int) -> np.ndarray:
    """Row-wise counts of ``0..n-1`` in an integer ``(k, m)`` matrix, as a ``(k, n)`` matrix."""
    k = index.shape[0]
    flat = (index + (np.arange(k, dtype=np.int64) * n)[:, None]).ravel()
    return np.bincount(flat, minlength=k * n).reshape(k, n)


def metric(value: float | None, ci95: Sequence[float | None], n: int, n_clusters: int | None = None,
           ci95_within: Sequence[float | None] | None = None) -> dict:
    """The report's metric shape: ``{"value", "ci95": [lo, hi], "ci95_within": [lo, hi], "n", "n_clusters"}``.

    ``ci95`` answers "on new clusters" (new studies, paragraphs, hazards); ``ci95_within`` answers "on more
    items from these clusters"; without clusters the two are one interval.
    """
    return {"value": value, "ci95": list(ci95), "ci95_within": list(ci95 if ci95_within is None else ci95_within),
            "n": n, "n_clusters": n if n_clusters is None else n_clusters}


def widening(design: Design, n: int) -> float:
    """How much a clustered percentile interval is widened: ``sqrt(G/(G-1)) * t(G-H) / z`` (1 without clusters).

    Only the agreement of graders (:mod:`fieldeval.benchmarks.ibf.agreement`) still widens a percentile interval;
    every metric's ci95 is :func:`estimate`'s."""
    if not design.clustered:
        return 1.0
    clusters = design.n_clusters(n)
    df = clusters - design.n_strata(n)
    if df < 1:
        return float("nan")
    return sqrt(clusters / (clusters - 1)) * t_quantile(0.975, df) / Z_975


def interval(point: float, boot: np.ndarray, factor: float,
             bounds: tuple[float, float] | None = None) -> tuple[float | None, float | None]:
    """The percentile interval of ``boot`` widened by ``factor`` about ``point``, kept within what the resamples
    gave (and the point) and within ``bounds``."""
    boot = boot[~np.isnan(boot)]
    if boot.size == 0 or np.isnan(factor) or np.isnan(point):
        return None, None
    q_lo, q_hi = np.percentile(boot, [2.5, 97.5])
    lo, hi = (q_lo, q_hi) if factor == 1.0 else (point - factor * (point - q_lo), point + factor * (q_hi - point))
    lo, hi = max(lo, min(boot.min(), point)), min(hi, max(boot.max(), point))
    lo, hi = min(lo, point), max(hi, point)
    if bounds is not None:
        lo, hi = max(lo, bounds[0]), min(hi, bounds[1])
    return _round(lo), _round(hi)


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


CONFIDENCE = 0.95


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
         bounds: tuple[float, float] | None, *, means: np.ndarray | None, resamples: int, seed: int) -> tuple[dict, Evidence | None]:
    """``(ci95, ci95_within)`` of a statistic of ``n`` items, with the evidence behind them.

    Without clusters both are the item bootstrap's percentile interval. With clusters, ``ci95`` is
    ``point +/- t(df) * se`` from :func:`fieldeval.stats.robust.spread`, kept within the metric's range and
    within what any resample of the clusters can give; ``ci95_within`` is the percentile interval of the
    bootstrap of items within their clusters.
    """
    none = {"ci95": [None, None], "ci95_within": [None, None]}
    if np.isnan(point):
        return none, None
    if not design.clustered:
        boot = np.concatenate([statistic(w) for w in design.weight_blocks(n, resamples=resamples, seed=seed)])
        ci = list(interval(point, boot, 1.0, bounds))
        return {"ci95": ci, "ci95_within": ci}, Evidence(point, None, boot[~np.isnan(boot)], boot[~np.isnan(boot)])
    stratum, cluster = design.cells(n)
    within = np.concatenate([statistic(w) for w in design.within_weight_blocks(n, resamples=resamples, seed=seed)])
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
             seed: int = DEFAULT_SEED) -> dict:
    """The metric with its two seeded ci95s (:func:`metric`), ``n`` and ``n_clusters``.

    Items where the metric is not defined are left out first, so ``n`` and the clusters count only
    the items that count.
    """
    return estimate_with_evidence(est, design, resamples=resamples, seed=seed)[0]


def estimate_with_evidence(est: Estimator, design: Design = Design(), *, resamples: int = DEFAULT_RESAMPLES,
                           seed: int = DEFAULT_SEED) -> tuple[dict, Evidence | None]:
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
                      resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> dict:
    """``other - base`` on the same items (aligned), with paired intervals: one set of resamples for both.

    Returns:
        ``{"value", "ci95", "ci95_within", "n", "n_clusters", "p_value"}`` over the items defined in both;
        ``p_value`` is the two-sided p of "no difference" for the question ``ci95`` answers.
    """
    entry, evidence = paired_difference_with_evidence(base, other, design, resamples=resamples, seed=seed)
    return {**entry, "p_value": None if evidence is None else _round_p(evidence.p_value())}


def paired_difference_with_evidence(base: Estimator, other: Estimator, design: Design = Design(), *,
                                    resamples: int = DEFAULT_RESAMPLES,
                                    seed: int = DEFAULT_SEED) -> tuple[dict, Evidence | None]:
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


def _round_p(p: float | None) -> float | None:
    """A p-value as the reports keep it (6 significant figures: small p-values stay readable)."""
    return None if p is None else float(f"{p:.6g}")


def mean_metric(
    values: Sequence[float],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    design: Design = Design(),
) -> dict:
    """Mean of ``values`` with a seeded percentile bootstrap 95% interval.

    Args:
        values: one number per item (booleans count as 0/1).
        resamples: bootstrap resamples.
        seed: generator seed; the same values and seed give the same interval.
        design: each value's cluster (and stratum); i.i.d. items by default.

    Returns:
        ``{"value": mean, "ci95": [lo, hi], "n": len(values), "n_clusters"}``; None values when empty.

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
) -> dict:
    """Any statistic with a seeded (cluster) percentile bootstrap interval.

    ``statistic`` receives the data and a ``(k, n)`` matrix of item weights (ones for the
    metric itself, then every resample at once) and returns ``k`` values. A resample on which
    the statistic is undefined (NaN) is left out of the interval.
    """
    n = len(data)
    if n == 0:
        return metric(None, [None, None], 0, 0)
    return estimate(Estimator(np.asarray(data), statistic, np.ones(n, dtype=bool), bounds), design,
                    resamples=resamples, seed=seed)


def few_clusters(entry: dict | None) -> bool:
    """Whether a metric entry rests on fewer than :data:`FEW_CLUSTERS` clusters (its interval is approximate)."""
    if not entry or entry.get("value") is None:
        return False
    clusters = entry.get("n_clusters")
    return clusters is not None and clusters < FEW_CLUSTERS and clusters < (entry.get("n") or 0)


def _round(value: float) -> float:
    return round(float(value), 6)
