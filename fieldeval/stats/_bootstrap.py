"""How a benchmark's items were drawn (:class:`Design`), and its seeded resamples as ``(k, n)`` item weights."""

from __future__ import annotations

import functools

from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from itertools import compress

import numpy as np

from fieldeval.rows import column
from fieldeval.defaults import DEFAULT_RESAMPLES, DEFAULT_SEED

RESAMPLE_BLOCK_CELLS = 4_000_000  # cells (resamples x items) of the draws made at once
MEAN_BLOCK_CELLS = 250_000  # draws summed at once by Design.mean_draws: a block that stays in the cache


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
        if self.strata is None:  # one stratum: the clusters' own ranks are those of (stratum, cluster)
            return np.zeros(len(self.clusters), dtype=np.int64), _ranks(list(map(str, self.clusters)))
        strata = list(map(str, self.strata))
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
        """The rows of :meth:`weights`, ``block`` resamples at a time (by default as many as
        :data:`RESAMPLE_BLOCK_CELLS` cells hold, at least one), so a large run never holds a ``(resamples, n)``
        matrix; one block when it fits, which gives exactly :meth:`weights`."""
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
        order, start, size = self._runs(n)
        for first in range(0, resamples, block):
            k = min(block, resamples - first)
            picked = order[start + (rng.random((k, n)) * size).astype(np.int64)]
            yield _counts(picked, n).astype(float)

    def mean_draws(self, data: np.ndarray, *, resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
                   within: bool = False) -> np.ndarray:
        """The mean of ``data`` (one value per item, none NaN) under each resample of :meth:`weight_blocks` (or,
        ``within``, of :meth:`within_weight_blocks`): the same draws, summed where they land instead of counted
        into weights, which costs a few nanoseconds a draw. Equal to ``weighted_mean`` under those weights but for
        the order of the sums (the last bit)."""
        n = len(data)
        if n == 0:
            return np.full(resamples, np.nan)
        out = np.empty(resamples)
        rng = np.random.default_rng(seed)
        block = max(1, MEAN_BLOCK_CELLS // n)  # a generator gives the same stream in blocks of any size
        if within and self.clusters is not None:
            order, start, size = self._runs(n)
            ordered, size = data[order], size.astype(float)
            for first in range(0, resamples, block):
                k = min(block, resamples - first)
                landed = rng.random((k, n))
                landed *= size
                picked = landed.astype(np.int64)
                picked += start
                out[first:first + k] = ordered[picked].sum(axis=1)
            return out / n
        if self.clusters is not None:  # whole clusters: their weights, as the statistic would take them
            return np.concatenate([w @ data / w.sum(axis=1)
                                   for w in self.weight_blocks(n, resamples=resamples, seed=seed)])
        for first in range(0, resamples, block):
            k = min(block, resamples - first)
            out[first:first + k] = data[rng.integers(0, n, size=(k, n))].sum(axis=1)
        return out / n

    def _runs(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Items by cluster (each cluster a run of positions in ``order``), and at each position its run's first
        position and length: a draw ``u`` in [0, 1) at a position picks ``order[start + int(u * size)]``."""
        cluster = self.cells(n)[1]
        order = np.argsort(cluster, kind="stable")
        sizes = np.bincount(cluster)
        start = np.concatenate([[0], np.cumsum(sizes)[:-1]])[cluster[order]]
        return order, start, sizes[cluster[order]]


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


__all__ = ["RESAMPLE_BLOCK_CELLS", "Design", "resample_indices"]
