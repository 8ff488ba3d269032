"""Repeated samples per item (``--epochs K``): one row per item, the variance split, and nested intervals.

Each epoch of an item is its own pytest item and row (``epoch`` 1..K). Before a
benchmark aggregates, :func:`collapse_epochs` makes one row per item: numbers
(and booleans) are the mean of the K values, text the majority (for a
classification: the majority answer, while the mean of ``correct`` stays in the
row). :func:`variance_split` separates the variance of a per-row score into
within-item (the model's own sampling) and between-item parts, by the one-way
random-effects method of moments (Miller, "Adding Error Bars to Evals",
arXiv:2411.00640, section 3); :func:`epoch_interval` resamples clusters, then
items, then epochs within items.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fieldeval.stats import DEFAULT_RESAMPLES, DEFAULT_SEED

#: keys that identify a row, never averaged
KEEP = ("benchmark", "model", "nodeid", "case_key", "cluster", "cluster_stratum", "hyperparameters", "model_name")


def has_epochs(rows: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the rows are repeated samples (each carries its ``epoch``)."""
    return any(row.get("epoch") is not None for row in rows)


def _item_key(row: Mapping[str, Any]) -> str:
    from fieldeval.rows import case_key

    key = case_key(row)
    epoch = row.get("epoch")
    suffix = f"-e{epoch}"
    return key.removesuffix(suffix) if epoch is not None else key


def group_epochs(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """The rows by item (their case), epochs in order."""
    items: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        items[_item_key(row)].append(row)
    for group in items.values():
        group.sort(key=lambda r: int(r.get("epoch") or 0))
    return dict(items)


def _is_number(value: Any) -> bool:
    return isinstance(value, bool | int | float) and not (isinstance(value, float) and value != value)


def collapse(group: Sequence[Mapping[str, Any]]) -> dict:
    """One row for an item's epochs: means of numbers and booleans, the majority of anything else."""
    out = dict(group[0])
    out.pop("epoch", None)
    out["epochs"] = len(group)
    for key in group[0]:
        if key in KEEP or key == "epoch":
            continue
        values = [row.get(key) for row in group]
        present = [v for v in values if v is not None]
        if not present:
            out[key] = None
        elif all(_is_number(v) for v in present):
            out[key] = float(np.mean([float(v) for v in present]))
        else:
            counts = Counter(map(_hashable, present))
            best = max(counts.values())
            out[key] = next(v for v in present if counts[_hashable(v)] == best)  # ties: the earliest epoch's
    return out


def _hashable(value: Any) -> Any:
    return value if isinstance(value, str | int | float | bool | tuple) else repr(value)


def collapse_epochs(rows: Sequence[Mapping[str, Any]]) -> list[dict]:
    """One row per item (see :func:`collapse`); rows without epochs are returned as they are."""
    if not has_epochs(rows):
        return [dict(r) for r in rows]
    return [collapse(group) for group in group_epochs(rows).values()]


def variance_split(values_by_item: Sequence[Sequence[float]]) -> dict[str, float | int | None]:
    """Within-item and between-item variance of a score, by the method of moments.

    ``within`` is the pooled variance of the epochs about their item's mean;
    ``between`` is the variance of the item means less ``within / K`` (never
    below 0). ``within_share`` is ``within / (within + between)``: near 1, more
    epochs would narrow the interval; near 0, more items would.

    Example:
        >>> variance_split([[0, 1], [0, 1], [1, 1], [0, 0]])["within"]
        0.25
    """
    groups = [np.asarray([v for v in vs if v is not None], dtype=float) for vs in values_by_item]
    groups = [g for g in groups if len(g)]
    repeated = [g for g in groups if len(g) > 1]
    if not repeated or len(groups) < 2:
        return {"within": None, "between": None, "within_share": None, "items": len(groups), "epochs": None}
    dof = sum(len(g) - 1 for g in repeated)
    within = float(sum(((g - g.mean()) ** 2).sum() for g in repeated) / dof)
    means = np.array([g.mean() for g in groups])
    k_harmonic = len(groups) / float(sum(1 / len(g) for g in groups))
    between = max(0.0, float(means.var(ddof=1)) - within / k_harmonic)
    total = within + between
    return {"within": _r(within), "between": _r(between),
            "within_share": _r(within / total) if total > 0 else None,
            "items": len(groups), "epochs": round(k_harmonic, 3)}


def epoch_interval(values_by_item: Sequence[Sequence[float]], clusters: Sequence[str | None] | None = None, *,
                   seed: int = DEFAULT_SEED, resamples: int = DEFAULT_RESAMPLES) -> tuple[float | None, float | None]:
    """Percentile ci95 of the mean of item means: resample clusters (when given), items within them, then epochs
    within each drawn item."""
    groups = [np.asarray([v for v in vs if v is not None], dtype=float) for vs in values_by_item]
    keep = [i for i, g in enumerate(groups) if len(g)]
    if not keep:
        return None, None
    groups = [groups[i] for i in keep]
    labels = [clusters[i] if clusters else None for i in keep]
    by_cluster: dict[Any, list[int]] = defaultdict(list)
    for i, label in enumerate(labels):
        by_cluster[label if label is not None else f"item{i}"].append(i)
    members = [np.asarray(m) for m in by_cluster.values()]
    singletons = all(len(m) == 1 for m in members)
    counts = np.array([len(g) for g in groups])
    padded = np.zeros((len(groups), counts.max()))
    for i, g in enumerate(groups):
        padded[i, :len(g)] = g
    rng = np.random.default_rng(seed)
    stats = np.empty(resamples)
    for b in range(resamples):
        if singletons:  # independent items: resample items
            idx = rng.integers(0, len(groups), len(groups))
        else:  # clusters, then items within each drawn cluster
            drawn = [members[c] for c in rng.integers(0, len(members), len(members))]
            idx = np.concatenate([m[rng.integers(0, len(m), len(m))] for m in drawn])
        k = counts[idx]
        picks = (rng.random((len(idx), padded.shape[1])) * k[:, None]).astype(int)  # epochs within each item
        used = np.arange(padded.shape[1])[None, :] < k[:, None]
        means = (padded[idx[:, None], picks] * used).sum(axis=1) / k
        stats[b] = means.mean()
    lo, hi = np.percentile(stats, [2.5, 97.5])
    return _r(float(lo)), _r(float(hi))


def epoch_summary(rows: Sequence[Mapping[str, Any]], metric: str, *, seed: int, resamples: int) -> dict:
    """``entry["epochs"]``: K, the metric's mean over all epochs with its nested ci95, and the variance split."""
    groups = group_epochs(rows)
    values = [[_value(r.get(metric)) for r in group] for group in groups.values()]
    clusters = [group[0].get("cluster") for group in groups.values()]
    flat = [v for vs in values for v in vs if v is not None]
    ks = [len(group) for group in groups.values()]
    return {
        "k": max(ks) if ks else 0,
        "metric": metric,
        "mean": _r(float(np.mean(flat))) if flat else None,
        "ci95": list(epoch_interval(values, clusters if any(c is not None for c in clusters) else None,
                                    seed=seed, resamples=resamples)),
        "variance": variance_split(values),
    }


def epoch_lines(payload: Mapping[str, Any]) -> list[str]:
    """One line per (benchmark, combination) with repeated samples: the mean over epochs, its nested ci95, and
    the share of the score's variance within items against between items."""
    lines = []
    for bench, entries in (payload.get("benchmarks") or {}).items():
        for model, entry in entries.items():
            info = entry.get("epochs") if isinstance(entry, Mapping) else None
            if not info:
                continue
            lo, hi = info.get("ci95") or (None, None)
            ci = "" if lo is None else f" ({lo:.3f}-{hi:.3f})"
            mean = "-" if info.get("mean") is None else f"{info['mean']:.3f}"
            share = (info.get("variance") or {}).get("within_share")
            split = "variance split: -" if share is None else (
                f"variance {share:.0%} within items, {1 - share:.0%} between items: more "
                f"{'epochs' if share > 0.5 else 'items'} would narrow the interval most")
            lines.append(f"{bench} {model}: {info['k']} epochs per item, {info['metric']} mean {mean}{ci}; {split}")
    return lines


def _value(value: Any) -> float | None:
    return float(value) if _is_number(value) else None


def _r(value: float) -> float:
    return round(value, 6)


__all__ = ["collapse", "collapse_epochs", "epoch_interval", "epoch_lines", "epoch_summary", "group_epochs", "has_epochs",
           "variance_split"]
