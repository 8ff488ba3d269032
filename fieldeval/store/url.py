"""Store URLs and engines: SQLite files (WAL, long busy timeout) and PostgreSQL through psycopg 3.

A store is named by ``sqlite:///PATH``, ``postgresql://USER:PASSWORD@HOST:PORT/DB``, or a bare
file path ending in ``.db``, ``.sqlite`` or ``.sqlite3`` (anything else without a scheme is refused
rather than made into a new SQLite file: ``--store 'not a url'`` is a typo, not a store).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from fieldeval.errors import UsageError
from fieldeval.store.location import default_store_url

SQLITE_BUSY_TIMEOUT_MS = 60_000
SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")
URL_FORMS = "sqlite:///PATH, a PATH ending in .db, or postgresql://USER:PASSWORD@HOST:PORT/DB"
# what SQLite says about a file that is not (or no longer) a database
_DAMAGED = ("file is not a database", "malformed", "disk image", "file is encrypted")


def redact(url: str) -> str:
    """The URL with its password hidden, for messages."""
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL at all: show it as given
        return url


def resolve_url(url: str | None) -> sa.URL:
    """The SQLAlchemy URL for a store URL, a bare file path, or None (the default store)."""
    text = (url or default_store_url()).strip()
    if "://" not in text:
        if not text.lower().endswith(SQLITE_SUFFIXES):
            raise UsageError(f"--store {text!r}: not a store; use {URL_FORMS}")
        text = f"sqlite:///{Path(text).expanduser().resolve()}"
    try:
        parsed = sa.engine.make_url(text)
    except (sa.exc.ArgumentError, ValueError):  # ValueError: a port that is not a number
        raise UsageError(f"--store {redact(text)!r}: not a database URL; use {URL_FORMS}") from None
    backend, _, driver = parsed.drivername.partition("+")
    if backend in ("postgresql", "postgres") and driver in ("", "psycopg"):
        return parsed.set(drivername="postgresql+psycopg")
    if backend == "sqlite" and driver in ("", "pysqlite"):
        if not parsed.database or parsed.database == ":memory:":
            raise UsageError(f"--store {text!r}: needs a file; use sqlite:///PATH (a memory database keeps no runs)")
        if Path(parsed.database).expanduser().is_dir():
            raise UsageError(f"--store {text!r}: {parsed.database} is a directory; name a file in it, "
                             f"e.g. {Path(parsed.database) / 'fieldeval.db'}")
        return parsed.set(drivername="sqlite")
    raise UsageError(f"--store {redact(text)!r}: unsupported database {parsed.drivername!r}; use {URL_FORMS}")


def database_error(url: str, error: BaseException) -> UsageError:
    """The one-line usage error for a database that cannot be opened or read (``url`` already redacted)."""
    cause = getattr(error, "orig", None) or error
    lines = str(cause).strip().splitlines() or [type(cause).__name__]
    reason = lines[0].strip()
    if any(mark in reason.lower() for mark in _DAMAGED):
        return UsageError(f"--store {url!r}: the database is damaged or not a fieldeval store ({reason}); "
                          "restore it from a backup or pass another --store")
    if any(mark in reason.lower() for mark in ("permission denied", "must be owner", "read-only transaction",
                                                "insufficient privilege")):
        return UsageError(f"--store {url!r}: this database role may not change the store ({reason}); a role that "
                          "owns its tables upgrades it by running any fieldeval command on it once (fieldeval runs "
                          "list --store URL), after which this role can read it")
    if "disk is full" in reason.lower():
        return UsageError(f"--store {url!r}: no space left for the database ({reason}); free some space")
    return UsageError(f"--store {url!r}: cannot open the database ({reason}); start the server or fix the URL")


@contextmanager
def database_errors(url: str) -> Iterator[None]:
    """Turn a database failure inside the block into :func:`database_error`'s one line."""
    try:
        yield
    except sa.exc.DBAPIError as error:
        raise database_error(url, error) from None


def create_engine(url: sa.URL, *, connect_timeout_s: int = 10) -> Engine:
    """The engine for a resolved store URL (see :func:`resolve_url`)."""
    if url.get_backend_name() == "sqlite":
        return _sqlite_engine(url)
    try:
        import psycopg  # noqa: F401  (the [postgres] extra)
    except ImportError:
        raise UsageError(f"--store {url.render_as_string(hide_password=True)!r}: the PostgreSQL driver (psycopg) "
                         "is not installed; pip install 'fieldeval[postgres]'") from None
    query = dict(url.query)
    query.setdefault("connect_timeout", str(connect_timeout_s))
    return sa.create_engine(url.set(query=query), pool_pre_ping=True)


def _sqlite_engine(url: sa.URL) -> Engine:
    """A SQLite engine: WAL, foreign keys, a long busy timeout, and BEGIN IMMEDIATE transactions."""
    Path(url.database).parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:
        dbapi_connection.isolation_level = None  # SQLAlchemy's begin event issues BEGIN itself
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.close()

    @sa.event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # take the write lock up front: a deferred transaction that reads then writes
        # fails at once with "database is locked" instead of waiting its turn
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine
