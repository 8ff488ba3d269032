"""Checking a run store before a session makes any model call: reachable, a database, and ours."""

from __future__ import annotations

import sqlalchemy as sa

from fieldeval.errors import UsageError
from fieldeval.store.location import default_store_url, sqlite_path
from fieldeval.store.url import redact


def check_store(url: str | None, *, create: bool = True) -> None:
    """Open the store and run one query; a usage error naming the file or URL (password hidden) when that fails.

    Args:
        url: a store URL or SQLite path; None means ``$FIELDEVAL_STORE`` or ``reports/fieldeval.db``.
        create: create (and migrate) a store that does not exist yet; when False, a missing SQLite
            file is an error.

    Raises:
        UsageError: the URL is malformed, the server cannot be reached, the file is not a usable
            SQLite database, or (``create=False``) the file does not exist.

    Example:
        >>> check_store("postgresql://u:secret@127.0.0.1:1/db")  # doctest: +SKIP
        UsageError: --store 'postgresql://u:***@127.0.0.1:1/db': cannot open the database (...)
    """
    from fieldeval.store.core import open_store

    text = url or default_store_url()
    shown = redact(text)
    path = sqlite_path(text)
    if path is not None and path.is_dir():
        raise UsageError(f"--store {shown!r}: is a folder; pass a SQLite file such as {path / 'fieldeval.db'}")
    if path is not None and not create and not path.exists():
        raise UsageError(f"--store {shown!r}: no such store file; run an eval first or fix the path")
    try:
        with open_store(text) as store, store.engine.connect() as conn:
            conn.execute(sa.select(sa.func.count()).select_from(store.tables.evaluations)).scalar()
    except sa.exc.SQLAlchemyError as error:
        lines = str(getattr(error, "orig", None) or error).strip().splitlines() or [type(error).__name__]
        raise UsageError(f"--store {shown!r}: cannot use the store ({lines[0].strip()}); move the damaged file "
                         "aside, fix the URL, or pass --store none") from None
    except OSError as error:
        raise UsageError(f"--store {shown!r}: cannot create the store ({error.strerror}); "
                         "pass a writable path, or --store none") from None


__all__ = ["check_store"]
