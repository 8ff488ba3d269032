"""The records of a model call: the resolved :class:`Request` the cache keys on, and the :class:`Completion`
it produced, with the cost columns an item records."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fieldeval.calls.cache import cache_key


@dataclass(frozen=True)
class Completion:
    """One model response with what it cost.

    Attributes:
        model: the llm model id that answered.
        text: the response text.
        response_time_s: wall-clock seconds of the call (of the original call when cached).
        prompt_tokens: input tokens reported by the provider (None when unknown).
        completion_tokens: output tokens reported by the provider (None when unknown).
        cached: True when the response came from the response cache.
        est_cost_usd: cost from the price table (None when the model is not priced or tokens are unknown).
        system: the system prompt exactly as sent (None: none).
        prompt: the user prompt exactly as sent (None when not known, e.g. a completion made by hand).
        options: the options the model was sent (``temperature``, ``max_tokens``, ``seed``: only those it takes).
    """

    model: str
    text: str
    response_time_s: float
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached: bool = False
    est_cost_usd: float | None = None
    system: str | None = None
    prompt: str | None = None
    options: dict[str, Any] | None = None


def completion_fields(*completions: Completion) -> dict[str, Any]:
    """The cost columns of an item, summed over the model calls it made (e.g. summary then answer), and what
    was sent: ``system`` and ``prompt`` of the last call (the answer), ``earlier_calls`` for the calls before it.

    A cached completion keeps the timing and tokens of its original call; the
    item counts as cached only when every call came from the cache.
    """

    def total(values: list) -> Any:
        return None if any(v is None for v in values) else sum(values)

    cost = total([c.est_cost_usd for c in completions])
    return {
        "response_time_s": round(sum(c.response_time_s for c in completions), 6),
        "prompt_tokens": total([c.prompt_tokens for c in completions]),
        "completion_tokens": total([c.completion_tokens for c in completions]),
        "est_cost_usd": None if cost is None else round(cost, 8),
        "cached": all(c.cached for c in completions),
        **_sent(completions),
    }


def _sent(completions: tuple[Completion, ...]) -> dict[str, Any]:
    """What the item's calls sent: the answer's ``system``, ``prompt`` and ``options`` (when known);
    ``earlier_calls`` when there were more."""
    if not completions:
        return {}
    *earlier, last = completions
    out: dict[str, Any] = {"system": last.system, "prompt": last.prompt}
    if last.options is not None:
        out["options"] = dict(last.options)
    if earlier:
        out["earlier_calls"] = [{"system": c.system, "prompt": c.prompt, "response_text": c.text} for c in earlier]
    return out



@dataclass(frozen=True)
class Request:
    """One model call, fully resolved: what the cache keys on."""

    model_id: str
    resolved_id: str
    prompt: str
    system: str | None
    options: dict[str, Any]
    schema: dict | None
    epoch: int | None = None  # the repeat of an item (``--epochs``); 2 and up are keyed apart
    serial: bool = False  # the model runs inside this process: one call at a time (calls.models.serial_by_default)
    endpoint: str | None = None  # an OpenAI-compatible model's base URL and model name (its adaptive limit's key)

    @property
    def key(self) -> str:
        """The sha256 of model, options, system prompt, prompt and schema, and an HTTP model's endpoint (and the
        epoch, from the second on: the first epoch is the plain call, so a single-answer run's cache serves it)."""
        if self.epoch is not None and self.epoch > 1:
            return cache_key(self.resolved_id, {**self.options, "epoch": self.epoch}, self.system, self.prompt,
                             self.schema, self.endpoint)
        return cache_key(self.resolved_id, self.options, self.system, self.prompt, self.schema, self.endpoint)


__all__ = ["Completion", "Request", "completion_fields"]
