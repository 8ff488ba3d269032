"""The :class:`Store` (model registry, runs, compare over one engine) and :func:`open_store`."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from fieldeval.benchmark import StoreColumns
from fieldeval.errors import UsageError
from fieldeval.store import schema
from fieldeval.store.compare import Compare
from fieldeval.store.location import default_store_url
from fieldeval.store.registration import ModelRegistry
from fieldeval.store.runs import RunStore
from fieldeval.store.url import create_engine, database_errors, redact, resolve_url

NO_STORE_FIX = "run an evaluation first or pass --store"


class Store(ModelRegistry, RunStore, Compare):
    """A run store on one database; use :func:`open_store` to get one.

    Attributes:
        engine: the SQLAlchemy engine.
        url: the store URL, password hidden, for messages.
        columns: the benchmark-specific columns by benchmark name that :meth:`save_run` fills.
        tables: the tables, with every benchmark-specific column the database has (after :meth:`migrate`).
    """

    def __init__(self, engine: Engine, url: str | None = None,
                 columns: Mapping[str, StoreColumns] | None = None) -> None:
        self.engine = engine
        self.url = url or engine.url.render_as_string(hide_password=True)
        self.columns = dict(columns or {})
        self.tables = schema.GENERIC
        self.found_schema = 0  # the store's schema version when opened (set by migrate)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the store's connections."""
        self.engine.dispose()

    def _declared(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The ``evaluations`` and ``evaluation_responses`` columns the benchmarks declare, in order."""
        run = {name: None for declared in self.columns.values() for name in declared.run}
        response = {name: None for declared in self.columns.values() for name in declared.response}
        return tuple(run), tuple(response)

    def migrate(self) -> list[int]:
        """Apply the missing steps of ``MIGRATIONS`` and add missing declared columns; returns the versions applied.
        Sets :attr:`found_schema` (the store's version before, 0 for a new store)."""
        found: list[int] = []
        applied, self.tables = schema.migrate(self.engine, *self._declared(), found=found)
        self.found_schema = max(found, default=0)
        return applied

    def require_writable(self) -> None:
        """A usage error when a newer fieldeval has migrated the store past what this one knows: its writes could
        break the newer one's records."""
        if self.found_schema > schema.SCHEMA_VERSION:
            raise UsageError(f"--store {self.url!r}: a newer fieldeval upgraded this store (schema "
                             f"{self.found_schema}; this fieldeval writes schema {schema.SCHEMA_VERSION}), so this one "
                             "only reads it; upgrade fieldeval (pip install -U fieldeval) to write to it")

    def schema_versions(self) -> list[int]:
        """The migration versions recorded in ``schema_version``, in order."""
        versions = self.tables.schema_version.c.version
        with self.engine.connect() as conn:
            return list(conn.execute(sa.select(versions).order_by(versions)).scalars())


def require_store(parsed: sa.URL, engine: Engine | None = None) -> None:
    """A usage error unless the URL names an existing fieldeval store (nothing is created or written).

    Called with only ``parsed`` it checks a SQLite file before any connection (connecting would
    create it); with ``engine`` it checks that the database holds the ``schema_version`` table.
    """
    shown = parsed.render_as_string(hide_password=True)
    if engine is None:
        if parsed.get_backend_name() == "sqlite":
            path = Path(parsed.database).expanduser()
            if not path.exists():
                raise UsageError(f"no store at {path}; {NO_STORE_FIX}")
            if path.stat().st_size == 0:
                raise UsageError(f"{path} is an empty file, not a fieldeval store; {NO_STORE_FIX}")
        return
    with database_errors(shown), engine.connect() as conn:
        if not sa.inspect(conn).has_table(schema.GENERIC.schema_version.name):
            raise UsageError(f"no fieldeval store in {shown}; {NO_STORE_FIX}")


def open_store(url: str | None = None, columns: Mapping[str, StoreColumns] | None = None, *,
               create: bool = True) -> Store:
    """Open (and create or migrate) a run store.

    Args:
        url: ``sqlite:///PATH``, a bare file path ending in ``.db``, ``.sqlite`` or ``.sqlite3``, or
            ``postgresql://USER:PASSWORD@HOST:PORT/DB`` (served through psycopg 3); None means
            ``$FIELDEVAL_STORE`` or ``reports/fieldeval.db``.
        columns: benchmark name -> the columns it declares (``Benchmark.store_columns``); a declared
            column the tables lack is added on open. None: no benchmark-specific columns are filled
            (those already in the database are still read back).
        create: False for readers: a missing or empty SQLite file, or a database without a store, is
            a usage error instead of a new store (an existing store is still migrated).

    Returns:
        The store, with every migration in ``MIGRATIONS`` applied.

    Raises:
        UsageError: the URL is malformed or unsupported, the database cannot be reached or is
            damaged, or (``create=False``) there is no store there.

    Example:
        >>> store = open_store("sqlite:///reports/fieldeval.db", columns=declared_columns())  # doctest: +SKIP
        >>> [run.run_id for run in store.list_runs(benchmark="ibf")]  # doctest: +SKIP
        ['run_3b9e204a', 'run_9c1d88f0']
    """
    parsed = resolve_url(url)
    if not create:
        require_store(parsed)
    engine = create_engine(parsed)
    store = Store(engine, redact(url or default_store_url()), columns)
    try:
        if not create:
            require_store(parsed, engine)
        with database_errors(parsed.render_as_string(hide_password=True)):
            applied = store.migrate()
    except UsageError:
        engine.dispose()
        raise
    if create:
        try:
            store.require_writable()  # a writer learns it before spending anything
        except UsageError:
            engine.dispose()
            raise
    if applied and store.found_schema:  # an existing store upgraded: said once, as it happens
        sys.stderr.write(f"fieldeval: upgraded the store {store.url} from schema {store.found_schema} to "
                         f"{schema.SCHEMA_VERSION}, once, for this version of fieldeval\n")
    return store


def check_store(url: str | None = None, *, create: bool) -> str:
    """Check that a store can be opened and read, before a session spends anything on model calls.

    Args:
        url: as for :func:`open_store`; None means ``$FIELDEVAL_STORE`` or ``reports/fieldeval.db``.
        create: True for a writer: the store is created or migrated. False for a reader: it must exist.

    Returns:
        The store URL, password hidden.

    Raises:
        UsageError: one line naming the file or URL: malformed, unreachable, damaged, or missing.

    Example:
        >>> check_store("sqlite:///reports/fieldeval.db", create=True)  # doctest: +SKIP
        'sqlite:///reports/fieldeval.db'
    """
    with open_store(url, create=create) as store, database_errors(store.url), store.engine.connect() as conn:
        t = store.tables
        for table in (t.schema_version, t.models, t.evaluations, t.evaluation_errors):
            conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()
        if conn.dialect.name == "sqlite":  # a truncated file can read its first pages fine
            problem = conn.exec_driver_sql("PRAGMA quick_check(1)").scalar_one()
            if problem != "ok":
                raise UsageError(f"--store {store.url!r}: the database is damaged ({problem}); "
                                 "restore it from a backup or pass another --store")
        return store.url
