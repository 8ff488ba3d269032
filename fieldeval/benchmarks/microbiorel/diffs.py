"""How two runs' MicrobioRel items compare: right or wrong, per gold relation class."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from fieldeval.benchmark import Pairs
from fieldeval.rows import flag


def correct(row: Mapping[str, Any]) -> bool | None:
    """Whether the item's relation was right."""
    return flag(row.get("correct"))


def score(row: Mapping[str, Any]) -> float | None:
    """1.0 right, 0.0 wrong, None unscored."""
    right = correct(row)
    return None if right is None else float(right)


def _outcome(row: Mapping[str, Any]) -> str:
    right = correct(row)
    return "unscored" if right is None else "correct" if right else "wrong"


def transitions(pairs: Pairs) -> list[dict[str, Any]]:
    """``{"class", "from", "to", "count"}``: per gold class, the items that went correct, wrong or unscored."""
    counts = Counter((str(a.get("gold")), _outcome(a), _outcome(b)) for a, b in pairs)
    return [{"class": gold, "from": f, "to": t, "count": n} for (gold, f, t), n in sorted(counts.items())]
