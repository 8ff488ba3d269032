"""The plain words that name the question each of a metric's two intervals answers.

``ci95`` answers "how would the model do on new clusters" (new studies, paragraphs, hazards);
``ci95_within`` answers "how would it do on more items from these clusters". Every table that
prints an interval names its question with these words, so nobody reads one for the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fieldeval.stats import FEW_CLUSTERS


def clustered(entry: Mapping[str, Any] | None) -> bool:
    """Whether an entry's items came in clusters (so its two intervals answer different questions)."""
    if not entry or entry.get("value") is None:
        return False
    clusters, n = entry.get("n_clusters"), entry.get("n", entry.get("n_items"))
    return clusters is not None and n is not None and clusters < n


def interval_names(entry: Mapping[str, Any] | None, called: str = "clusters") -> tuple[str, str]:
    """``("on new studies (6 studies: approximate)", "on more samples from these 6 studies")`` for an entry
    whose items came from 6 studies; ``("on new items", "on new items")`` for independent items.

    Example:
        >>> interval_names({"value": 0.8, "n": 100, "n_clusters": 6}, "studies")
        ('on new studies (6 studies: approximate)', 'on more samples from these 6 studies')
    """
    if not clustered(entry):
        return "on new items", "on new items"
    count = entry["n_clusters"]
    few = ": approximate" if count < FEW_CLUSTERS else ""
    return f"on new {called} ({count} {called}{few})", f"on more samples from these {count} {called}"


def span(bounds: Any, digits: int = 3, sign: bool = False) -> str:
    """``0.242-1.000`` (``-0.100 to +0.020`` with ``sign``) for an interval, ``-`` when it has no bounds."""
    if not bounds or bounds[0] is None or bounds[1] is None:
        return "-"
    lo, hi = bounds
    return f"{lo:+.{digits}f} to {hi:+.{digits}f}" if sign else f"{lo:.{digits}f}-{hi:.{digits}f}"


def both_intervals(entry: Mapping[str, Any] | None, called: str = "clusters", digits: int = 3,
                   sign: bool = False) -> str:
    """``on new studies (6 studies: approximate): 0.242-1.000; on more samples from these 6 studies:
    0.805-0.898``; one interval for independent items or an entry stored before ``ci95_within``."""
    if not entry or entry.get("value") is None:
        return "-"
    new, within = interval_names(entry, called)
    first = f"{new}: {span(entry.get('ci95'), digits, sign)}"
    if not clustered(entry) or "ci95_within" not in entry:
        return first
    return f"{first}; {within}: {span(entry['ci95_within'], digits, sign)}"


__all__ = ["both_intervals", "clustered", "interval_names", "span"]
