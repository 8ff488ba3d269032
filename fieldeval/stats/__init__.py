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

The parts: :mod:`._bootstrap` (the design and its resamples), :mod:`._estimate` (estimators, evidence, the
two intervals), :mod:`._interval` (percentile intervals), :mod:`._entry` (a metric's report entry),
:mod:`.robust` (CR2 and the t distribution).
"""

from __future__ import annotations

from fieldeval.defaults import DEFAULT_RESAMPLES, DEFAULT_SEED
from fieldeval.stats._bootstrap import RESAMPLE_BLOCK_CELLS, Design, resample_indices
from fieldeval.stats._entry import FEW_CLUSTERS, MetricValue, PairedValue, few_clusters, metric
from fieldeval.stats._estimate import (
    CONFIDENCE,
    Estimator,
    Evidence,
    Statistic,
    estimate,
    estimate_with_evidence,
    mean_metric,
    paired_difference,
    paired_difference_with_evidence,
    statistic_metric,
    weighted_mean,
)
from fieldeval.stats._interval import Z_975, interval, widening
from fieldeval.stats.robust import T_SERIES_DF, t_quantile

__all__ = [
    "CONFIDENCE",
    "DEFAULT_RESAMPLES",
    "DEFAULT_SEED",
    "FEW_CLUSTERS",
    "RESAMPLE_BLOCK_CELLS",
    "T_SERIES_DF",
    "Z_975",
    "Design",
    "Estimator",
    "Evidence",
    "MetricValue",
    "PairedValue",
    "Statistic",
    "estimate",
    "estimate_with_evidence",
    "few_clusters",
    "interval",
    "mean_metric",
    "metric",
    "paired_difference",
    "paired_difference_with_evidence",
    "resample_indices",
    "statistic_metric",
    "t_quantile",
    "weighted_mean",
    "widening",
]
