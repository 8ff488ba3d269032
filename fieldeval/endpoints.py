"""Registered model endpoints as llm models: ``--model NAME`` for Ollama, vLLM or a llama.cpp server.

``fieldeval models add NAME --endpoint URL`` stores an OpenAI-compatible
endpoint in the run store's ``models`` table; :func:`register_endpoints`
(called from fieldeval's ``register_models`` llm hook) turns each row into an
llm OpenAI chat model. An endpoint registered with ``--key-env VAR`` sends the key
in ``$VAR`` at call time (the store keeps only the variable's name); llm's own
``llm keys set VAR`` works too and, as llm's rule goes, takes precedence over
the variable. Without ``--key-env`` the endpoint needs no key. llm runs that hook on every model
lookup, so the read is the store's cheap one (:func:`fieldeval.store.read_endpoints`:
stdlib ``sqlite3`` read-only, re-read only when the file changes, nothing at all
when the store does not exist yet, no SQLAlchemy import for a SQLite store).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fieldeval.store.location import DEFAULT_STORE_PATH, STORE_ENV
from fieldeval.store.registry import Endpoint, read_endpoints

__all__ = ["DEFAULT_STORE_PATH", "STORE_ENV", "Endpoint", "api_base", "endpoint_models", "register_endpoint",
           "register_endpoints", "registered_endpoints"]


def api_base(endpoint: str) -> str:
    """The OpenAI client base URL for an endpoint: ``.../v1/chat/completions`` becomes ``.../v1``."""
    base = endpoint.strip().rstrip("/")
    for suffix in ("/chat/completions", "/completions"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    return base


def registered_endpoints(url: str | None = None) -> list[Endpoint]:
    """``(name, endpoint, model_id, key_env)`` of every registered model, oldest first (:func:`fieldeval.store.read_endpoints`)."""
    return read_endpoints(url)


def endpoint_models(name: str, endpoint: str, key_env: str | None = None) -> tuple[Any, Any]:
    """An llm OpenAI chat model and its async twin for a model served at an OpenAI-compatible endpoint.

    ``key_env`` names the environment variable (or ``llm keys`` alias) holding its API key; None: no key.
    """
    from llm.default_plugins.openai_models import AsyncChat, Chat

    models = []
    for cls in (Chat, AsyncChat):
        model = cls(model_id=name, model_name=name, api_base=api_base(endpoint), supports_schema=True)
        # no key_env: local servers take no key (llm then sends a dummy one)
        model.needs_key = model.key_env_var = key_env
        model.fieldeval_endpoint = True  # tells a registered endpoint from an installed llm model
        models.append(model)
    return models[0], models[1]


def register_endpoints(register: Callable[..., None], url: str | None = None) -> None:
    """Register every model of the store's ``models`` table with llm.

    A name registered at several endpoints resolves to the latest registration;
    each endpoint is also reachable by its ``model_id`` (``--model mdl_7f2a91c4``).

    Args:
        register: the ``register(model, async_model=None, aliases=...)`` callable of llm's
            ``register_models`` hook.
        url: a store URL or path; None means the default store.

    Example:
        >>> @llm.hookimpl  # doctest: +SKIP
        ... def register_models(register):
        ...     register_endpoints(register)
    """
    endpoints = registered_endpoints(url)
    latest = {name: model_id for name, _, model_id, _ in endpoints}
    for name, endpoint, model_id, key_env in endpoints:
        chat, async_chat = endpoint_models(name, endpoint, key_env)
        if latest[name] == model_id:
            register(chat, async_chat, aliases=(model_id,))
        else:  # an older endpoint of the same name: only its model_id reaches it
            chat.model_id = async_chat.model_id = model_id
            register(chat, async_chat)


def check_endpoint(url: str) -> str:
    """The endpoint URL, stripped, after the checks every registration passes (CLI and HTTP alike).

    Args:
        url: an OpenAI-compatible base URL, e.g. ``http://localhost:11434/v1``.

    Returns:
        The URL without surrounding whitespace.

    Raises:
        UsageError: not http(s), no host, credentials in the URL, or a link-local host
            (169.254.0.0/16, fe80::/10: cloud metadata services live there); loopback is allowed.

    Example:
        >>> check_endpoint(" http://localhost:11434/v1 ")
        'http://localhost:11434/v1'
    """
    import ipaddress
    from urllib.parse import urlsplit

    from fieldeval.errors import UsageError

    text = (url or "").strip()
    try:
        parts = urlsplit(text)
        host = parts.hostname
    except ValueError:
        parts, host = None, None
    if parts is None or parts.scheme not in ("http", "https") or not host:
        kind = "not a URL" if "://" not in text else "not an http(s) URL"
        raise UsageError(f"--endpoint {text!r}: {kind}; pass the server's base URL, e.g. http://localhost:11434/v1")
    if parts.username is not None or parts.password is not None:
        raise UsageError("--endpoint: credentials in the URL are refused (they would be stored in clear); "
                         "put the key in an environment variable or `llm keys set` and register the URL without them")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:169.254.169.254 reaches the same host
    if address is not None and (address.is_link_local or (mapped is not None and mapped.is_link_local)):
        raise UsageError(f"--endpoint {text!r}: {host} is link-local (169.254.0.0/16, fe80::/10) and refused; "
                         "register the model server's routable or loopback address")
    return text


def installed_model(name: str) -> str | None:
    """The id of the installed llm model (not a registered endpoint) that answers to ``name``, if any."""
    import llm

    try:
        model = llm.get_model(name)
    except llm.UnknownModelError:
        return None
    return None if getattr(model, "fieldeval_endpoint", False) else model.model_id


def register_endpoint(store: Any, name: str, endpoint: str, *, key_env: str | None = None, replace: bool = False,
                      **fields: Any) -> tuple[Any, bool]:
    """Register an endpoint under the rules every registration follows (CLI and HTTP alike).

    Args:
        store: an open :class:`fieldeval.store.Store`.
        name: the model name the endpoint serves; it must not be an installed llm model's name or alias.
        endpoint: the OpenAI-compatible base URL (see :func:`check_endpoint`).
        key_env: the environment variable to read the API key from at call time; only its name is stored.
        replace: point an already registered name at this endpoint instead of refusing.
        fields: ``provider``, ``context_window``, ``parameters_billion``, ``notes``.

    Returns:
        The record and whether it is new (or replaced).

    Raises:
        UsageError: a bad endpoint or variable name, or a name an installed llm model has.
        fieldeval.store.ModelConflict: the name is registered at another endpoint and ``replace`` is False.

    Example:
        >>> register_endpoint(store, "phi-3-mini-4k", "http://localhost:11434/v1")  # doctest: +SKIP
        (ModelRecord(model_id='mdl_7f2a91c4', ...), True)
    """
    from fieldeval.errors import UsageError

    endpoint = check_endpoint(endpoint)
    name = (name or "").strip()
    if name and not store.models_named(name):
        taken = installed_model(name)
        if taken is not None:
            raise UsageError(f"models add {name!r}: an installed llm model already answers to that name "
                             f"({taken}); register the endpoint under another name")
    return store.register_model(name, endpoint, key_env=key_env, replace=replace, **fields)
