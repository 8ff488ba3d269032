"""Percentile intervals of resampled values, and the few-cluster factor that widens one."""

from __future__ import annotations

from math import sqrt

import numpy as np

from fieldeval.stats._bootstrap import Design
from fieldeval.stats._entry import _round
from fieldeval.stats.robust import t_quantile

Z_975 = 1.959963984540054


def widening(design: Design, n: int) -> float:
    """The factor that widens a clustered percentile interval: ``sqrt(G/(G-1)) * t(G-H) / z`` for ``G`` clusters
    in ``H`` strata; 1 without clusters, NaN when ``G - H < 1``.

    Grader agreement (:mod:`fieldeval.benchmarks.ibf.agreement`) widens its intervals by it; a metric's ci95 is
    :func:`fieldeval.stats.estimate`'s."""
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


__all__ = ["Z_975", "interval", "widening"]
