"""The :class:`Store` (model registry, runs, compare over one engine) and :func:`open_store`."""

from __future__ import annotations

from collections.abc import Mapping

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from fieldeval.benchmark import StoreColumns
from fieldeval.errors import UsageError
from fieldeval.store import schema
from fieldeval.store.compare import Compare
from fieldeval.store.location import default_store_url
from fieldeval.store.registration import ModelRegistry
from fieldeval.store.runs import RunStore
from fieldeval.store.url import create_engine, redact, resolve_url


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
        """Apply the missing steps of ``MIGRATIONS`` and add missing declared columns; returns the versions applied."""
        applied, self.tables = schema.migrate(self.engine, *self._declared())
        return applied

    def schema_versions(self) -> list[int]:
        """The migration versions recorded in ``schema_version``, in order."""
        versions = self.tables.schema_version.c.version
        with self.engine.connect() as conn:
            return list(conn.execute(sa.select(versions).order_by(versions)).scalars())


def open_store(url: str | None = None, columns: Mapping[str, StoreColumns] | None = None) -> Store:
    """Open (and create or migrate) a run store.

    Args:
        url: ``sqlite:///PATH``, a bare file path, or ``postgresql://USER:PASSWORD@HOST:PORT/DB``
            (served through psycopg 3); None means ``$FIELDEVAL_STORE`` or ``reports/fieldeval.db``.
        columns: benchmark name -> the columns it declares (``Benchmark.store_columns``); a declared
            column the tables lack is added on open. None: no benchmark-specific columns are filled
            (those already in the database are still read back).

    Returns:
        The store, with every migration in ``MIGRATIONS`` applied.

    Raises:
        UsageError: the URL is malformed or unsupported, or the database cannot be reached.

    Example:
        >>> store = open_store("sqlite:///reports/fieldeval.db", columns=declared_columns())  # doctest: +SKIP
        >>> [run.run_id for run in store.list_runs(benchmark="ibf")]  # doctest: +SKIP
        ['run_3b9e204a', 'run_9c1d88f0']
    """
    parsed = resolve_url(url)
    engine = create_engine(parsed)
    store = Store(engine, redact(url or default_store_url()), columns)
    try:
        store.migrate()
    except sa.exc.OperationalError as error:
        engine.dispose()
        lines = str(error.orig or error).strip().splitlines() or [type(error).__name__]
        raise UsageError(f"--store {parsed.render_as_string(hide_password=True)!r}: cannot open the database "
                         f"({lines[0].strip()}); start the server or fix the URL") from None
    return store
