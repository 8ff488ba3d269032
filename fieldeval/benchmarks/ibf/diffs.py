"""How two runs' IBF items compare: the mean of the five rubric dimensions, the pass, each dimension's levels."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from fieldeval.benchmark import Pairs
from scorers.ibf import DIMENSIONS, PASS_THRESHOLD


def score(row: Mapping[str, Any]) -> float | None:
    """The mean of the dimensions the item was scored on (None: none)."""
    values = [float(row[d]) for d in DIMENSIONS if row.get(d) is not None]
    return sum(values) / len(values) if values else None


def passed(row: Mapping[str, Any]) -> bool | None:
    """Whether every dimension reached the pass threshold; None when one is unscored."""
    if any(row.get(d) is None for d in DIMENSIONS):
        return None
    return all(float(row[d]) >= PASS_THRESHOLD for d in DIMENSIONS)


def _level(value: Any) -> int | str:
    return "unscored" if value is None else round(float(value))


def transitions(pairs: Pairs) -> list[dict[str, Any]]:
    """``{"dimension", "from", "to", "count"}``: per dimension, the levels (0-4, or unscored) items moved between."""
    out = []
    for dim in DIMENSIONS:
        counts = Counter((_level(a.get(dim)), _level(b.get(dim))) for a, b in pairs)
        out += [{"dimension": dim, "from": f, "to": t, "count": n}
                for (f, t), n in sorted(counts.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1])))]
    return out
