"""A metric's entry in a report: its shape (:class:`MetricValue`), how it is built, and how its numbers are kept."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

FEW_CLUSTERS = 10  # under this many clusters an interval is wide and approximate (said in every table)


class MetricValue(TypedDict):
    """One metric's entry in a report, as :func:`metric` builds it.

    Attributes:
        value: the metric on the items where it is defined (None: defined on none).
        ci95: ``[lo, hi]``, the 95% interval on new clusters (new studies, paragraphs, hazards); None bounds:
            no interval.
        ci95_within: ``[lo, hi]``, the 95% interval on more items from these clusters (``ci95`` without clusters).
        n: the items where the metric is defined.
        n_clusters: the clusters of those items (``n`` when items are independent).
    """

    value: float | None
    ci95: list[float | None]
    ci95_within: list[float | None]
    n: int
    n_clusters: int


class PairedValue(MetricValue):
    """A paired difference's entry (:func:`fieldeval.stats.paired_difference`): a :class:`MetricValue` and its p.

    Attributes:
        p_value: the two-sided p of "no difference" for the question ``ci95`` answers (None: no interval).
    """

    p_value: float | None


def metric(value: float | None, ci95: Sequence[float | None], n: int, n_clusters: int | None = None,
           ci95_within: Sequence[float | None] | None = None) -> MetricValue:
    """The report's metric shape: ``{"value", "ci95": [lo, hi], "ci95_within": [lo, hi], "n", "n_clusters"}``.

    ``ci95`` answers "on new clusters" (new studies, paragraphs, hazards); ``ci95_within`` answers "on more
    items from these clusters"; without clusters the two are one interval.
    """
    return {"value": value, "ci95": list(ci95), "ci95_within": list(ci95 if ci95_within is None else ci95_within),
            "n": n, "n_clusters": n if n_clusters is None else n_clusters}


def few_clusters(entry: dict | None) -> bool:
    """Whether a metric entry rests on fewer than :data:`FEW_CLUSTERS` clusters (its interval is approximate)."""
    if not entry or entry.get("value") is None:
        return False
    clusters = entry.get("n_clusters")
    return clusters is not None and clusters < FEW_CLUSTERS and clusters < (entry.get("n") or 0)


def _round(value: float) -> float:
    """A metric's number as the reports keep it (6 decimals)."""
    return round(float(value), 6)


def _round_p(p: float | None) -> float | None:
    """A p-value as the reports keep it (6 significant figures: small p-values stay readable)."""
    return None if p is None else float(f"{p:.6g}")


__all__ = ["FEW_CLUSTERS", "MetricValue", "PairedValue", "few_clusters", "metric"]
