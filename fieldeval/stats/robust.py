"""Few-cluster intervals: bias-reduced cluster-robust variance (CR2) with Imbens-Kolesar degrees of freedom.

For items drawn in few clusters, perhaps of very unequal size, following Bell and McCaffrey (2002) and
Imbens and Kolesar, "Robust Standard Errors in Small Samples: Some Practical Advice" (2016): a metric is
linearised in its clusters' weights, its variance is the CR2 sum (each cluster's share of the metric
inflated by its leverage), and its t has the Satterthwaite degrees of freedom of that sum under a working
model of random cluster effects, at the least favourable intraclass correlation (few clusters cannot
estimate it).

The t distribution for fractional degrees of freedom comes from the regularised incomplete beta function
(a continued fraction), and whole degrees of freedom have their own quantile, so the module needs no SciPy.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from math import atan, cos, exp, inf, isfinite, lgamma, log, log1p, pi, sin, sqrt, tan
from statistics import NormalDist

import numpy as np

Linear = Callable[[np.ndarray], np.ndarray]  # (k, n) item weights -> k values of the statistic


@dataclass(frozen=True)
class Spread:
    """How far a clustered metric may be from its value on new clusters.

    Attributes:
        se: the CR2 standard error.
        df: the Imbens-Kolesar degrees of freedom of its t.
        low: the smallest value any resample of the clusters can give.
        high: the largest.
    """

    se: float
    df: float
    low: float
    high: float


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz; Numerical Recipes 6.4)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-16:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function ``I_x(a, b)`` (``scipy.special.betainc``)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = exp(lgamma(a + b) - lgamma(a) - lgamma(b) + a * log(x) + b * log(1.0 - x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df > 0`` degrees of freedom, whole or not (``scipy.special.stdtr``)."""
    if not isfinite(t):
        return 0.0 if t < 0 else 1.0
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t < 0 else 1.0 - tail


def t_ppf(p: float, df: float) -> float:
    """Student's t quantile for ``0 < p < 1`` and any ``df > 0`` (``scipy.special.stdtrit``).

    Whole ``df`` use :func:`t_quantile`; others bisect :func:`t_cdf` to machine precision.

    Example:
        >>> round(t_ppf(0.975, 1.5), 4)
        6.0167
    """
    if p < 0.5:
        return -t_ppf(1.0 - p, df)
    if float(df).is_integer():
        return t_quantile(p, int(df))
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        low, high = high, high * 2.0
    for _ in range(200):
        mid = (low + high) / 2.0
        if mid in (low, high):
            break
        low, high = (mid, high) if t_cdf(mid, df) < p else (low, mid)
    return (low + high) / 2.0


def satterthwaite_df(sizes: np.ndarray, stratum_of: np.ndarray, rho: float) -> float:
    """The degrees of freedom of the CR2 variance of a (stratified) mean with clusters of ``sizes``, under a
    working model of equicorrelated items within a cluster (correlation ``rho``): Bell and McCaffrey's
    Satterthwaite approximation ``tr(Q)^2 / tr(Q^2)`` (Imbens and Kolesar), in closed form per stratum.

    Per stratum of ``N`` items, ``Z'MZ = diag(n) - n n'/N``, and ``Q = S((1-rho) Z'MZ + rho (Z'MZ)^2)S`` with
    ``S = diag((1 - n/N)^-1/2)`` is a diagonal plus a rank-two matrix, so both traces take O(G) work.
    """
    sizes = np.asarray(sizes, dtype=float)
    trace = trace2 = 0.0
    for h in np.unique(stratum_of):
        n = sizes[stratum_of == h]
        total = n.sum()
        scale2 = 1.0 / (1.0 - np.minimum(n / total, 1.0 - 1e-12))
        x, y = np.sqrt(scale2) * n, np.sqrt(scale2) * n * n  # S n and S diag(n) n
        alpha, beta = -(1.0 - rho) / total + rho * float(np.sum(n * n)) / total ** 2, -rho / total
        e = scale2 * ((1.0 - rho) * n + rho * n * n)
        xx, xy, yy = float(x @ x), float(x @ y), float(y @ y)
        trace += float(e.sum()) + alpha * xx + 2 * beta * xy
        low = np.array([[alpha, beta], [beta, 0.0]]) @ np.array([[xx, xy], [xy, yy]])  # tr(L^2) = tr((MK)^2)
        trace2 += float(e @ e) + 2 * float(e @ (alpha * x * x + 2 * beta * x * y)) + float(np.trace(low @ low))
    return trace ** 2 / trace2 if trace2 > 0 else inf


WORKING_CORRELATIONS = np.linspace(0.0, 0.999, 41)


def least_df(sizes: np.ndarray, stratum_of: np.ndarray) -> float:
    """The fewest degrees of freedom :func:`satterthwaite_df` gives over working correlations in [0, 1): with few
    clusters their correlation cannot be estimated, so the interval takes the least favourable one."""
    return min(satterthwaite_df(sizes, stratum_of, rho) for rho in WORKING_CORRELATIONS)


def spread(statistic: Linear, point: float, n: int, cluster: np.ndarray, stratum: np.ndarray, *, cluster_means: np.ndarray | None = None,
           extremes: Sequence[float] = ()) -> Spread:
    """The CR2 standard error, Imbens-Kolesar df and resample range of a statistic of clustered items.

    Args:
        statistic: item weights ``(k, n)`` -> the statistic under each row (ones: ``point``).
        point: the statistic on the items.
        n: the items.
        cluster: each item's cluster code (0..G-1), unique over strata.
        stratum: each item's stratum code.
        cluster_means: when the statistic is the mean of per-item values, each cluster's mean of them: the
            linearisation and the resample range are then exact, with no weights drawn.
        extremes: values the statistic took under drawn resamples of the clusters (its range covers them).
    """
    sizes = np.bincount(cluster, minlength=int(cluster.max()) + 1).astype(float)
    stratum_of = np.zeros(sizes.size, dtype=np.int64)
    stratum_of[cluster] = stratum
    if cluster_means is not None:
        psi = sizes / n * (cluster_means - point)
        low, high = float(cluster_means.min()), float(cluster_means.max())
    else:
        psi = _influence(statistic, n, cluster, sizes.size)
        alone = _alone(statistic, n, cluster, sizes.size)
        alone = alone[~np.isnan(alone)]
        found = np.concatenate([alone, np.asarray(extremes, dtype=float), [point]])
        found = found[~np.isnan(found)]
        low, high = float(found.min()), float(found.max())
    n_h = np.bincount(stratum_of, weights=sizes)
    psi = psi - sizes / n_h[stratum_of] * np.bincount(stratum_of, weights=psi)[stratum_of]  # deviations within strata
    share = np.minimum(sizes / n_h[stratum_of], 1.0 - 1e-12)
    se = sqrt(float(np.sum(psi ** 2 / (1.0 - share))))
    return Spread(se, least_df(sizes, stratum_of), low, high)


INFLUENCE_STEP = 1e-4  # a cluster's weight is moved this far each way to take the statistic's derivative


def _rows(statistic: Linear, n: int, cluster: np.ndarray, n_clusters: int, make: Callable[[np.ndarray], np.ndarray],
          block_cells: int = 4_000_000) -> np.ndarray:
    """The statistic under one weight row per cluster (``make(cluster indicator rows)``), a block at a time."""
    block = max(1, block_cells // max(n, 1))
    out = []
    for start in range(0, n_clusters, block):
        ids = np.arange(start, min(start + block, n_clusters))
        indicator = (cluster[None, :] == ids[:, None]).astype(float)
        out.append(statistic(make(indicator)))
    return np.concatenate(out) if out else np.zeros(0)


def _influence(statistic: Linear, n: int, cluster: np.ndarray, n_clusters: int) -> np.ndarray:
    """Each cluster's derivative of the statistic in its weight, by central differences."""
    up = _rows(statistic, n, cluster, n_clusters, lambda ind: 1.0 + INFLUENCE_STEP * ind)
    down = _rows(statistic, n, cluster, n_clusters, lambda ind: 1.0 - INFLUENCE_STEP * ind)
    return np.nan_to_num((up - down) / (2 * INFLUENCE_STEP))


def _alone(statistic: Linear, n: int, cluster: np.ndarray, n_clusters: int) -> np.ndarray:
    """The statistic of each cluster alone (a resample that draws one cluster every time)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return _rows(statistic, n, cluster, n_clusters, lambda ind: ind)


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjustment of a family of p-values (None: not tested, left out of the family).

    Example:
        >>> holm([0.01, 0.04, 0.03])
        [0.03, 0.06, 0.06]
    """
    tested = [(p, i) for i, p in enumerate(p_values) if p is not None]
    out: list[float | None] = [None] * len(p_values)
    running, m = 0.0, len(tested)
    for rank, (p, i) in enumerate(sorted(tested)):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


@functools.lru_cache(maxsize=256)
def t_quantile(p: float, df: int) -> float:
    """Student's t quantile ``t.ppf(p, df)`` for ``0.5 <= p < 1`` and a whole ``df >= 1``.

    Closed forms for 1 and 2 degrees of freedom; up to :data:`T_SERIES_DF`, Newton's method on the exact
    distribution function of a whole ``df`` (Abramowitz and Stegun 26.7.3-4) from the normal quantile; above
    it, the Cornish-Fisher expansion in ``1/df`` to its fourth term (A&S 26.7.5). Both agree with SciPy's
    ``t.ppf`` to a relative 1e-12 for ``p`` from 0.75 to 0.995.

    Example:
        >>> round(t_quantile(0.975, 5), 6)
        2.570582
    """
    if df == 1:
        return tan(pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) / sqrt(2 * p * (1 - p))
    z = NormalDist().inv_cdf(p)
    if df > T_SERIES_DF:
        z2 = z * z
        g = [z * (z2 + 1) / 4, z * ((5 * z2 + 16) * z2 + 3) / 96, z * (((3 * z2 + 19) * z2 + 17) * z2 - 15) / 384,
             z * ((((79 * z2 + 776) * z2 + 1482) * z2 - 1920) * z2 - 945) / 92160]
        return z + sum(term / df ** power for power, term in enumerate(g, start=1))
    log_density = lgamma((df + 1) / 2) - lgamma(df / 2) - 0.5 * log(df * pi)
    t = z  # below the t quantile, where Newton's steps on the concave distribution function rise to it
    for _ in range(100):
        step = (p - _whole_t_cdf(t, df)) / exp(log_density - (df + 1) / 2 * log1p(t * t / df))
        t += step
        if abs(step) <= 1e-15 * t:
            break
    return float(t)


T_SERIES_DF = 1_000  # t_quantile's exact series up to these degrees of freedom, its expansion above


def _whole_t_cdf(t: float, df: int) -> float:
    """P(T <= t) for t >= 0 and a whole ``df >= 3`` (A&S 26.7.3 for odd ``df``, 26.7.4 for even)."""
    theta = atan(t / sqrt(df))
    c2 = cos(theta) ** 2
    k = np.arange(1, df // 2, dtype=float)  # the series' terms after its first, as a running product
    if df % 2:
        series = 1.0 + np.cumprod(2 * k / (2 * k + 1) * c2).sum()
        two_sided = 2 / pi * (theta + sin(theta) * cos(theta) * series)
    else:
        series = 1.0 + np.cumprod((2 * k - 1) / (2 * k) * c2).sum()
        two_sided = sin(theta) * series
    return 0.5 + two_sided / 2


__all__ = ["T_SERIES_DF", "Spread", "betainc", "holm", "least_df", "satterthwaite_df", "spread", "t_cdf", "t_ppf",
           "t_quantile"]
