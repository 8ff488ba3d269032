"""Registered model endpoints as llm models: ``--model NAME`` for Ollama, vLLM or a llama.cpp server.

``fieldeval models add NAME --endpoint URL`` stores an OpenAI-compatible
endpoint in the run store's ``models`` table; :func:`register_endpoints`
(called from fieldeval's ``register_models`` llm hook) turns each row into an
llm OpenAI chat model. An endpoint registered with ``--key-env VAR`` sends the key
in ``$VAR`` at call time (the store keeps only the variable's name); llm's own
``llm keys set VAR`` works too and, as llm's rule goes, takes precedence over
the variable. Without ``--key-env`` the endpoint needs no key. The address rules checked here at
registration are checked again at every connection the call engine opens, so a name that later
resolves elsewhere is refused then. llm runs that hook on every model
lookup, so the read is the store's cheap one (:func:`fieldeval.store.read_endpoints`:
stdlib ``sqlite3`` read-only, re-read only when the file changes, nothing at all
when the store does not exist yet, no SQLAlchemy import for a SQLite store).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any

from fieldeval.store.location import DEFAULT_STORE_PATH, STORE_ENV
from fieldeval.store.registry import Endpoint, read_endpoints

__all__ = ["DEFAULT_STORE_PATH", "STORE_ENV", "Endpoint", "api_base", "check_endpoint", "check_key_binding",
           "endpoint_models", "forbidden_kind", "key_endpoints", "refused_address", "register_endpoint",
           "register_endpoints", "registered_endpoints"]


def api_base(endpoint: str) -> str:
    """The OpenAI client base URL for an endpoint: ``.../v1/chat/completions`` becomes ``.../v1``."""
    base = endpoint.strip().rstrip("/")
    for suffix in ("/chat/completions", "/completions"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    return base


def registered_endpoints(url: str | None = None) -> list[Endpoint]:
    """``(name, endpoint, model_id, key_env, batch)`` of every registered model, oldest first
    (:func:`fieldeval.store.read_endpoints`)."""
    return read_endpoints(url)


def endpoint_models(name: str, endpoint: str, key_env: str | None = None, batch: bool = False) -> tuple[Any, Any]:
    """An llm OpenAI chat model and its async twin for a model served at an OpenAI-compatible endpoint.

    ``key_env`` names the environment variable (or ``llm keys`` alias) holding its API key; None: no key.
    ``batch``: the endpoint offers OpenAI's Batch API (``--batch`` sessions send it batches).
    """
    from llm.default_plugins.openai_models import AsyncChat, Chat

    models = []
    for cls in (Chat, AsyncChat):
        model = cls(model_id=name, model_name=name, api_base=api_base(endpoint), supports_schema=True)
        # no key_env: local servers take no key (llm then sends a dummy one)
        model.needs_key = model.key_env_var = key_env
        model.fieldeval_endpoint = True  # tells a registered endpoint from an installed llm model
        model.fieldeval_batch = bool(batch)
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
    latest = {name: model_id for name, _, model_id, *_ in endpoints}
    for name, endpoint, model_id, key_env, batch in endpoints:
        chat, async_chat = endpoint_models(name, endpoint, key_env, bool(batch))
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
        UsageError: not http(s), no host, credentials in the URL, or a host that is or resolves to a
            link-local (169.254.0.0/16, fe80::/10: cloud metadata services live there), multicast or
            unspecified address in any spelling (:func:`refused_address`); loopback and private are allowed.

    Example:
        >>> check_endpoint(" http://localhost:11434/v1 ")
        'http://localhost:11434/v1'
    """
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
    refused = refused_address(host)
    if refused is not None:
        address, kind = refused
        raise UsageError(f"--endpoint {text!r}: {host} is {address}, a {kind} address, and refused (cloud metadata "
                         "services live at link-local ones); register the model server's routable, private or "
                         "loopback address")
    return text


RESOLVE_TIMEOUT_S = 3.0
_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")  # connecting to 0.x.x.x reaches this host on Linux
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def forbidden_kind(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """``link-local``, ``multicast`` or ``unspecified`` when ``address`` (or the IPv4 address it carries) is one.

    The rule of every registration (:func:`refused_address`) and of every connection the call engine opens
    (:mod:`fieldeval.calls.transport`).
    """
    carried: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = [address]
    if isinstance(address, ipaddress.IPv6Address):
        carried += [a for a in (address.ipv4_mapped, address.sixtofour, *(address.teredo or ())) if a is not None]
        if address in _NAT64:
            carried.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    for each in carried:
        if each.is_link_local:
            return "link-local"
        if each.is_multicast:
            return "multicast"
        if each.is_unspecified or each in _THIS_NETWORK:
            return "unspecified"
    return None


def _resolve(host: str) -> list[str]:
    """The addresses ``getaddrinfo`` gives for ``host`` (numeric forms at once, names within a few seconds)."""
    import concurrent.futures
    import socket

    def lookup(flags: int) -> list[str]:
        try:
            infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=flags)
        except (OSError, UnicodeError, ValueError):
            return []
        return [str(info[4][0]).split("%")[0] for info in infos]

    numeric = lookup(socket.AI_NUMERICHOST)
    if numeric:
        return numeric
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        return pool.submit(lookup, 0).result(timeout=RESOLVE_TIMEOUT_S)
    except concurrent.futures.TimeoutError:
        return []
    finally:
        pool.shutdown(wait=False)


def host_addresses(host: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """Every address ``host`` can mean to a client: as ``ipaddress`` reads it, as the C library's ``inet_aton``
    reads it (``0xA9FEA9FE``, ``2852039166``, ``0251.0376.0251.0376``, ``169.254.43518``), and what
    ``getaddrinfo`` resolves it to, each with and without a trailing dot."""
    import socket

    found: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = []
    bare = host.strip().strip("[]")
    for form in dict.fromkeys((bare, bare.rstrip("."))):
        if not form:
            continue
        try:
            found.append(ipaddress.ip_address(form.split("%")[0]))
        except ValueError:
            pass
        try:
            found.append(ipaddress.IPv4Address(socket.inet_aton(form)))
        except (OSError, ValueError):
            pass
        for text in _resolve(form):
            try:
                found.append(ipaddress.ip_address(text))
            except ValueError:
                pass
    return list(dict.fromkeys(found))


def refused_address(host: str) -> tuple[str, str] | None:
    """``(address, kind)`` for the first link-local, multicast or unspecified address ``host`` can mean, else None.

    Example:
        >>> refused_address("0xA9FEA9FE")
        ('169.254.169.254', 'link-local')
        >>> refused_address("127.0.0.1") is None
        True
    """
    for address in host_addresses(host):
        kind = forbidden_kind(address)
        if kind is not None:
            return str(address), kind
    return None


def check_key_binding(store: Any, key_env: str, endpoint: str, allowed: dict[str, str | None]) -> None:
    """Refuse a key an HTTP registration names unless the server's operator allowed it for this endpoint.

    ``key_env`` is looked up the way llm looks up a key (an ``llm keys`` alias of that name, else the
    environment variable), so the rule covers both. A key is allowed when the operator listed it
    (``fieldeval serve --allow-key-env VAR`` or ``[tool.fieldeval.serve] key_envs``) and, when bound
    (``VAR=URL``), only at that URL; a key listed unbound only at an endpoint the operator already
    registered it with (``fieldeval models add NAME --endpoint URL --key-env VAR``). The message is
    the same whether or not the variable exists, so nobody learns what the server's environment holds.

    Raises:
        UsageError: the key is not allowed for ``endpoint``.
    """
    from fieldeval.errors import UsageError

    fix = (f"the server's operator allows it with `fieldeval serve --allow-key-env {key_env}={api_base(endpoint)}` "
           "or registers the model from the command line; or leave key_env out")
    if key_env not in allowed:
        raise UsageError(f"{key_env!r} is not a key this server lets HTTP registrations use; {fix}")
    bound = allowed[key_env]
    if bound is not None:
        if api_base(bound) != api_base(endpoint):
            raise UsageError(f"{key_env!r} is bound to another endpoint; {fix}")
        return
    if api_base(endpoint) not in key_endpoints(store, key_env):
        raise UsageError(f"{key_env!r} is not configured for this endpoint; {fix}")


def key_endpoints(store: Any, key_env: str, *, except_name: str | None = None) -> set[str]:
    """The endpoints (client base URLs) registered with ``key_env``, leaving out the records of ``except_name``."""
    return {api_base(record.endpoint) for record in store.list_models()
            if record.key_env == key_env and record.name != except_name}


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
        fields: ``provider``, ``context_window``, ``parameters_billion``, ``notes``, ``batch``.

    Returns:
        The record and whether it is new (or replaced).

    Raises:
        UsageError: a bad endpoint or variable name, a name an installed llm model has, or a
            ``key_env`` another endpoint already uses.
        fieldeval.store.ModelConflict: the name is registered at another endpoint and ``replace`` is False.

    Example:
        >>> register_endpoint(store, "phi-3-mini-4k", "http://localhost:11434/v1")  # doctest: +SKIP
        (ModelRecord(model_id='mdl_7f2a91c4', ...), True)
    """
    from fieldeval.errors import UsageError

    endpoint = check_endpoint(endpoint)
    name = (name or "").strip()
    if key_env is not None:  # one key, one endpoint: a key never travels to a server it was not set up for
        elsewhere = key_endpoints(store, key_env, except_name=name) - {api_base(endpoint)}
        if elsewhere:
            raise UsageError(f"--key-env {key_env}: already sends its key to {sorted(elsewhere)[0]}; a key goes "
                             "only to the endpoint it was configured with, so give this endpoint a variable of its own")
    if name and not store.models_named(name):
        taken = installed_model(name)
        if taken is not None:
            raise UsageError(f"models add {name!r}: an installed llm model already answers to that name "
                             f"({taken}); register the endpoint under another name")
    return store.register_model(name, endpoint, key_env=key_env, replace=replace, **fields)
