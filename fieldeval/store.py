"""The run store: every eval session as an immutable, comparable run.

SQLAlchemy Core over an embedded SQLite file (default ``reports/fieldeval.db``
under the project root) or a shared PostgreSQL database (``--store
postgresql://...``). The tables follow the IBF seed's schema (``models``,
``evaluations``, ``evaluation_responses``) generalised to every benchmark,
plus ``evaluation_benchmarks`` (corpus version per benchmark) and
``evaluation_metrics`` (one row per run, benchmark, model and metric).

Schema changes are versioned: ``schema_version`` records each applied step of
``MIGRATIONS``; :func:`open_store` applies the missing ones in one locked
transaction, so two processes opening a fresh store at once are safe.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Connection, Engine

from fieldeval.errors import UsageError
from scorers.ibf import DIMENSIONS

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_STORE_PATH = PROJECT_ROOT / "reports" / "fieldeval.db"
STORE_ENV = "FIELDEVAL_STORE"
IBF = "ibf"
IBF_DIMENSIONS = list(DIMENSIONS)
IBF_AGGREGATES = ["mean_dimension_score", "threshold_pass_rate"]
ROW_COLUMNS = {"benchmark", "model", "case_id", "item_id", "corpus_item_id", "nodeid", "response_text", "raw_response",
               "response_time_s", "prompt_tokens", "completion_tokens", "est_cost_usd", "cached", "scored_at"}
SQLITE_BUSY_TIMEOUT_MS = 60_000
PG_MIGRATION_LOCK = 0x6669656C64  # pg_advisory_xact_lock key ("field")

_JSON = sa.JSON().with_variant(JSONB(), "postgresql")
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


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


metadata = sa.MetaData()

schema_version = sa.Table(
    "schema_version", metadata,
    sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("description", sa.Text, nullable=False),
    sa.Column("applied_at", UtcDateTime, nullable=False),
)

models = sa.Table(
    "models", metadata,
    sa.Column("model_id", sa.Text, primary_key=True),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("provider", sa.Text),
    sa.Column("endpoint", sa.Text, nullable=False),
    sa.Column("context_window", sa.Integer),
    sa.Column("parameters_billion", sa.Float),
    sa.Column("notes", sa.Text),
    sa.Column("registered_at", UtcDateTime, nullable=False),
    sa.UniqueConstraint("name", "endpoint", name="uq_models_name_endpoint"),
)

evaluations = sa.Table(
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
    *(sa.Column(name, sa.Float) for name in IBF_DIMENSIONS + IBF_AGGREGATES),
    sa.Column("totals", _JSON),
    sa.Column("payload", _JSON, nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("completed_at", UtcDateTime),
    sa.Index("ix_evaluations_created", "created_at"),
)

evaluation_benchmarks = sa.Table(
    "evaluation_benchmarks", metadata,
    sa.Column("run_id", sa.Text, sa.ForeignKey("evaluations.run_id", ondelete="CASCADE"), primary_key=True),
    sa.Column("benchmark", sa.Text, primary_key=True),
    sa.Column("corpus_version", sa.Text),
    sa.Column("content_hash", sa.Text),
    sa.Column("headline", _JSON, nullable=False),
    sa.Column("total_items", sa.Integer),
)

evaluation_metrics = sa.Table(
    "evaluation_metrics", metadata,
    sa.Column("run_id", sa.Text, sa.ForeignKey("evaluations.run_id", ondelete="CASCADE"), primary_key=True),
    sa.Column("benchmark", sa.Text, primary_key=True),
    sa.Column("model", sa.Text, primary_key=True),
    sa.Column("metric", sa.Text, primary_key=True),
    sa.Column("value", sa.Float),
    sa.Column("ci_lo", sa.Float),
    sa.Column("ci_hi", sa.Float),
    sa.Column("n", sa.Integer),
)

evaluation_responses = sa.Table(
    "evaluation_responses", metadata,
    sa.Column("response_id", _ID, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.Text, sa.ForeignKey("evaluations.run_id", ondelete="CASCADE"), nullable=False),
    sa.Column("benchmark", sa.Text, nullable=False),
    sa.Column("model", sa.Text, nullable=False),
    sa.Column("corpus_item_id", sa.Text, nullable=False),
    sa.Column("raw_response", sa.Text),
    *(sa.Column(name, sa.SmallInteger) for name in IBF_DIMENSIONS),
    sa.Column("metrics", _JSON),
    sa.Column("response_time_s", sa.Float),
    sa.Column("prompt_tokens", sa.Integer),
    sa.Column("completion_tokens", sa.Integer),
    sa.Column("est_cost_usd", sa.Float),
    sa.Column("cached", sa.Boolean),
    sa.Column("scored_at", UtcDateTime),
    sa.Index("ix_evaluation_responses_run", "run_id", "benchmark", "model"),
)


def _migration_1(conn: Connection) -> None:
    """Create models, evaluations, evaluation_benchmarks, evaluation_metrics, evaluation_responses."""
    for table in (models, evaluations, evaluation_benchmarks, evaluation_metrics, evaluation_responses):
        table.create(conn, checkfirst=True)


# Append only: never edit or reorder a released step; a new column is a new step (ALTER TABLE ...).
MIGRATIONS: list[tuple[int, str, Callable[[Connection], None]]] = [
    (1, "initial schema: models, evaluations, benchmarks, metrics, responses", _migration_1),
]
SCHEMA_VERSION = MIGRATIONS[-1][0]


@dataclass(frozen=True)
class ModelRecord:
    """A registered model endpoint.

    Attributes:
        model_id: ``mdl_`` and 8 hex digits, e.g. ``mdl_7f2a91c4``.
        name: the model name sent to the endpoint and used as ``--model NAME``.
        provider: who serves it, e.g. ``local``, ``ollama``, ``vllm``.
        endpoint: the OpenAI-compatible URL, e.g. ``http://localhost:11434/v1``.
        context_window: tokens of context, when known.
        parameters_billion: model size, when known.
        notes: free text (quantisation, hardware).
        registered_at: ISO 8601 UTC time of the first registration.
    """

    model_id: str
    name: str
    provider: str | None
    endpoint: str
    context_window: int | None
    parameters_billion: float | None
    notes: str | None
    registered_at: str

    def as_dict(self) -> dict[str, Any]:
        """The record as a JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True)
class RunSummary:
    """One stored run, as ``runs list`` shows it.

    Attributes:
        run_id: ``run_`` and 8 hex digits.
        label: the human-readable run tag.
        benchmarks: benchmark names in the run.
        models: model names in the run.
        corpus_versions: corpus or suite version per benchmark.
        status: ``completed``, ``failed``, ``interrupted``...
        total_items: items evaluated, errors included.
        created_at: ISO 8601 UTC start time.
        completed_at: ISO 8601 UTC end time.
        legacy: True when a benchmark of the run used a superseded corpus version.
    """

    run_id: str
    label: str | None
    benchmarks: list[str]
    models: list[str]
    corpus_versions: dict[str, str | None]
    status: str
    total_items: int | None
    created_at: str
    completed_at: str | None
    legacy: bool

    def as_dict(self) -> dict[str, Any]:
        """The summary as a JSON-ready dict."""
        return asdict(self)


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


def default_store_url() -> str:
    """``$FIELDEVAL_STORE`` when set, else the SQLite file ``reports/fieldeval.db`` under the project root."""
    return os.environ.get(STORE_ENV) or f"sqlite:///{DEFAULT_STORE_PATH}"


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
        text = f"sqlite:///{Path(text).expanduser().resolve()}"
    try:
        parsed = sa.engine.make_url(text)
    except sa.exc.ArgumentError:
        raise UsageError(f"--store {text!r}: not a database URL; use sqlite:///PATH or "
                         "postgresql://USER:PASSWORD@HOST:PORT/DB") from None
    backend, _, driver = parsed.drivername.partition("+")
    if backend in ("postgresql", "postgres") and driver in ("", "psycopg"):
        return parsed.set(drivername="postgresql+psycopg")
    if backend == "sqlite" and driver in ("", "pysqlite"):
        if not parsed.database or parsed.database == ":memory:":
            raise UsageError(f"--store {text!r}: needs a file; use sqlite:///PATH (a memory database keeps no runs)")
        return parsed.set(drivername="sqlite")
    raise UsageError(f"--store {redact(text)!r}: unsupported database {parsed.drivername!r}; "
                     "use sqlite:///PATH or postgresql://USER:PASSWORD@HOST:PORT/DB")


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


def open_store(url: str | None = None) -> Store:
    """Open (and create or migrate) a run store.

    Args:
        url: ``sqlite:///PATH``, a bare file path, or ``postgresql://USER:PASSWORD@HOST:PORT/DB``
            (served through psycopg 3); None means ``$FIELDEVAL_STORE`` or ``reports/fieldeval.db``.

    Returns:
        The store, with every migration in ``MIGRATIONS`` applied.

    Raises:
        UsageError: the URL is malformed or unsupported, or the database cannot be reached.

    Example:
        >>> store = open_store("sqlite:///reports/fieldeval.db")  # doctest: +SKIP
        >>> [run.run_id for run in store.list_runs(benchmark="ibf")]  # doctest: +SKIP
        ['run_3b9e204a', 'run_9c1d88f0']
    """
    parsed = resolve_url(url)
    if parsed.get_backend_name() == "sqlite":
        engine = _sqlite_engine(parsed)
    else:
        query = dict(parsed.query)
        query.setdefault("connect_timeout", "10")
        engine = sa.create_engine(parsed.set(query=query), pool_pre_ping=True)
    store = Store(engine, redact(url or default_store_url()))
    try:
        store.migrate()
    except sa.exc.OperationalError as error:
        engine.dispose()
        lines = str(error.orig or error).strip().splitlines() or [type(error).__name__]
        raise UsageError(f"--store {parsed.render_as_string(hide_password=True)!r}: cannot open the database "
                         f"({lines[0].strip()}); start the server or fix the URL") from None
    return store


def _metric_entries(entry: Mapping[str, Any], prefix: str = "") -> Iterable[tuple[str, Mapping[str, Any]]]:
    """``(dotted name, {"value","ci95","n"})`` for every metric in a payload entry, nested ones included."""
    for key, value in entry.items():
        if not isinstance(value, Mapping):
            continue
        name = f"{prefix}{key}"
        if "value" in value and ("ci95" in value or "n" in value):
            yield name, value
        else:
            yield from _metric_entries(value, prefix=f"{name}.")


def _number(value: Any) -> float | None:
    """A float, or None for missing and non-numeric values."""
    if value is None or isinstance(value, str):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _integer(value: Any) -> int | None:
    """An int, or None for missing values."""
    number = _number(value)
    return None if number is None else int(round(number))


def _per_benchmark(value: str | Mapping[str, str] | None, benchmark: str) -> str | None:
    """A meta value that is either one string for every benchmark or a dict by benchmark."""
    if isinstance(value, Mapping):
        found = value.get(benchmark)
        return None if found is None else str(found)
    return None if value is None else str(value)


def _headline(benchmark: str, entry_models: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The benchmark's headline metrics as it declares them, or every metric of the run."""
    from fieldeval.benchmark import benchmarks

    bench = benchmarks().get(benchmark)
    if bench is not None:
        return bench.headline
    names: dict[str, None] = {}
    for entry in entry_models.values():
        names.update((name, None) for name, _ in _metric_entries(entry) if "." not in name)
    return list(names)


def _totals(rows_by_benchmark: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Items, tokens, cost, time and cache hits per model, over every benchmark."""
    totals: dict[str, dict[str, Any]] = {}
    for rows in rows_by_benchmark.values():
        for row in rows:
            total = totals.setdefault(str(row.get("model")), {
                "items": 0, "cached": 0, "prompt_tokens": 0, "completion_tokens": 0,
                "est_cost_usd": None, "response_time_s": 0.0})
            total["items"] += 1
            total["cached"] += bool(row.get("cached"))
            for key in ("prompt_tokens", "completion_tokens"):
                total[key] += _integer(row.get(key)) or 0
            total["response_time_s"] = round(total["response_time_s"] + (_number(row.get("response_time_s")) or 0), 6)
            cost = _number(row.get("est_cost_usd"))
            if cost is not None:
                total["est_cost_usd"] = round((total["est_cost_usd"] or 0.0) + cost, 10)
    return totals


def _json_ready(value: Any) -> Any:
    """The value after a JSON round trip (numpy scalars, paths and sets become plain JSON)."""
    return json.loads(json.dumps(value, default=lambda o: o.item() if hasattr(o, "item") else str(o)))


class Store:
    """A run store on one database; use :func:`open_store` to get one."""

    def __init__(self, engine: Engine, url: str | None = None) -> None:
        self.engine = engine
        self.url = url or engine.url.render_as_string(hide_password=True)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the store's connections."""
        self.engine.dispose()

    # -- schema ---------------------------------------------------------------------------------

    def migrate(self) -> list[int]:
        """Apply the missing steps of ``MIGRATIONS`` in one locked transaction; returns the versions applied."""
        applied: list[int] = []
        with self.engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": PG_MIGRATION_LOCK})
            schema_version.create(conn, checkfirst=True)
            done = set(conn.execute(sa.select(schema_version.c.version)).scalars())
            for version, description, step in MIGRATIONS:
                if version in done:
                    continue
                step(conn)
                conn.execute(schema_version.insert().values(version=version, description=description,
                                                            applied_at=utcnow()))
                applied.append(version)
        return applied

    def schema_versions(self) -> list[int]:
        """The migration versions recorded in ``schema_version``, in order."""
        with self.engine.connect() as conn:
            return list(conn.execute(sa.select(schema_version.c.version).order_by(schema_version.c.version)).scalars())

    # -- models ---------------------------------------------------------------------------------

    def add_model(
        self,
        name: str,
        endpoint: str,
        *,
        provider: str | None = None,
        context_window: int | None = None,
        parameters_billion: float | None = None,
        notes: str | None = None,
    ) -> ModelRecord:
        """Register a model endpoint; idempotent on (name, endpoint).

        Args:
            name: the model name the endpoint serves (also its ``--model`` id), e.g. ``phi-3-mini-4k``.
            endpoint: the OpenAI-compatible base URL, e.g. ``http://localhost:11434/v1``.
            provider: who serves it, e.g. ``local``.
            context_window: tokens of context.
            parameters_billion: model size in billions of parameters.
            notes: free text.

        Returns:
            The new record, or the existing one when (name, endpoint) is already registered.

        Raises:
            UsageError: an empty name or endpoint, or a negative size.

        Example:
            >>> store.add_model("phi-3-mini-4k", "http://localhost:11434/v1", provider="local").model_id  # doctest: +SKIP
            'mdl_7f2a91c4'
        """
        return self.register_model(name, endpoint, provider=provider, context_window=context_window,
                                   parameters_billion=parameters_billion, notes=notes)[0]

    def register_model(self, name: str, endpoint: str, **fields: Any) -> tuple[ModelRecord, bool]:
        """:meth:`add_model`, also saying whether the record is new."""
        name, endpoint = (name or "").strip(), (endpoint or "").strip()
        if not name:
            raise UsageError("models add NAME: the name is empty; pass the model name the endpoint serves")
        if "://" not in endpoint:
            raise UsageError(f"--endpoint {endpoint!r}: not a URL; pass the server's base URL, "
                             "e.g. http://localhost:11434/v1")
        for key in ("context_window", "parameters_billion"):
            if fields.get(key) is not None and fields[key] <= 0:
                raise UsageError(f"--{key.replace('_', '-')} {fields[key]}: must be positive")
        for _ in range(3):
            existing = self._model(name, endpoint)
            if existing is not None:
                return existing, False
            try:
                with self.engine.begin() as conn:
                    conn.execute(models.insert().values(model_id="mdl_" + secrets.token_hex(4), name=name,
                                                        endpoint=endpoint, registered_at=utcnow(), **fields))
            except sa.exc.IntegrityError:  # a concurrent registration won the race (or an id clash): read again
                continue
            record = self._model(name, endpoint)
            assert record is not None, "a committed model registration must be readable"
            return record, True
        raise UsageError(f"models add {name} --endpoint {endpoint}: registration kept conflicting; try again")

    def _model(self, name: str, endpoint: str) -> ModelRecord | None:
        """The record for (name, endpoint), if any."""
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(models).where(models.c.name == name, models.c.endpoint == endpoint)).first()
        return None if row is None else self._model_record(row)

    @staticmethod
    def _model_record(row: sa.Row) -> ModelRecord:
        """A models row as a record."""
        data = row._asdict()
        data["registered_at"] = iso(data["registered_at"])
        return ModelRecord(**data)

    def list_models(self) -> list[ModelRecord]:
        """Every registered model, oldest first.

        Returns:
            The records in registration order.

        Example:
            >>> [m.name for m in store.list_models()]  # doctest: +SKIP
            ['phi-3-mini-4k']
        """
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(models).order_by(models.c.registered_at, models.c.name)).all()
        return [self._model_record(row) for row in rows]

    # -- runs -----------------------------------------------------------------------------------

    def save_run(
        self,
        payload: Mapping[str, Any],
        rows_by_benchmark: Mapping[str, Sequence[Mapping[str, Any]]],
        meta: Mapping[str, Any] | None = None,
    ) -> str:
        """Store one eval session as an immutable run, in one transaction.

        Args:
            payload: ``EvalSession.payload()``: ``{"run_id", "started_at", "ontology_version",
                "benchmarks": {bench: {model: {metric: {"value", "ci95", "n"}, "items", "errors", ...}}}}``.
            rows_by_benchmark: ``{bench: EvalSession.sorted_rows(bench)}``; each row has ``model``,
                ``case_id``, ``response_text``, the cost columns and its metric values.
            meta: optional ``label``, ``corpus_version`` and ``content_hash`` (a string, or a dict by
                benchmark; the corpus version defaults to the rows' ``corpus_version`` when they share one), ``git_commit``, ``status`` (default ``completed``), ``completed_at``
                (default now), ``totals`` (default: per-model sums of the rows), ``headline``
                (``{bench: [metric, ...]}``, default: the benchmark module's HEADLINE).

        Returns:
            The run id.

        Raises:
            UsageError: the payload has no run id, or the run id is already stored (runs are immutable).

        Example:
            >>> session = eval_session(config)  # doctest: +SKIP
            >>> store.save_run(session.payload(), {b: session.sorted_rows(b) for b in session.rows},
            ...                {"label": "nightly", "corpus_version": {"ebs": "ebs-suite@3f2a"}})  # doctest: +SKIP
            'run_3b9e204a'
        """
        meta = dict(meta or {})
        run_id = str(payload.get("run_id") or "")
        if not run_id:
            raise UsageError("save_run: the payload has no run_id; pass EvalSession.payload()")
        bench_payload: Mapping[str, Mapping[str, Any]] = payload.get("benchmarks") or {}
        bench_names = sorted({*bench_payload, *rows_by_benchmark})
        model_names = sorted({str(m) for b in bench_payload.values() for m in b}
                             | {str(r.get("model")) for rows in rows_by_benchmark.values() for r in rows})
        now = utcnow()
        headlines = meta.get("headline") or {}
        bench_rows = []
        for bench in bench_names:
            entries = bench_payload.get(bench, {})
            items = sum(_integer(e.get("items")) or 0 for e in entries.values()) if entries else None
            row_versions = {str(r["corpus_version"]) for r in rows_by_benchmark.get(bench, []) if r.get("corpus_version")}
            bench_rows.append({
                "run_id": run_id, "benchmark": bench,
                "corpus_version": _per_benchmark(meta.get("corpus_version"), bench)
                or (row_versions.pop() if len(row_versions) == 1 else None),
                "content_hash": _per_benchmark(meta.get("content_hash"), bench),
                "headline": list(headlines.get(bench) or _headline(bench, entries)),
                "total_items": items if items is not None else len(rows_by_benchmark.get(bench, [])),
            })
        versions = {r["corpus_version"] for r in bench_rows}
        hashes = {r["content_hash"] for r in bench_rows}
        metric_rows = []
        for bench, entries in bench_payload.items():
            for model, entry in entries.items():
                for metric, value in _metric_entries(entry):
                    ci = list(value.get("ci95") or [None, None]) + [None, None]
                    metric_rows.append({"run_id": run_id, "benchmark": bench, "model": str(model), "metric": metric,
                                        "value": _number(value.get("value")), "ci_lo": _number(ci[0]),
                                        "ci_hi": _number(ci[1]), "n": _integer(value.get("n"))})
        ibf_columns: dict[str, float | None] = {}
        ibf_models = bench_payload.get(IBF, {})
        if len(ibf_models) == 1:
            (entry,) = ibf_models.values()
            for name in IBF_DIMENSIONS + IBF_AGGREGATES:
                value = entry.get(name)
                ibf_columns[name] = _number(value.get("value") if isinstance(value, Mapping) else value)
        scored_at = meta.get("completed_at") or now
        response_rows = []
        for bench in bench_names:
            for row in rows_by_benchmark.get(bench, []):
                values = {k: v for k, v in row.items() if k not in ROW_COLUMNS}
                record = {
                    "run_id": run_id, "benchmark": bench, "model": str(row.get("model")),
                    "corpus_item_id": str(row.get("corpus_item_id") or row.get("case_id") or row.get("item_id")
                                          or row.get("nodeid") or ""),
                    "raw_response": row.get("raw_response", row.get("response_text")),
                    "metrics": _json_ready(values),
                    "response_time_s": _number(row.get("response_time_s")),
                    "prompt_tokens": _integer(row.get("prompt_tokens")),
                    "completion_tokens": _integer(row.get("completion_tokens")),
                    "est_cost_usd": _number(row.get("est_cost_usd")),
                    "cached": None if row.get("cached") is None else bool(row.get("cached")),
                    "scored_at": row.get("scored_at") or scored_at,
                }
                for name in IBF_DIMENSIONS:
                    record[name] = _integer(row.get(name)) if bench == IBF else None
                response_rows.append(record)
        ontology = payload.get("ontology_version")
        run = {
            "run_id": run_id,
            "model_id": None,
            "label": meta.get("label"),
            "benchmarks": bench_names,
            "models": model_names,
            "corpus_version": versions.pop() if len(versions) == 1 else None,
            "content_hash": hashes.pop() if len(hashes) == 1 else None,
            "ontology_version": ontology if isinstance(ontology, str) or ontology is None else json.dumps(ontology),
            "git_commit": meta.get("git_commit"),
            "status": meta.get("status") or "completed",
            "total_items": sum(r["total_items"] or 0 for r in bench_rows),
            "totals": _json_ready(meta.get("totals") or _totals(rows_by_benchmark)),
            "payload": _json_ready(payload),
            "created_at": payload.get("started_at") or now,
            "completed_at": meta.get("completed_at") or now,
            **ibf_columns,
        }
        try:
            with self.engine.begin() as conn:
                if conn.execute(sa.select(evaluations.c.run_id).where(evaluations.c.run_id == run_id)).first():
                    raise self._exists(run_id)
                if len(model_names) == 1:
                    run["model_id"] = conn.execute(sa.select(models.c.model_id).where(
                        models.c.name == model_names[0]).order_by(models.c.registered_at).limit(1)).scalar()
                conn.execute(evaluations.insert(), [run])
                conn.execute(evaluation_benchmarks.insert(), bench_rows)
                if metric_rows:
                    conn.execute(evaluation_metrics.insert(), metric_rows)
                if response_rows:
                    conn.execute(evaluation_responses.insert(), response_rows)
        except sa.exc.IntegrityError:  # a concurrent writer stored the same run id first
            if self._exists_in_db(run_id):
                raise self._exists(run_id) from None
            raise
        return run_id

    def _exists(self, run_id: str) -> UsageError:
        """The error for saving a run id twice."""
        return UsageError(f"run {run_id}: already in the store {self.url}; runs are immutable, "
                          "save the session under a new run id")

    def _exists_in_db(self, run_id: str) -> bool:
        """Whether the run id is stored."""
        with self.engine.connect() as conn:
            return conn.execute(sa.select(evaluations.c.run_id).where(evaluations.c.run_id == run_id)).first() is not None

    def _require(self, conn: Connection, run_ids: Sequence[str]) -> None:
        """A usage error naming the first run id that is not stored."""
        found = set(conn.execute(sa.select(evaluations.c.run_id).where(evaluations.c.run_id.in_(run_ids))).scalars())
        for run_id in run_ids:
            if run_id not in found:
                raise UsageError(f"run {run_id!r}: not in the store {self.url}; run `fieldeval runs list` for the ids")

    def _legacy_versions(self, conn: Connection) -> set[tuple[str, str]]:
        """(benchmark, corpus version) pairs superseded by a corpus version first stored later."""
        first_seen = (sa.select(evaluation_benchmarks.c.benchmark, evaluation_benchmarks.c.corpus_version,
                                sa.func.min(evaluations.c.created_at).label("first"))
                      .join(evaluations, evaluations.c.run_id == evaluation_benchmarks.c.run_id)
                      .where(evaluation_benchmarks.c.corpus_version.is_not(None))
                      .group_by(evaluation_benchmarks.c.benchmark, evaluation_benchmarks.c.corpus_version))
        newest: dict[str, tuple[datetime, str]] = {}
        pairs = conn.execute(first_seen).all()
        for bench, version, first in pairs:
            if bench not in newest or (first, version) > newest[bench]:
                newest[bench] = (first, version)
        return {(bench, version) for bench, version, _ in pairs if newest[bench][1] != version}

    def list_runs(self, benchmark: str | None = None, corpus_version: str | None = None) -> list[RunSummary]:
        """Stored runs, oldest first, optionally filtered.

        Args:
            benchmark: only runs that include this benchmark.
            corpus_version: only runs with a benchmark on this corpus or suite version.

        Returns:
            One summary per run; ``legacy`` marks runs on a superseded corpus version (a version is
            superseded once a run on a newer version of the same benchmark is stored: "newer" is the
            version whose first stored run is the latest).

        Example:
            >>> [r.run_id for r in store.list_runs(benchmark="ibf", corpus_version="ibf-v2.1")]  # doctest: +SKIP
            ['run_3b9e204a', 'run_9c1d88f0', 'run_0a7c553e']
        """
        with self.engine.connect() as conn:
            query = sa.select(evaluations).order_by(evaluations.c.created_at, evaluations.c.run_id)
            if benchmark or corpus_version:
                match = sa.select(evaluation_benchmarks.c.run_id)
                if benchmark:
                    match = match.where(evaluation_benchmarks.c.benchmark == benchmark)
                if corpus_version:
                    match = match.where(evaluation_benchmarks.c.corpus_version == corpus_version)
                query = query.where(evaluations.c.run_id.in_(match))
            runs = conn.execute(query).all()
            versions: dict[str, dict[str, str | None]] = {}
            for run_id, bench, version in conn.execute(sa.select(
                    evaluation_benchmarks.c.run_id, evaluation_benchmarks.c.benchmark,
                    evaluation_benchmarks.c.corpus_version).order_by(evaluation_benchmarks.c.benchmark)):
                versions.setdefault(run_id, {})[bench] = version
            legacy = self._legacy_versions(conn)
        return [RunSummary(
            run_id=run.run_id, label=run.label, benchmarks=list(run.benchmarks), models=list(run.models),
            corpus_versions=versions.get(run.run_id, {}), status=run.status, total_items=run.total_items,
            created_at=iso(run.created_at), completed_at=iso(run.completed_at),
            legacy=any((b, v) in legacy for b, v in versions.get(run.run_id, {}).items()),
        ) for run in runs]

    def get_run(self, run_id: str) -> dict[str, Any]:
        """Everything stored about one run except its responses.

        Args:
            run_id: a stored run id, e.g. ``run_3b9e204a``.

        Returns:
            The evaluations columns (times as ISO strings), ``corpus_versions`` and ``headline`` by
            benchmark, ``metrics`` as ``{bench: {model: {metric: {"value", "ci95", "n"}}}}``,
            ``responses`` (the count), ``legacy``, and the saved ``payload``.

        Raises:
            UsageError: the run id is not stored.

        Example:
            >>> store.get_run("run_3b9e204a")["metrics"]["ibf"]["phi-3-mini-4k"]["mean_dimension_score"]["value"]  # doctest: +SKIP
            2.6
        """
        with self.engine.connect() as conn:
            self._require(conn, [run_id])
            run = conn.execute(sa.select(evaluations).where(evaluations.c.run_id == run_id)).one()._asdict()
            benches = conn.execute(sa.select(evaluation_benchmarks).where(
                evaluation_benchmarks.c.run_id == run_id).order_by(evaluation_benchmarks.c.benchmark)).all()
            metric_rows = conn.execute(sa.select(evaluation_metrics).where(evaluation_metrics.c.run_id == run_id)
                                       .order_by(evaluation_metrics.c.benchmark, evaluation_metrics.c.model)).all()
            run["responses"] = conn.execute(sa.select(sa.func.count()).select_from(evaluation_responses).where(
                evaluation_responses.c.run_id == run_id)).scalar_one()
            legacy = self._legacy_versions(conn)
        run["created_at"], run["completed_at"] = iso(run["created_at"]), iso(run["completed_at"])
        run["corpus_versions"] = {b.benchmark: b.corpus_version for b in benches}
        run["content_hashes"] = {b.benchmark: b.content_hash for b in benches}
        run["headline"] = {b.benchmark: list(b.headline) for b in benches}
        run["legacy"] = any((b.benchmark, b.corpus_version) in legacy for b in benches)
        metrics: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
        for m in metric_rows:
            metrics.setdefault(m.benchmark, {}).setdefault(m.model, {})[m.metric] = {
                "value": m.value, "ci95": [m.ci_lo, m.ci_hi], "n": m.n}
        run["metrics"] = metrics
        return run

    def responses(self, run_id: str, *, benchmark: str | None = None, model: str | None = None) -> list[dict[str, Any]]:
        """A run's per-item responses, in the order they were saved.

        Args:
            run_id: a stored run id.
            benchmark: only this benchmark's items.
            model: only this model's items.

        Returns:
            One dict per item: the evaluation_responses columns, ``scored_at`` as an ISO string.

        Raises:
            UsageError: the run id is not stored.

        Example:
            >>> store.responses("run_3b9e204a", model="phi-3-mini-4k")[0]["corpus_item_id"]  # doctest: +SKIP
            'ci_0814'
        """
        with self.engine.connect() as conn:
            self._require(conn, [run_id])
            query = sa.select(evaluation_responses).where(evaluation_responses.c.run_id == run_id)
            if benchmark:
                query = query.where(evaluation_responses.c.benchmark == benchmark)
            if model:
                query = query.where(evaluation_responses.c.model == model)
            rows = conn.execute(query.order_by(evaluation_responses.c.response_id)).all()
        out = []
        for row in rows:
            data = row._asdict()
            data["scored_at"] = iso(data["scored_at"])
            out.append(data)
        return out

    def compare(self, run_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
        """The side-by-side payload of the seed's ``GET /api/evaluations/compare``, for every benchmark.

        Args:
            run_ids: stored run ids, in the order to show them.

        Returns:
            ``{"runs": [entry, ...]}`` with one entry per (run, model): ``run_id``, ``model_name``,
            ``label``, ``corpus_version``, ``benchmarks`` (``{bench: {headline metric: value}}``); for
            IBF also the seed's ``mean_dimension_score``, ``threshold_pass_rate`` and ``scores`` (the
            five dimensions); ``"legacy": true`` when the run used a superseded corpus version.

        Raises:
            UsageError: no run ids, or a run id that is not stored.

        Example:
            >>> store.compare(["run_3b9e204a", "run_9c1d88f0"])["runs"][1]["mean_dimension_score"]  # doctest: +SKIP
            3.21
        """
        run_ids = list(dict.fromkeys(run_ids))
        if not run_ids:
            raise UsageError("runs compare: no run ids; pass two or more ids from `fieldeval runs list`")
        with self.engine.connect() as conn:
            self._require(conn, run_ids)
            runs = {r.run_id: r for r in conn.execute(sa.select(evaluations.c.run_id, evaluations.c.label,
                                                                evaluations.c.models)
                                                      .where(evaluations.c.run_id.in_(run_ids)))}
            benches = conn.execute(sa.select(evaluation_benchmarks).where(
                evaluation_benchmarks.c.run_id.in_(run_ids)).order_by(evaluation_benchmarks.c.benchmark)).all()
            values = conn.execute(sa.select(evaluation_metrics.c.run_id, evaluation_metrics.c.benchmark,
                                            evaluation_metrics.c.model, evaluation_metrics.c.metric,
                                            evaluation_metrics.c.value)
                                  .where(evaluation_metrics.c.run_id.in_(run_ids))).all()
            legacy = self._legacy_versions(conn)
        metric: dict[tuple[str, str, str], dict[str, float | None]] = {}
        for run_id, bench, model, name, value in values:
            metric.setdefault((run_id, bench, model), {})[name] = value
        out = []
        for run_id in run_ids:
            run_benches = [b for b in benches if b.run_id == run_id]
            versions = {b.corpus_version for b in run_benches}
            models_in_run = list(runs[run_id].models) or sorted({m for r, _, m in metric if r == run_id})
            for model in models_in_run:
                entry: dict[str, Any] = {"run_id": run_id, "model_name": model}
                ibf = metric.get((run_id, IBF, model))
                if ibf is not None:
                    entry["mean_dimension_score"] = ibf.get("mean_dimension_score")
                    entry["threshold_pass_rate"] = ibf.get("threshold_pass_rate")
                    entry["scores"] = {name: ibf.get(name) for name in IBF_DIMENSIONS}
                entry["label"] = runs[run_id].label
                entry["corpus_version"] = versions.pop() if len(versions) == 1 else {
                    b.benchmark: b.corpus_version for b in run_benches}
                entry["benchmarks"] = {
                    b.benchmark: {name: metric.get((run_id, b.benchmark, model), {}).get(name) for name in b.headline}
                    for b in run_benches if (run_id, b.benchmark, model) in metric}
                if any((b.benchmark, b.corpus_version) in legacy for b in run_benches):
                    entry["legacy"] = True
                out.append(entry)
        return {"runs": out}

    def delete_run(self, run_id: str) -> int:
        """Hard-delete a run and everything stored with it.

        Args:
            run_id: a stored run id.

        Returns:
            The number of responses deleted with it.

        Raises:
            UsageError: the run id is not stored.

        Example:
            >>> store.delete_run("run_0a7c553e")  # doctest: +SKIP
            340
        """
        with self.engine.begin() as conn:
            self._require(conn, [run_id])
            deleted = conn.execute(evaluation_responses.delete().where(evaluation_responses.c.run_id == run_id)).rowcount
            for table in (evaluation_metrics, evaluation_benchmarks, evaluations):
                conn.execute(table.delete().where(table.c.run_id == run_id))
        return deleted
