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
COUNTED_PER_VALUE = 16  # items per value from which a group's value counts are drawn (a binomial: about 13 draws)
COUNTED_FROM = 2_000  # items from which Design.mean_draws counts values: smaller data keep the draws they always had


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
        ``within``, of :meth:`within_weight_blocks`): the same bootstrap, at a fraction of its cost.

        A resample draws each group's items with replacement, as many as it has (the group: every item, or,
        ``within``, each cluster). The mean is a sum of each group's distinct values times how often they
        were drawn, and those counts are multinomial with the values' shares of the group. So a group
        with one value adds it without a draw, and one with at least :data:`COUNTED_PER_VALUE` items per
        distinct value draws those counts (a binomial per value) instead of an item per draw, in data of at
        least :data:`COUNTED_FROM` items (smaller data draw every item, as they always have). The other groups'
        draws are summed where they land: the draws :meth:`weight_blocks` (:meth:`within_weight_blocks`)
        counts, so that where every group is drawn this is ``weighted_mean`` under those weights but for the
        order of the sums (the last bit). Counted groups are drawn first, then the others; the stream does not
        depend on the blocks.
        """
        n = len(data)
        if n == 0:
            return np.full(resamples, np.nan)
        if self.clusters is not None and not within:  # whole clusters: their weights, as the statistic would take them
            return np.concatenate([w @ data / w.sum(axis=1)
                                   for w in self.weight_blocks(n, resamples=resamples, seed=seed)])
        rng = np.random.default_rng(seed)
        grouped = within and self.clusters is not None
        groups = self.cells(n)[1] if grouped else np.zeros(n, dtype=np.int64)
        tally = _Tally.of(groups, data)
        out = np.full(resamples, tally.fixed)
        if tally.counted:
            tally.add_counted(out, rng)
        if tally.drawn.all() and not grouped:  # every item drawn from all: the draws of weight_blocks
            block = max(1, MEAN_BLOCK_CELLS // n)
            for first in range(0, resamples, block):
                k = min(block, resamples - first)
                out[first:first + k] += data[rng.integers(0, n, size=(k, n))].sum(axis=1)
        elif tally.drawn.any():  # the drawn groups' items, each group a run: draws as within_weight_blocks makes
            order, start, size = _runs_of(groups[tally.drawn])
            ordered, size = data[tally.drawn][order], size.astype(float)
            m = len(ordered)
            block = max(1, MEAN_BLOCK_CELLS // m)
            for first in range(0, resamples, block):
                k = min(block, resamples - first)
                landed = rng.random((k, m))
                landed *= size
                picked = landed.astype(np.int64)
                picked += start
                out[first:first + k] += ordered[picked].sum(axis=1)
        return out / n

    def _runs(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:func:`_runs_of` the items' clusters."""
        return _runs_of(self.cells(n)[1])


def _runs_of(groups: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Items by group (each group a run of positions in ``order``), and at each position its run's first
    position and length: a draw ``u`` in [0, 1) at a position picks ``order[start + int(u * size)]``."""
    order = np.argsort(groups, kind="stable")
    sizes = np.bincount(groups)
    start = np.concatenate([[0], np.cumsum(sizes)[:-1]])[groups[order]]
    return order, start, sizes[groups[order]]


@dataclass(frozen=True)
class _Tally:
    """The groups of a resample (items drawn with replacement within each) by their distinct values.

    Attributes:
        fixed: the summed values of the groups with one value, which every resample draws alike.
        counted: per counted group, its size, its distinct values and their counts.
        drawn: which items belong to the groups whose items are drawn one by one.
    """

    fixed: float
    counted: list[tuple[int, np.ndarray, np.ndarray]]
    drawn: np.ndarray

    @classmethod
    def of(cls, groups: np.ndarray, data: np.ndarray) -> _Tally:
        """The tally of ``data`` in ``groups`` (one code per item): below :data:`COUNTED_FROM` items, every
        item drawn."""
        if len(data) < COUNTED_FROM:
            return cls(0.0, [], np.ones(len(data), dtype=bool))
        order = np.lexsort((data, groups))
        g, v = groups[order], data[order]
        new = np.empty(len(v), dtype=bool)
        new[0] = True
        new[1:] = (g[1:] != g[:-1]) | (v[1:] != v[:-1])
        first = np.flatnonzero(new)  # each (group, value) pair's first position
        pair_group, pair_value = g[first], v[first]
        pair_count = np.diff(np.append(first, len(v)))
        sizes = np.bincount(groups)
        distinct = np.bincount(pair_group, minlength=len(sizes))
        single = distinct[pair_group] == 1
        fixed = float(pair_value[single] @ pair_count[single])
        counts = (sizes >= COUNTED_PER_VALUE * distinct) & (distinct > 1)
        counted = []
        for group in np.flatnonzero(counts):
            lo, hi = np.searchsorted(pair_group, [group, group + 1])
            counted.append((int(sizes[group]), pair_value[lo:hi], pair_count[lo:hi]))
        drawn = (distinct > 1) & ~counts
        return cls(fixed, counted, drawn[groups])

    def add_counted(self, out: np.ndarray, rng: np.random.Generator) -> None:
        """Add to each resample in ``out`` the counted groups' sums: each group's value counts drawn as one
        multinomial of its size over the values' shares, its commonest value last (it takes what is left,
        exactly, without a draw). Groups with as many values are drawn together, fewest values first."""
        by_width: dict[int, list[tuple[int, np.ndarray, np.ndarray]]] = {}
        for group in self.counted:
            by_width.setdefault(len(group[1]), []).append(group)
        for width in sorted(by_width):
            groups = by_width[width]
            sizes = np.array([size for size, _, _ in groups])
            shares, values = np.empty((len(groups), width)), np.empty((len(groups), width))
            for row, (size, vals, counts) in enumerate(groups):
                rank = np.argsort(counts, kind="stable")
                shares[row], values[row] = counts[rank] / size, vals[rank]
            block = max(1, MEAN_BLOCK_CELLS // shares.size)
            for first in range(0, len(out), block):
                k = min(block, len(out) - first)
                drawn = rng.multinomial(sizes, shares, size=(k, len(groups)))
                out[first:first + k] += np.einsum("kgv,gv->k", drawn, values)


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
