"""Recorded rows (dicts, one per item): read a field at a time, ordered, and keyed by the case they scored."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from operator import itemgetter
from typing import Any


def column(rows: Sequence[Mapping[str, Any]], key: str) -> list[Any]:
    """Each row's value of ``key``, None where a row has none: one loop in C when every row has it.

    Example:
        >>> column([{"a": 1}, {"a": None}, {"b": 2}], "a")
        [1, None, None]
    """
    try:
        return list(map(itemgetter(key), rows))
    except KeyError:
        return [row.get(key) for row in rows]


def by_nodeid(rows: Iterable[Mapping[str, Any]]) -> list[dict]:
    """Rows in the one stable order every aggregation uses: by pytest node id."""
    return sorted(rows, key=lambda r: r["nodeid"])


def flag(value: Any) -> bool | None:
    """A stored yes/no (bool, 0/1, or an epochs mean: the majority) as a bool; None when absent.

    Example:
        >>> flag(True), flag(0), flag(2 / 3), flag(None)
        (True, False, True, None)
    """
    if value is None:
        return None
    return float(value) >= 0.5


CLUSTER_KEYS = ("cluster", "cluster_stratum")


def without_clusters(rows: Iterable[Mapping[str, Any]]) -> list[dict]:
    """Rows with the engine's cluster keys removed: item-level intervals (``--cluster-by none``)."""
    return [{k: v for k, v in row.items() if k not in CLUSTER_KEYS} for row in rows]


def case_key(row: Mapping[str, Any]) -> str:
    """The case a row scored, the same across runs and models: its recorded ``case_key`` (the case's pytest
    id), else the node id's parameters without the model.

    Example:
        >>> case_key({"nodeid": "evals/test_ebs.py::test_ebs[forest_biome-case017-ebs-baseline]", "model": "ebs-baseline"})
        'forest_biome-case017'
    """
    if row.get("case_key"):
        return str(row["case_key"])
    nodeid = str(row.get("nodeid") or "")
    params = nodeid.split("[", 1)[1].removesuffix("]") if "[" in nodeid else nodeid
    model = str(row.get("model") or "")
    return params.removesuffix(f"-{model}") if model and params != model else params


__all__ = ["CLUSTER_KEYS", "by_nodeid", "case_key", "column", "flag", "without_clusters"]
