"""How two runs' ebs items compare: the ontology score, exact match, and the hierarchy relation each moved between
(with siblings told apart where both runs recorded ``relationship_detail``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from fieldeval.benchmark import Pairs
from fieldeval.rows import flag

CLASSES = ("exact", "descendant", "ancestor", "sibling", "unrelated", "parse failure")


def relationship(row: Mapping[str, Any], detailed: bool = False) -> str:
    """``exact`` / ``descendant`` / ``ancestor`` / ``unrelated`` (``detailed``: with ``sibling`` apart, where the
    row records it), or ``parse failure`` when nothing parsed."""
    if row.get("parse_success") in (False, 0) or not row.get("relationship"):
        return "parse failure"
    if detailed and row.get("relationship_detail"):
        return str(row["relationship_detail"])
    return str(row["relationship"])


def score(row: Mapping[str, Any]) -> float | None:
    """The item's ontology score."""
    value = row.get("ontology_score")
    return None if value is None else float(value)


def exact(row: Mapping[str, Any]) -> bool | None:
    """Whether the item matched its ideal exactly."""
    return flag(row.get("exact_match"))


def transitions(pairs: Pairs) -> list[dict[str, Any]]:
    """``{"from", "to", "count"}`` of the relations the items moved between, in :data:`CLASSES` order."""
    pairs = list(pairs)
    # a run stored before relationship_detail: siblings only where both runs tell them apart, or a sibling
    # would show as an unrelated answer that moved
    detailed = all(row.get("relationship_detail") or not row.get("relationship") for pair in pairs for row in pair)
    counts = Counter((relationship(a, detailed), relationship(b, detailed)) for a, b in pairs)
    order = {name: i for i, name in enumerate(CLASSES)}
    return [{"from": f, "to": t, "count": n}
            for (f, t), n in sorted(counts.items(), key=lambda kv: (order.get(kv[0][0], 9), order.get(kv[0][1], 9),
                                                                   kv[0]))]
