"""Time, tokens and cost summed over a model's items, and the one rule every view of a total rounds by."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fieldeval.rows import column

#: decimal places of a shown total's seconds and dollars: the report, ``runs show`` and the API show the same number
SHOWN_PLACES = 6
ROUNDED = ("response_time_s", "est_cost_usd")


def summed(values: Iterable[float | int | None]) -> float | None:
    """The exact sum (:func:`math.fsum`) of the known values, in full precision; None when none is known."""
    known = [value for value in values if value is not None]
    return math.fsum(known) if known else None


def shown(total: Mapping[str, Any]) -> dict[str, Any]:
    """A total as every view shows it: seconds and dollars rounded to :data:`SHOWN_PLACES`, counts as they are.

    Example:
        >>> shown({"est_cost_usd": 0.000123456789, "prompt_tokens": 300})
        {'est_cost_usd': 0.000123, 'prompt_tokens': 300}
    """
    return {key: round(value, SHOWN_PLACES) if key in ROUNDED and isinstance(value, float) else value
            for key, value in total.items()}


def model_totals(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The report's ``totals`` of one model (shown as :func:`shown` rounds); cached items keep their original
    figures; None when unknown."""

    def total(key: str) -> float | int | None:
        values = [value for value in column(rows, key) if value is not None]
        return None if not values else summed(values) if key in ROUNDED else sum(values)

    return shown({"response_time_s": total("response_time_s"), "prompt_tokens": total("prompt_tokens"),
                  "completion_tokens": total("completion_tokens"), "est_cost_usd": total("est_cost_usd"),
                  "cached_items": sum(map(bool, column(rows, "cached")))})
