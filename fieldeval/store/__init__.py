"""The run store: every eval session as an immutable, comparable run.

SQLAlchemy Core over an embedded SQLite file (default ``reports/fieldeval.db``
under the project root) or a shared PostgreSQL database (``--store
postgresql://...``). The modules:

- :mod:`~fieldeval.store.location`: where the default store is (stdlib only).
- :mod:`~fieldeval.store.registry`: the registered endpoints, read cheaply (stdlib ``sqlite3``).
- :mod:`~fieldeval.store.url`: store URLs and engines.
- :mod:`~fieldeval.store.schema`: tables, versioned migrations, benchmark-declared columns.
- :mod:`~fieldeval.store.registration`: the model registry.
- :mod:`~fieldeval.store.payload`: a session's payload and rows as table rows.
- :mod:`~fieldeval.store.runs`: save and delete, with :mod:`~fieldeval.store.run_reads` (list, show,
  responses) and :mod:`~fieldeval.store.leases` (resume leases).
- :mod:`~fieldeval.store.compare`: the seed's compare payload.
- :mod:`~fieldeval.store.core`: :class:`Store` and :func:`open_store`.
- :mod:`~fieldeval.store.check`: :func:`check_store`, before a session makes any model call.

Importing this package does not import SQLAlchemy (llm looks up registered
endpoints on every model lookup); the names below that need it load on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from fieldeval.store.location import DEFAULT_STORE_PATH, STORE_ENV, default_store_url
from fieldeval.store.registry import read_endpoints

if TYPE_CHECKING:
    from fieldeval.benchmark import StoreColumns
    from fieldeval.store.core import Store, check_store, open_store
    from fieldeval.store.compare import PartialRunError
    from fieldeval.store.registration import ModelConflict, ModelRecord
    from fieldeval.store.run_reads import RunSummary
    from fieldeval.store.schema import MIGRATIONS, SCHEMA_VERSION, UtcDateTime
    from fieldeval.store.url import redact, resolve_url

_LAZY = {
    "Store": "core", "check_store": "core", "open_store": "core",
    "ModelRecord": "registration", "ModelConflict": "registration", "RunSummary": "run_reads", "PartialRunError": "compare",
    "MIGRATIONS": "schema", "SCHEMA_VERSION": "schema", "UtcDateTime": "schema",
    "redact": "url", "resolve_url": "url",
}
_TABLES = ("schema_version", "models", "evaluations", "evaluation_benchmarks", "evaluation_metrics",
           "evaluation_responses", "evaluation_errors")

__all__ = ["DEFAULT_STORE_PATH", "MIGRATIONS", "ModelConflict", "ModelRecord", "PartialRunError", "RunSummary", "SCHEMA_VERSION", "STORE_ENV", "Store",
           "UtcDateTime", "check_store", "declared_columns", "default_store_url", "open_store", "read_endpoints", "redact",
           "resolve_url", *_TABLES]


def declared_columns() -> dict[str, StoreColumns]:
    """Every installed benchmark's store columns by name; empty when none is installed.

    Example:
        >>> open_store(columns=declared_columns())  # doctest: +SKIP
    """
    from fieldeval.benchmark import benchmarks

    return {name: bench.store_columns for name, bench in benchmarks().items()}


def __getattr__(name: str) -> Any:
    """Load the SQLAlchemy-backed names on first use."""
    if name in _TABLES:
        return getattr(import_module("fieldeval.store.schema").GENERIC, name)
    if name in _LAZY:
        return getattr(import_module(f"fieldeval.store.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'fieldeval.store' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
