"""What the benchmarks' audits share: the groups of items (hazards, classes) too small to read alone."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ThinGroups:
    """The groups of a benchmark's items that hold fewer items than its minimum.

    Attributes:
        groups: how many groups the items fall in, thin or not.
        counts: each thin group's number of items.
        cases: the case ids of the items in thin groups, in the items' order.
        named: the thin groups as ``group (n), ...``, fewest items first, then by name.
    """

    groups: int
    counts: dict[str, int]
    cases: tuple[str, ...]
    named: str


def thin_groups(items: Sequence[tuple[str, str]], minimum: int) -> ThinGroups | None:
    """The groups of ``(case id, group)`` pairs that hold fewer than ``minimum`` items; None when none does.

    Example:
        >>> thin_groups([("a", "flood"), ("b", "flood"), ("c", "dzud")], 2).named
        'dzud (1)'
    """
    per_group = Counter(group for _, group in items)
    counts = {group: n for group, n in per_group.items() if n < minimum}
    if not counts:
        return None
    cases = tuple(case_id for case_id, group in items if group in counts)
    named = ", ".join(f"{group} ({n})" for group, n in sorted(counts.items(), key=lambda g: (g[1], g[0])))
    return ThinGroups(len(per_group), counts, cases, named)
