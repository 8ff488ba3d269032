"""An eval item's ``fieldeval`` marker, looked up once the collection is final: an item is asked for it a dozen
times while it runs (its fixtures, its solver, its row), and ``get_closest_marker`` walks the item's parents each
time."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from fieldeval.defaults import MARKER

_MARKER = pytest.StashKey[Any]()
_UNSET = object()


def eval_marker(item: pytest.Item) -> pytest.Mark | None:
    """An item's ``fieldeval`` marker (None for any other item): from the item's stash once
    :func:`settle_markers` ran, else looked up."""
    found = item.stash.get(_MARKER, _UNSET)
    return item.get_closest_marker(MARKER) if found is _UNSET else found


def settle_markers(items: Iterable[pytest.Item]) -> None:
    """Keep each item's ``fieldeval`` marker in its stash, once the collection is final (every hook that
    changes the items has run)."""
    for item in items:
        item.stash[_MARKER] = item.get_closest_marker(MARKER)


__all__ = ["eval_marker", "settle_markers"]
