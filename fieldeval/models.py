"""Every model call goes through :func:`complete`.

Caching, concurrency limits, retries and cost tracking attach here, in one
place, for every benchmark and for LLM judges alike.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from fieldeval.errors import UsageError

RETRY_BACKOFF_S = 2.0


@dataclass
class CallSettings:
    """Process-wide settings of :func:`complete`, set once by the pytest plugin or the CLI."""

    retries: int = 2


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


def completion_fields(completion: Completion) -> dict[str, Any]:
    """The cost columns of a completion, as recorded with every eval row."""
    return {
        "response_time_s": completion.response_time_s,
        "prompt_tokens": completion.prompt_tokens,
        "completion_tokens": completion.completion_tokens,
        "est_cost_usd": None,
        "cached": completion.cached,
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
        return Completion(
            model=model_id,
            text=text,
            response_time_s=round(time.perf_counter() - start, 6),
            prompt_tokens=usage.input,
            completion_tokens=usage.output,
        )
    raise ModelCallError(f"{model_id}: no response after {retries + 1} attempt(s): {type(last).__name__}: {last}")
