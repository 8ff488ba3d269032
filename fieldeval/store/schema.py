"""The store's tables and their versioned migrations.

The tables follow the IBF seed's schema (``models``, ``evaluations``,
``evaluation_responses``) generalised to every benchmark, plus
``evaluation_benchmarks`` (corpus version per benchmark) and
``evaluation_metrics`` (one row per run, benchmark, model and metric).
Benchmark-specific columns (the seed's five IBF dimensions, say) are not
written here: each benchmark declares them (``StoreColumns``) and
:func:`migrate` adds the ones a table lacks, as floats in ``evaluations`` and
small integers in ``evaluation_responses``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Connection, Engine

PG_MIGRATION_LOCK = 0x6669656C64  # pg_advisory_xact_lock key ("field")
RUN_COLUMN_TYPE = sa.Float
RESPONSE_COLUMN_TYPE = sa.SmallInteger
_COLUMN_NAME = re.compile(r"[a-z_][a-z0-9_]*")

_JSON = sa.JSON().with_variant(JSONB(), "postgresql")
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def utcnow() -> datetime:
    """Now, in UTC, to the second."""
    return datetime.now(timezone.utc).replace(microsecond=0)


def parse_time(value: str) -> datetime:
    """An ISO 8601 string (``Z`` allowed) as an aware UTC datetime."""
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed.replace(tzinfo=timezone.utc) if parsed.tzinfo is None else parsed.astimezone(timezone.utc)


def iso(value: datetime | None) -> str | None:
    """``2026-05-29T08:14:03Z`` for an aware datetime."""
    if value is None:
        return None
    return value.astimezone(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


class UtcDateTime(sa.TypeDecorator):
    """TIMESTAMPTZ on PostgreSQL, ISO text on SQLite; always an aware UTC datetime in Python."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | str | None, dialect) -> datetime | None:
        """Store aware datetimes (or ISO strings) as UTC."""
        if value is None:
            return None
        if isinstance(value, str):
            value = parse_time(value)
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        value = value.astimezone(timezone.utc)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect) -> datetime | None:
        """Read back as an aware UTC datetime."""
        if value is None:
            return None
        return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


@dataclass(frozen=True)
class Tables:
    """The store's tables, ``evaluations`` and ``evaluation_responses`` with their benchmark-specific columns.

    Attributes:
        run_columns: the benchmark-specific columns of ``evaluations``.
        response_columns: the benchmark-specific columns of ``evaluation_responses``.
    """

    schema_version: sa.Table
    models: sa.Table
    evaluations: sa.Table
    evaluation_benchmarks: sa.Table
    evaluation_metrics: sa.Table
    evaluation_responses: sa.Table
    evaluation_errors: sa.Table
    run_leases: sa.Table
    run_columns: tuple[str, ...] = ()
    response_columns: tuple[str, ...] = ()


def _group_columns() -> list[sa.Column]:
    """The run-group columns of ``evaluations`` (migration 3): which sharded run and shard a run is, its settings."""
    return [sa.Column("run_group", sa.Text), sa.Column("shard_index", sa.Integer),
            sa.Column("shard_count", sa.Integer), sa.Column("settings", _JSON), sa.Column("settings_hash", sa.Text)]


def _item_columns(key: str, item: str) -> list[sa.Column]:
    """The first columns of a table with one row per item of a run: its own id ``key``, the run, benchmark and
    model, and the item's id ``item``."""
    return [sa.Column(key, _ID, primary_key=True, autoincrement=True),
            sa.Column("run_id", sa.Text, sa.ForeignKey("evaluations.run_id", ondelete="CASCADE"), nullable=False),
            sa.Column("benchmark", sa.Text, nullable=False),
            sa.Column("model", sa.Text, nullable=False),
            sa.Column(item, sa.Text, nullable=False)]


def _define(metadata: sa.MetaData, run_columns: tuple[str, ...], response_columns: tuple[str, ...]) -> Tables:
    """Every table of the store on ``metadata``; the benchmark-specific columns come last."""
    return Tables(
        schema_version=sa.Table(
            "schema_version", metadata,
            sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column("description", sa.Text, nullable=False),
            sa.Column("applied_at", UtcDateTime, nullable=False),
        ),
        models=sa.Table(
            "models", metadata,
            sa.Column("model_id", sa.Text, primary_key=True),
            sa.Column("name", sa.Text, nullable=False),
            sa.Column("provider", sa.Text),
            sa.Column("endpoint", sa.Text, nullable=False),
            sa.Column("context_window", sa.Integer),
            sa.Column("parameters_billion", sa.Float),
            sa.Column("notes", sa.Text),
            sa.Column("registered_at", UtcDateTime, nullable=False),
            sa.Column("key_env", sa.Text),
            sa.Column("batch", sa.Boolean),  # the endpoint offers OpenAI's Batch API (fieldeval models add --batch)
            sa.UniqueConstraint("name", "endpoint", name="uq_models_name_endpoint"),
        ),
        evaluations=sa.Table(
            "evaluations", metadata,
            sa.Column("run_id", sa.Text, primary_key=True),
            sa.Column("model_id", sa.Text, sa.ForeignKey("models.model_id", ondelete="SET NULL")),
            sa.Column("label", sa.Text),
            sa.Column("benchmarks", _JSON, nullable=False),
            sa.Column("models", _JSON, nullable=False),
            sa.Column("corpus_version", sa.Text),
            sa.Column("content_hash", sa.Text),
            sa.Column("ontology_version", sa.Text),
            sa.Column("git_commit", sa.Text),
            sa.Column("status", sa.Text, nullable=False, server_default="completed"),
            sa.Column("total_items", sa.Integer),
            sa.Column("totals", _JSON),
            sa.Column("payload", _JSON, nullable=False),
            sa.Column("created_at", UtcDateTime, nullable=False),
            sa.Column("completed_at", UtcDateTime),
            sa.Column("items_planned", sa.Integer),
            sa.Column("items_done", sa.Integer),
            sa.Column("items_errored", sa.Integer),
            sa.Column("unverified", sa.Boolean),  # pushed without the digests that check it (runs push --unverified)
            *_group_columns(),
            *(sa.Column(name, RUN_COLUMN_TYPE) for name in run_columns),
            sa.Index("ix_evaluations_created", "created_at"),
            sa.Index("ix_evaluations_run_group", "run_group"),
        ),
        evaluation_benchmarks=sa.Table(
            "evaluation_benchmarks", metadata,
            sa.Column("run_id", sa.Text, sa.ForeignKey("evaluations.run_id", ondelete="CASCADE"), primary_key=True),
            sa.Column("benchmark", sa.Text, primary_key=True),
            sa.Column("corpus_version", sa.Text),
            sa.Column("content_hash", sa.Text),
            sa.Column("headline", _JSON, nullable=False),
            sa.Column("total_items", sa.Integer),
        ),
        evaluation_metrics=sa.Table(
            "evaluation_metrics", metadata,
            sa.Column("run_id", sa.Text, sa.ForeignKey("evaluations.run_id", ondelete="CASCADE"), primary_key=True),
            sa.Column("benchmark", sa.Text, primary_key=True),
            sa.Column("model", sa.Text, primary_key=True),
            sa.Column("metric", sa.Text, primary_key=True),
            sa.Column("value", sa.Float),
            sa.Column("ci_lo", sa.Float),
            sa.Column("ci_hi", sa.Float),
            sa.Column("n", sa.Integer),
        ),
        evaluation_responses=sa.Table(
            "evaluation_responses", metadata,
            *_item_columns("response_id", "corpus_item_id"),
            sa.Column("raw_response", sa.Text),
            sa.Column("metrics", _JSON),
            sa.Column("response_time_s", sa.Float),
            sa.Column("prompt_tokens", sa.Integer),
            sa.Column("completion_tokens", sa.Integer),
            sa.Column("est_cost_usd", sa.Float),
            sa.Column("cached", sa.Boolean),
            sa.Column("scored_at", UtcDateTime),
            sa.Column("row_extra", _JSON),
            *(sa.Column(name, RESPONSE_COLUMN_TYPE) for name in response_columns),
            sa.Index("ix_evaluation_responses_run", "run_id", "benchmark", "model"),
            sa.Index("ix_evaluation_responses_case", "run_id", "corpus_item_id"),
        ),
        evaluation_errors=sa.Table(
            "evaluation_errors", metadata,
            *_item_columns("error_id", "item_id"),
            sa.Column("error_class", sa.Text, nullable=False),
            sa.Column("message", sa.Text),
            sa.Column("case_id", sa.Text),  # the case's own id (migration 7); item_id is the pytest node id
            sa.Index("ix_evaluation_errors_run", "run_id"),
        ),
        run_leases=sa.Table(  # the one session resuming a run (fieldeval.run.resume)
            "run_leases", metadata,
            sa.Column("run_id", sa.Text, primary_key=True),
            sa.Column("holder", sa.Text, nullable=False),
            sa.Column("taken_at", UtcDateTime, nullable=False),
        ),
        run_columns=run_columns,
        response_columns=response_columns,
    )


GENERIC = _define(sa.MetaData(), (), ())


@lru_cache(maxsize=32)
def tables_with(run_columns: tuple[str, ...] = (), response_columns: tuple[str, ...] = ()) -> Tables:
    """The tables with these benchmark-specific columns (one set of Table objects per combination)."""
    return _define(sa.MetaData(), run_columns, response_columns)


def check_column_names(table: sa.Table, names: Iterable[str]) -> None:
    """A ValueError for a declared column that is not a lowercase identifier or is one of the generic ones."""
    generic = set(table.c.keys())
    for name in names:
        if not _COLUMN_NAME.fullmatch(name) or name in generic:
            raise ValueError(f"store column {table.name}.{name!r}: declare a new lowercase identifier "
                             f"(not one of {', '.join(sorted(generic))})")


def _migration_1(conn: Connection) -> None:
    """Create models, evaluations, evaluation_benchmarks, evaluation_metrics, evaluation_responses."""
    for table in (GENERIC.models, GENERIC.evaluations, GENERIC.evaluation_benchmarks, GENERIC.evaluation_metrics,
                  GENERIC.evaluation_responses):
        table.create(conn, checkfirst=True)


def _add_missing_columns(conn: Connection, table: sa.Table, names: Iterable[str],
                         kind: Callable[[str], sa.types.TypeEngine] | None = None) -> list[str]:
    """ALTER TABLE ... ADD COLUMN for each of ``names`` the table lacks (typed as in ``table``, or by ``kind``).

    Returns:
        Every column the table has afterwards.
    """
    present = [column["name"] for column in sa.inspect(conn).get_columns(table.name)]
    quote = conn.dialect.identifier_preparer.quote
    for name in names:
        if name not in present:
            column_type = kind(name) if kind is not None else table.c[name].type
            ddl = column_type.dialect_impl(conn.dialect).compile(dialect=conn.dialect)
            conn.exec_driver_sql(f"ALTER TABLE {quote(table.name)} ADD COLUMN {quote(name)} {ddl}")
            present.append(name)
    return present


def _migration_2(conn: Connection) -> None:
    """Add evaluations.items_planned/items_done/items_errored, models.key_env and the evaluation_errors table."""
    _add_missing_columns(conn, GENERIC.evaluations, ("items_planned", "items_done", "items_errored"))
    _add_missing_columns(conn, GENERIC.models, ("key_env",))
    GENERIC.evaluation_errors.create(conn, checkfirst=True)


def _migration_3(conn: Connection) -> None:
    """Add run groups (evaluations.run_group, shard_*, settings*) and evaluation_responses.row_extra."""
    _add_missing_columns(conn, GENERIC.evaluations, [c.name for c in _group_columns()])
    _add_missing_columns(conn, GENERIC.evaluation_responses, ["row_extra"])
    next(i for i in GENERIC.evaluations.indexes if i.name == "ix_evaluations_run_group").create(conn, checkfirst=True)


MERGED_RUN_INDEX = "uq_evaluations_merged_run"


def _migration_4(conn: Connection) -> None:
    """Make a run group's merged run (``shard_index`` NULL) unique; a group merged twice before keeps its first."""
    t = GENERIC.evaluations
    merged = conn.execute(sa.select(t.c.run_group, t.c.run_id).where(
        t.c.run_group.is_not(None), t.c.shard_index.is_(None)).order_by(t.c.run_group, t.c.created_at, t.c.run_id)).all()
    first: dict[str, str] = {}
    later = [run_id for group, run_id in merged if first.setdefault(group, run_id) != run_id]
    spared = f" AND run_id NOT IN ({', '.join(_sql_text(r) for r in later)})" if later else ""
    conn.exec_driver_sql(f"CREATE UNIQUE INDEX IF NOT EXISTS {MERGED_RUN_INDEX} ON evaluations (run_group) "
                         f"WHERE run_group IS NOT NULL AND shard_index IS NULL{spared}")


def _migration_5(conn: Connection) -> None:
    """Create run_leases: which session is resuming a run."""
    GENERIC.run_leases.create(conn, checkfirst=True)


def _migration_6(conn: Connection) -> None:
    """Index a run's responses by case id: one item is read without reading the run."""
    next(i for i in GENERIC.evaluation_responses.indexes if i.name == "ix_evaluation_responses_case").create(
        conn, checkfirst=True)


def _migration_8(conn: Connection) -> None:
    """Add models.batch: an endpoint registered with ``--batch`` takes ``--batch`` sessions' calls as batches."""
    _add_missing_columns(conn, GENERIC.models, ("batch",))


def _migration_7(conn: Connection) -> None:
    """Add evaluation_errors.case_id: an errored item is found by its case id, as a scored one is."""
    _add_missing_columns(conn, GENERIC.evaluation_errors, ["case_id"])


def _migration_9(conn: Connection) -> None:
    """Add evaluations.unverified (a kept run pushed without the digests to check it) and fill the case ids of
    errored items stored before step 7 (from the node id's part that names a case the benchmark scored)."""
    _add_missing_columns(conn, GENERIC.evaluations, ["unverified"])
    errors, responses = GENERIC.evaluation_errors, GENERIC.evaluation_responses
    missing = conn.execute(sa.select(errors.c.error_id, errors.c.benchmark, errors.c.model, errors.c.item_id)
                           .where(errors.c.case_id.is_(None))).all()
    for error_id, benchmark, model, item_id in missing:
        params = item_id.split("[", 1)[1].removesuffix("]") if "[" in (item_id or "") else (item_id or "")
        parts = [part for part in params.removesuffix(f"-{model}").split("-") if part]
        if not parts:
            continue
        found = conn.execute(sa.select(responses.c.corpus_item_id).where(
            responses.c.benchmark == benchmark, responses.c.corpus_item_id.in_(parts)).distinct().limit(2)).scalars()
        found = list(found)
        if len(found) == 1:
            conn.execute(errors.update().where(errors.c.error_id == error_id).values(case_id=found[0]))


def _sql_text(value: str) -> str:
    """``value`` as an SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


# Append only: never edit or reorder a released step; a new generic column is a new step (ALTER TABLE ...).
# Benchmark-specific columns are not steps: _add_declared_columns adds them on every open.
MIGRATIONS: list[tuple[int, str, Callable[[Connection], None]]] = [
    (1, "initial schema: models, evaluations, benchmarks, metrics, responses", _migration_1),
    (2, "items planned, done and errored per run; evaluation_errors; models.key_env", _migration_2),
    (3, "run groups: shards of one sharded run, their settings, full rows", _migration_3),
    (4, "one merged run per run group", _migration_4),
    (5, "run leases: one session resumes a run at a time", _migration_5),
    (6, "an index of each run's responses by case id", _migration_6),
    (7, "errored items' case ids", _migration_7),
    (8, "models.batch: endpoints that offer a batch API", _migration_8),
    (9, "runs pushed unverified; errored items' case ids filled in", _migration_9),
]
SCHEMA_VERSION = MIGRATIONS[-1][0]


def _add_declared_columns(conn: Connection, table: sa.Table, declared: Iterable[str], kind: type) -> tuple[str, ...]:
    """Add each declared column the table lacks; returns its benchmark-specific columns."""
    present = _add_missing_columns(conn, table, declared, kind=lambda _: kind())
    return tuple(name for name in present if name not in table.c)


def migrate(engine: Engine, run_columns: Iterable[str] = (), response_columns: Iterable[str] = (),
            found: list[int] | None = None) -> tuple[list[int], Tables]:
    """Apply the missing steps of ``MIGRATIONS`` and add missing declared columns, in one locked transaction. A
    store a newer fieldeval has migrated past :data:`SCHEMA_VERSION` is left as it is (its writes are refused by
    :class:`~fieldeval.store.Store`).

    Args:
        found: when given, receives the versions the store had before.

    Returns:
        The migration versions applied, and the tables with every benchmark-specific column the database has.
    """
    run_columns, response_columns = tuple(dict.fromkeys(run_columns)), tuple(dict.fromkeys(response_columns))
    check_column_names(GENERIC.evaluations, run_columns)
    check_column_names(GENERIC.evaluation_responses, response_columns)
    applied: list[int] = []
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": PG_MIGRATION_LOCK})
        GENERIC.schema_version.create(conn, checkfirst=True)
        done = set(conn.execute(sa.select(GENERIC.schema_version.c.version)).scalars())
        if found is not None:
            found.extend(sorted(done))
        if done and max(done) > SCHEMA_VERSION:  # a newer fieldeval's store: read what this one knows, change nothing
            present = [column["name"] for column in sa.inspect(conn).get_columns(GENERIC.evaluations.name)]
            responses = [column["name"] for column in sa.inspect(conn).get_columns(GENERIC.evaluation_responses.name)]
            return [], tables_with(tuple(n for n in present if n not in GENERIC.evaluations.c),
                                   tuple(n for n in responses if n not in GENERIC.evaluation_responses.c))
        for version, description, step in MIGRATIONS:
            if version in done:
                continue
            step(conn)
            conn.execute(GENERIC.schema_version.insert().values(version=version, description=description,
                                                                applied_at=utcnow()))
            applied.append(version)
        run_present = _add_declared_columns(conn, GENERIC.evaluations, run_columns, RUN_COLUMN_TYPE)
        response_present = _add_declared_columns(conn, GENERIC.evaluation_responses, response_columns,
                                                 RESPONSE_COLUMN_TYPE)
    return applied, tables_with(run_present, response_present)
