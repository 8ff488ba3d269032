"""Registered model endpoints as llm models: ``--model NAME`` for Ollama, vLLM or a llama.cpp server.

``fieldeval models add NAME --endpoint URL`` stores an OpenAI-compatible
endpoint in the run store's ``models`` table; :func:`register_endpoints`
(called from fieldeval's ``register_models`` llm hook) turns each row into an
llm OpenAI chat model that needs no API key. llm runs that hook on every model
lookup, so the read is cheap: stdlib ``sqlite3`` read-only, re-read only when
the file changes, and nothing at all when the store does not exist yet.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# the same as fieldeval.store's (a test checks it); not imported from there, as SQLAlchemy takes a second to load
DEFAULT_STORE_PATH = Path(__file__).resolve().parents[1] / "reports" / "fieldeval.db"
STORE_ENV = "FIELDEVAL_STORE"
Endpoint = tuple[str, str, str]  # (name, endpoint, model_id), oldest registration first
SERVER_CACHE_S = 60.0
_QUERY = "SELECT name, endpoint, model_id FROM models ORDER BY registered_at, model_id"
_cache: dict[str, tuple[Any, list[Endpoint]]] = {}


def api_base(endpoint: str) -> str:
    """The OpenAI client base URL for an endpoint: ``.../v1/chat/completions`` becomes ``.../v1``."""
    base = endpoint.strip().rstrip("/")
    for suffix in ("/chat/completions", "/completions"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    return base


def _sqlite_path(url: str) -> Path | None:
    """The file of a SQLite store URL or bare path; None for a server URL."""
    if "://" not in url:
        return Path(url).expanduser()
    scheme, _, rest = url.partition("://")
    if scheme.split("+")[0] != "sqlite":
        return None
    rest = rest.split("?")[0]  # sqlite:///relative.db and sqlite:////absolute.db, as SQLAlchemy reads them
    return Path(rest[1:] if rest.startswith("/") else rest).expanduser()


def _read_sqlite(path: Path) -> list[Endpoint]:
    """The models rows of a SQLite store, read-only; empty when the file or table is missing."""
    try:
        stat = path.stat()
    except OSError:
        return []
    key = str(path.resolve())
    stamp = (stat.st_mtime_ns, stat.st_size)
    wal = path.with_name(path.name + "-wal")
    if wal.exists():
        stamp += (wal.stat().st_mtime_ns, wal.stat().st_size)
    cached = _cache.get(key)
    if cached and cached[0] == stamp:
        return cached[1]
    try:
        with sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=5) as conn:
            rows = [tuple(row) for row in conn.execute(_QUERY)]
    except sqlite3.Error:  # no models table yet, or not a store: nothing to register
        rows = []
    _cache[key] = (stamp, rows)
    return rows


def _read_server(url: str) -> list[Endpoint]:
    """The models rows of a PostgreSQL store, cached for a minute; empty when it cannot be reached."""
    cached = _cache.get(url)
    if cached and time.monotonic() - cached[0] < SERVER_CACHE_S:
        return cached[1]
    rows: list[Endpoint] = []
    try:
        import psycopg

        conninfo = url.replace("postgresql+psycopg://", "postgresql://", 1)
        with psycopg.connect(conninfo, connect_timeout=3) as conn:
            rows = [tuple(row) for row in conn.execute(_QUERY)]
    except Exception:  # a model lookup must never fail because the shared store is down
        rows = []
    _cache[url] = (time.monotonic(), rows)
    return rows


def registered_endpoints(url: str | None = None) -> list[Endpoint]:
    """``(name, endpoint, model_id)`` of every registered model, oldest first, without migrating anything.

    Args:
        url: a store URL or path; None means ``$FIELDEVAL_STORE``, else ``reports/fieldeval.db``.

    Returns:
        The registered endpoints; empty when the store does not exist or cannot be read.

    Example:
        >>> registered_endpoints()  # doctest: +SKIP
        [('phi-3-mini-4k', 'http://localhost:11434/v1', 'mdl_7f2a91c4')]
    """
    url = url or os.environ.get(STORE_ENV) or str(DEFAULT_STORE_PATH)
    path = _sqlite_path(url)
    return _read_sqlite(path) if path is not None else _read_server(url)


def endpoint_models(name: str, endpoint: str) -> tuple[Any, Any]:
    """An llm OpenAI chat model and its async twin for a model served at an OpenAI-compatible endpoint."""
    from llm.default_plugins.openai_models import AsyncChat, Chat

    models = []
    for cls in (Chat, AsyncChat):
        model = cls(model_id=name, model_name=name, api_base=api_base(endpoint), supports_schema=True)
        model.needs_key = None  # local servers take no key (llm then sends a dummy one)
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
    latest = {name: model_id for name, _, model_id in endpoints}
    for name, endpoint, model_id in endpoints:
        chat, async_chat = endpoint_models(name, endpoint)
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
