"""Time, tokens and cost summed over a model's items."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fieldeval.rows import column


def model_totals(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The report's ``totals`` of one model; cached items keep their original figures; None when unknown."""

    def total(key: str) -> float | None:
        values = [value for value in column(rows, key) if value is not None]
        return round(sum(values), 6) if values else None

    return {"response_time_s": total("response_time_s"), "prompt_tokens": total("prompt_tokens"),
            "completion_tokens": total("completion_tokens"), "est_cost_usd": total("est_cost_usd"),
            "cached_items": sum(map(bool, column(rows, "cached")))}
