"""Seeded bootstrap intervals, vectorised with numpy."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

DEFAULT_RESAMPLES = 1000
DEFAULT_SEED = 20261130
RESAMPLE_BLOCK_CELLS = 4_000_000  # bootstrap indices drawn at once (32 MB)


def resample_indices(n: int, *, resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> np.ndarray:
    """A ``(resamples, n)`` matrix of bootstrap row indices from a seeded generator."""
    return np.random.default_rng(seed).integers(0, n, size=(resamples, n))


def metric(value: float | None, ci95: Sequence[float | None], n: int) -> dict:
    """The report's metric shape: ``{"value", "ci95": [lo, hi], "n"}``."""
    return {"value": value, "ci95": list(ci95), "n": n}


def mean_metric(
    values: Sequence[float],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> dict:
    """Mean of ``values`` with a seeded percentile bootstrap 95% interval.

    Args:
        values: one number per item (booleans count as 0/1).
        resamples: bootstrap resamples.
        seed: generator seed; the same values and seed give the same interval.

    Returns:
        ``{"value": mean, "ci95": [lo, hi], "n": len(values)}``; None values when empty.

    Example:
        >>> mean_metric([1, 0, 1, 1], resamples=200, seed=1)["value"]
        0.75
    """
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return metric(None, [None, None], 0)
    return statistic_metric(data, lambda sample: sample.mean(axis=1), resamples=resamples, seed=seed)


def statistic_metric(
    data: np.ndarray,
    statistic: Callable[[np.ndarray], np.ndarray],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> dict:
    """Any statistic with a seeded percentile bootstrap interval.

    ``statistic`` receives a ``(k, n, ...)`` array of ``k`` samples (the data
    itself as ``k = 1``, then every resample at once) and returns ``k`` values.
    A resample on which the statistic is undefined (NaN) is left out of the interval.
    """
    n = len(data)
    if n == 0:
        return metric(None, [None, None], 0)
    point = float(statistic(data[np.newaxis, ...])[0])
    # the resamples a block at a time: the same index stream as resample_indices draws at once (the generator
    # fills row after row), so the same numbers, without a (resamples x n) matrix in memory for large n
    rng = np.random.default_rng(seed)
    block = max(1, RESAMPLE_BLOCK_CELLS // n)
    boot = np.concatenate([statistic(data[rng.integers(0, n, size=(min(block, resamples - start), n))])
                           for start in range(0, resamples, block)])
    lo, hi = np.nanpercentile(boot, [2.5, 97.5])
    return metric(_round(point), [_round(lo), _round(hi)], n)


def _round(value: float) -> float:
    return round(float(value), 6)
