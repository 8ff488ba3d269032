"""The registered model endpoints, read cheaply: no migration, no SQLAlchemy for a SQLite store.

llm runs fieldeval's ``register_models`` hook on every model lookup, so
:func:`read_endpoints` reads a SQLite store with stdlib ``sqlite3``, read-only,
again only when the file changes, and not at all when it does not exist. A
PostgreSQL store is read through SQLAlchemy (imported then, not before) and
re-read once a minute. Registering models is
:class:`fieldeval.store.registration.ModelRegistry`'s job.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from fieldeval.store.location import default_store_url, sqlite_path

# (name, endpoint, model_id, key_env, batch), oldest registration first
Endpoint = tuple[str, str, str, str | None, bool | None]
SERVER_CACHE_S = 60.0
ENDPOINTS_SQL = "SELECT name, endpoint, model_id, key_env, batch FROM models ORDER BY registered_at, model_id"
# a store not yet migrated to step 8 has no batch column (its endpoints take no batches), nor before step 2 key_env
ENDPOINTS_SQL_V2 = "SELECT name, endpoint, model_id, key_env, NULL FROM models ORDER BY registered_at, model_id"
ENDPOINTS_SQL_V1 = "SELECT name, endpoint, model_id, NULL, NULL FROM models ORDER BY registered_at, model_id"
_cache: dict[str, tuple[Any, list[Endpoint]]] = {}
_session_store: list[str] = []  # the running pytest session's --store: llm's model lookups take no store argument


def use_session_store(url: str | None) -> None:
    """Read the registered models from ``url`` (a pytest session's ``--store``) until called with None.

    llm's ``register_models`` hook is process-wide and takes no argument, so the plugin sets this in
    ``pytest_configure`` and clears it in ``pytest_unconfigure``; nothing else should.
    """
    _session_store.clear()
    if url is not None:
        _session_store.append(url)


def read_endpoints(url: str | None = None) -> list[Endpoint]:
    """``(name, endpoint, model_id, key_env, batch)`` of every registered model, oldest first, without migrating.

    Args:
        url: a store URL or path; None means the running pytest session's ``--store`` (see
            :func:`use_session_store`), else ``$FIELDEVAL_STORE``, else ``reports/fieldeval.db``.

    Returns:
        The registered endpoints; empty when the store does not exist or cannot be read.

    Example:
        >>> read_endpoints("sqlite:///reports/fieldeval.db")  # doctest: +SKIP
        [('phi-3-mini-4k', 'http://localhost:11434/v1', 'mdl_7f2a91c4', None, None)]
    """
    url = url or next(iter(_session_store), None) or default_store_url()
    path = sqlite_path(url)
    return _read_sqlite(path) if path is not None else _read_server(url)


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
            rows = []
            for sql in (ENDPOINTS_SQL, ENDPOINTS_SQL_V2, ENDPOINTS_SQL_V1):
                try:
                    rows = [tuple(row) for row in conn.execute(sql)]
                    break
                except sqlite3.OperationalError:
                    continue
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
        from fieldeval.store.url import create_engine, resolve_url

        engine = create_engine(resolve_url(url), connect_timeout_s=3)
        try:
            from sqlalchemy.exc import ProgrammingError

            with engine.connect() as conn:
                for sql in (ENDPOINTS_SQL, ENDPOINTS_SQL_V2, ENDPOINTS_SQL_V1):
                    try:
                        rows = [tuple(row) for row in conn.exec_driver_sql(sql)]
                        break
                    except ProgrammingError:
                        conn.rollback()
        finally:
            engine.dispose()
    except Exception:  # a model lookup must never fail because the shared store is down
        rows = []
    _cache[url] = (time.monotonic(), rows)
    return rows
