"""Every model call goes through :func:`complete`.

Caching, concurrency limits, retries and cost tracking attach here, in one
place, for every benchmark and for LLM judges alike.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from fieldeval.cache import CachedResponse, CacheMode, ResponseCache, cache_key
from fieldeval.errors import UsageError

RETRY_BACKOFF_S = 2.0


@dataclass
class CallSettings:
    """Process-wide settings of :func:`complete`, set once by the pytest plugin or the CLI.

    Attributes:
        retries: retries of a failed call, with backoff.
        cache_mode: use (read and write), refresh (write only), off, or replay (read only; a miss fails).
        cache: the response cache, or None for no caching.
        prices: model id -> {"input_per_mtok": USD, "output_per_mtok": USD}.
    """

    retries: int = 2
    cache_mode: CacheMode = "off"
    cache: ResponseCache | None = None
    prices: dict[str, dict[str, float]] = field(default_factory=dict)


SETTINGS = CallSettings()


class ModelCallError(RuntimeError):
    """A model call that produced no response (provider error, timeout, missing key)."""


@dataclass(frozen=True)
class Completion:
    """One model response with what it cost.

    Attributes:
        model: the llm model id that answered.
        text: the response text.
        response_time_s: wall-clock seconds of the call.
        prompt_tokens: input tokens reported by the provider (None when unknown).
        completion_tokens: output tokens reported by the provider (None when unknown).
        cached: True when the response came from the response cache.
    """

    model: str
    text: str
    response_time_s: float
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached: bool = False


def estimate_cost(model_id: str, prompt_tokens: int | None, completion_tokens: int | None) -> float | None:
    """USD cost from the price table; None when the model is not priced or tokens are unknown."""
    price = SETTINGS.prices.get(model_id)
    if price is None or prompt_tokens is None or completion_tokens is None:
        return None
    return round((prompt_tokens * price.get("input_per_mtok", 0.0)
                  + completion_tokens * price.get("output_per_mtok", 0.0)) / 1e6, 8)


def completion_fields(*completions: Completion) -> dict[str, Any]:
    """The cost columns of an item, summed over the model calls it made (e.g. summary then answer).

    A cached completion keeps the timing and tokens of its original call; the
    item counts as cached only when every call came from the cache.
    """

    def total(values: list) -> Any:
        return None if any(v is None for v in values) else sum(values)

    costs = [estimate_cost(c.model, c.prompt_tokens, c.completion_tokens) for c in completions]
    return {
        "response_time_s": round(sum(c.response_time_s for c in completions), 6),
        "prompt_tokens": total([c.prompt_tokens for c in completions]),
        "completion_tokens": total([c.completion_tokens for c in completions]),
        "est_cost_usd": None if any(c is None for c in costs) else round(sum(costs), 8),
        "cached": all(c.cached for c in completions),
    }


def resolve_model(model_id: str):
    """The llm model for an id or alias; a clear usage error when there is none."""
    import llm

    try:
        return llm.get_model(model_id)
    except llm.UnknownModelError:
        raise UsageError(
            f"--model {model_id!r} is not a known llm model; run `llm models` to list them "
            "or install the llm plugin that provides it"
        ) from None


def model_options(model, **wanted: Any) -> dict[str, Any]:
    """The subset of ``wanted`` options this model accepts, dropping None values."""
    fields = getattr(model.Options, "model_fields", {})
    return {name: value for name, value in wanted.items() if value is not None and name in fields}


def complete(
    model_id: str,
    prompt: str,
    *,
    system: str | None = None,
    temperature: float | None = 0.0,
    max_tokens: int | None = None,
    schema: dict | None = None,
) -> Completion:
    """Ask a model through llm and return its response with timing and token counts.

    Args:
        model_id: an llm model id or alias, e.g. ``gpt-4o-mini`` or ``ebs-baseline``.
        prompt: the rendered user prompt.
        system: the system prompt.
        temperature: sampling temperature, passed when the model supports it.
        max_tokens: generation budget, passed when the model supports it.
        schema: a JSON schema for structured output, used when the model supports schemas.

    Returns:
        The response text and its cost figures.

    Raises:
        UsageError: the model id is unknown.
        ModelCallError: no response could be had after retries.

    Example:
        >>> complete("ebs-baseline", prompt, system=system).text  # doctest: +SKIP
        'forest biome [ENVO:01000174]'
    """
    model = resolve_model(model_id)
    options = model_options(model, temperature=temperature, max_tokens=max_tokens)
    use_schema = schema if schema is not None and getattr(model, "supports_schema", False) else None
    cache = SETTINGS.cache if SETTINGS.cache_mode != "off" else None
    key = cache_key(model.model_id, options, system, prompt, use_schema) if cache is not None else ""
    if cache is not None and SETTINGS.cache_mode in ("use", "replay"):
        hit = cache.get(key)
        if hit is not None:
            return Completion(model_id, hit.text, hit.response_time_s or 0.0, hit.prompt_tokens,
                              hit.completion_tokens, cached=True)
        if SETTINGS.cache_mode == "replay":
            raise ModelCallError(f"{model_id}: no cached response for this prompt (--cache replay); "
                                 "record it first with --cache use")
    last: Exception | None = None
    retries = SETTINGS.retries
    for attempt in range(retries + 1):
        start = time.perf_counter()
        try:
            response = model.prompt(prompt, system=system, schema=use_schema, options=options)
            text = response.text()
            usage = response.usage()
        except Exception as error:  # providers raise many types; retry, then report one
            last = error
            if attempt < retries:
                time.sleep(RETRY_BACKOFF_S * (attempt + 1))
            continue
        completion = Completion(
            model=model_id,
            text=text,
            response_time_s=round(time.perf_counter() - start, 6),
            prompt_tokens=usage.input,
            completion_tokens=usage.output,
        )
        if cache is not None:
            cache.put(key, model.model_id, CachedResponse(text, completion.response_time_s,
                                                          usage.input, usage.output))
        return completion
    raise ModelCallError(f"{model_id}: no response after {retries + 1} attempt(s): {type(last).__name__}: {last}")
