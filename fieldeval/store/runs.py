"""Runs in the store: save one immutable run, list, show, read its responses, delete it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from fieldeval.benchmark import StoreColumns
from fieldeval.errors import UsageError
from fieldeval.run.totals import shown
from fieldeval.store.payload import FlatRun, flatten_run, metric_entries
from fieldeval.store.schema import Tables, iso
from fieldeval.store.sql import insert_responses

if TYPE_CHECKING:
    from fieldeval.store.stage import ResponseStage


class RunExists(UsageError):
    """A run of that id is in the store already (runs are immutable)."""


@dataclass(frozen=True)
class RunSummary:
    """One stored run, as ``runs list`` shows it.

    Attributes:
        run_id: ``run_`` and 8 hex digits.
        label: the human-readable run tag.
        benchmarks: benchmark names in the run.
        models: model names in the run.
        corpus_versions: corpus or suite version per benchmark.
        status: ``completed`` (every planned item ran) or ``interrupted``.
        total_items: items evaluated, errors included.
        items_planned: items the session planned; None for runs stored before it was recorded.
        items_done: items that ran (errored ones included); None for older runs.
        items_errored: items that ended in an error; None for older runs.
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
    items_planned: int | None = None
    items_done: int | None = None
    items_errored: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """The summary as a JSON-ready dict."""
        return asdict(self)


INSERT_BATCH = 1_000  # response rows per executemany (100,000 rows: as fast as 5,000 a time, 4 MB held instead of 19)


def row_runs(conn: Connection, tables: Tables, run_id: str) -> list[str]:
    """The runs whose stored rows are this run's: its shards for a merged run that refers to them, else itself."""
    t = tables.evaluations
    found = conn.execute(sa.select(t.c.shard_index, t.c.run_group, t.c.payload).where(t.c.run_id == run_id)).first()
    if found is None or found.shard_index is not None or not found.run_group:
        return [run_id]
    group = (found.payload or {}).get("run_group") or {}
    return list(group["shards"]) if group.get("rows") == "shards" and group.get("shards") else [run_id]


def require_runs(conn: Connection, tables: Tables, run_ids: Sequence[str], url: str) -> None:
    """A usage error naming the first run id that is not stored."""
    evaluations = tables.evaluations
    found = set(conn.execute(sa.select(evaluations.c.run_id).where(evaluations.c.run_id.in_(run_ids))).scalars())
    for run_id in run_ids:
        if run_id not in found:
            raise UsageError(f"run {run_id!r}: not in the store {url}; run `fieldeval runs list` for the ids")


def legacy_versions(conn: Connection, tables: Tables) -> set[tuple[str, str]]:
    """(benchmark, corpus version) pairs superseded by a corpus version first stored later."""
    benches, evaluations = tables.evaluation_benchmarks, tables.evaluations
    first_seen = (sa.select(benches.c.benchmark, benches.c.corpus_version,
                            sa.func.min(evaluations.c.created_at).label("first"))
                  .join(evaluations, evaluations.c.run_id == benches.c.run_id)
                  .where(benches.c.corpus_version.is_not(None))
                  .group_by(benches.c.benchmark, benches.c.corpus_version))
    newest: dict[str, tuple[datetime, str]] = {}
    pairs = conn.execute(first_seen).all()
    for bench, version, first in pairs:
        if bench not in newest or (first, version) > newest[bench]:
            newest[bench] = (first, version)
    return {(bench, version) for bench, version, _ in pairs if newest[bench][1] != version}


class RunStore:
    """The :class:`~fieldeval.store.Store` methods on runs."""

    engine: Engine
    tables: Tables
    url: str
    columns: Mapping[str, StoreColumns]

    def save_run(
        self,
        payload: Mapping[str, Any],
        rows_by_benchmark: Mapping[str, Sequence[Mapping[str, Any]]],
        meta: Mapping[str, Any] | None = None,
        staged: ResponseStage | None = None,
    ) -> str:
        """Store one eval session as an immutable run, in one transaction.

        Args:
            payload: ``EvalSession.payload()``: ``{"run_id", "started_at", "ontology_version",
                "benchmarks": {bench: {model: {metric: {"value", "ci95", "n"}, "items", "errors", ...}}}}``.
            rows_by_benchmark: ``{bench: EvalSession.sorted_rows(bench)}``; each row has ``model``,
                ``case_id``, ``response_text``, the cost columns and its metric values.
            meta: optional ``label``, ``corpus_version`` and ``content_hash`` (a string, or a dict by
                benchmark; the corpus version defaults to the rows' ``corpus_version`` when they share one),
                ``git_commit``, ``status`` (default ``completed``), ``completed_at`` (default now), ``totals``
                (default: per-model sums of the rows), ``headline`` (``{bench: [metric, ...]}``, default: the
                benchmark module's HEADLINE), and for a shard of a sharded run ``run_group``, ``shard_index``,
                ``shard_count``, ``settings`` and ``settings_hash`` (see :mod:`fieldeval.store.groups`).

        Returns:
            The run id. The benchmark-specific columns the store was opened with are filled too: a
            benchmark's ``run`` columns when it ran one model, its ``response`` columns on every row.

        Raises:
            UsageError: the payload has no run id, or the run id is already stored (runs are immutable).

        Example:
            >>> session = eval_session(config)  # doctest: +SKIP
            >>> store.save_run(session.payload(), {b: session.sorted_rows(b) for b in session.rows()},
            ...                {"label": "nightly", "corpus_version": {"ebs": "ebs-suite@3f2a"}})  # doctest: +SKIP
            'run_3b9e204a'
        """
        return self.save_flat(flatten_run(payload, rows_by_benchmark, meta or {}, self.columns), rows_by_benchmark,
                              meta, staged)

    def save_flat(self, flat: FlatRun, rows_by_benchmark: Mapping[str, Sequence[Mapping[str, Any]]],
                  meta: Mapping[str, Any] | None = None, staged: ResponseStage | None = None, *,
                  replaces: str | None = None, lease: str | None = None) -> str:
        """The second half of :meth:`save_run`: store a run whose table rows are built already (``flat``, from
        :func:`~fieldeval.store.payload.flatten_run` with this store's columns), in one transaction. With
        ``replaces`` (a resumed run, under its own id), that run is deleted in the same transaction, which
        ``lease`` (its holder, :meth:`take_lease`) must still hold; the lease goes with it."""
        if (meta or {}).get("rows_from"):  # a merged run's responses are its shards' rows: nothing is copied
            staged = None
        staged = self._usable(staged, flat.run_id, {name: len(rows) for name, rows in rows_by_benchmark.items()})
        return self._save(flat.run_id, flat.scored_at, lambda: flat, meta, staged, replaces=replaces, lease=lease)

    def save_staged(self, staged: ResponseStage, run_id: str, scored_at: Any, counts: Mapping[str, int],
                    build: Callable[[], FlatRun]) -> str:
        """Store a session's run whose responses ``staged`` holds (``counts`` of them by benchmark), as
        :meth:`save_flat` stores ``build()``, in one transaction that copies the responses first: a session starts
        it in a thread of its own as it ends, and the copy runs while ``build`` still waits for the session's
        aggregates. A stage that does not hold the run's rows is not used (``build()``'s rows are inserted)."""
        return self._save(run_id, scored_at, build, None, self._usable(staged, run_id, counts))

    def _usable(self, staged: ResponseStage | None, run_id: str, counts: Mapping[str, int]) -> ResponseStage | None:
        """``staged`` when this store can copy from it (a SQLite file) and it holds exactly the run's rows, ``counts``
        of them by benchmark; else None (the run's rows are inserted)."""
        if staged is not None and self.engine.dialect.name == "sqlite" and staged.holds(run_id, counts):
            return staged
        return None

    def _save(self, run_id: str, scored_at: Any, build: Callable[[], FlatRun], meta: Mapping[str, Any] | None,
              staged: ResponseStage | None, *, replaces: str | None = None, lease: str | None = None) -> str:
        """One run in one transaction: the staged responses first (their run's row comes later: foreign keys are
        checked at the commit), then ``build()``'s rows. ``meta``: :meth:`save_run`'s (``rows_from``); ``replaces``
        and ``lease``: :meth:`save_flat`'s."""
        t = self.tables
        try:
            with self.engine.connect() as conn, \
                    staged.attached(conn) if staged else contextlib.nullcontext(False) as copy_staged, conn.begin():
                if replaces is not None:
                    self._replace_run(conn, replaces, lease)
                if conn.execute(sa.select(t.evaluations.c.run_id).where(t.evaluations.c.run_id == run_id)).first():
                    raise self._exists(run_id)
                if copy_staged:
                    conn.exec_driver_sql("PRAGMA defer_foreign_keys = ON")  # until this transaction's end
                    staged.copy_into(conn, t.evaluation_responses, scored_at)
                flat = build()
                run = dict(flat.run)
                if len(run["models"]) == 1:
                    run["model_id"] = conn.execute(sa.select(t.models.c.model_id).where(
                        t.models.c.name == run["models"][0]).order_by(t.models.c.registered_at).limit(1)).scalar()
                conn.execute(t.evaluations.insert(), [run])
                conn.execute(t.evaluation_benchmarks.insert(), flat.benchmarks)
                if flat.metrics:
                    conn.execute(t.evaluation_metrics.insert(), flat.metrics)
                if not copy_staged and flat.responses and not (meta or {}).get("rows_from"):
                    insert_responses(conn, t.evaluation_responses, flat.responses.batches(INSERT_BATCH))
                if flat.errors:
                    conn.execute(t.evaluation_errors.insert(), flat.errors)
        except sa.exc.IntegrityError:  # a concurrent writer stored the same run id first
            with self.engine.connect() as conn:
                stored = conn.execute(sa.select(t.evaluations.c.run_id).where(
                    t.evaluations.c.run_id == run_id)).first()
            if stored:
                raise self._exists(run_id) from None
            raise
        return run_id

    def _exists(self, run_id: str) -> UsageError:
        """The error for saving a run id twice."""
        return RunExists(f"run {run_id}: already in the store {self.url}; runs are immutable, "
                          "save the session under a new run id")

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
        evaluations, benches = self.tables.evaluations, self.tables.evaluation_benchmarks
        with self.engine.connect() as conn:
            query = sa.select(evaluations).order_by(evaluations.c.created_at, evaluations.c.run_id)
            if benchmark or corpus_version:
                match = sa.select(benches.c.run_id)
                if benchmark:
                    match = match.where(benches.c.benchmark == benchmark)
                if corpus_version:
                    match = match.where(benches.c.corpus_version == corpus_version)
                query = query.where(evaluations.c.run_id.in_(match))
            runs = conn.execute(query).all()
            versions: dict[str, dict[str, str | None]] = {}
            for run_id, bench, version in conn.execute(sa.select(
                    benches.c.run_id, benches.c.benchmark, benches.c.corpus_version).order_by(benches.c.benchmark)):
                versions.setdefault(run_id, {})[bench] = version
            legacy = legacy_versions(conn, self.tables)
        return [RunSummary(
            run_id=run.run_id, label=run.label, benchmarks=list(run.benchmarks), models=list(run.models),
            corpus_versions=versions.get(run.run_id, {}), status=run.status, total_items=run.total_items,
            created_at=iso(run.created_at), completed_at=iso(run.completed_at),
            legacy=any((b, v) in legacy for b, v in versions.get(run.run_id, {}).items()),
            items_planned=run.items_planned, items_done=run.items_done, items_errored=run.items_errored,
        ) for run in runs]

    def get_run(self, run_id: str) -> dict[str, Any]:
        """Everything stored about one run except its responses.

        Args:
            run_id: a stored run id, e.g. ``run_3b9e204a``.

        Returns:
            The evaluations columns (times as ISO strings), ``corpus_versions`` and ``headline`` by
            benchmark, ``metrics`` as ``{bench: {model: {metric: {"value", "ci95", "n", "n_clusters"}}}}`` (plus
            ``ci95_within`` where the saved report has it),
            ``responses`` (the count), ``errors`` (``[{"benchmark", "model", "item_id", "error_class",
            "message"}]``, in the order saved), ``legacy``, and the saved ``payload``.

        Raises:
            UsageError: the run id is not stored.

        Example:
            >>> store.get_run("run_3b9e204a")["metrics"]["ibf"]["phi-3-mini-4k"]["mean_dimension_score"]["value"]  # doctest: +SKIP
            2.6
        """
        t = self.tables
        with self.engine.connect() as conn:
            require_runs(conn, t, [run_id], self.url)
            run = conn.execute(sa.select(t.evaluations).where(t.evaluations.c.run_id == run_id)).one()._asdict()
            benches = conn.execute(sa.select(t.evaluation_benchmarks).where(
                t.evaluation_benchmarks.c.run_id == run_id).order_by(t.evaluation_benchmarks.c.benchmark)).all()
            metric_rows = conn.execute(sa.select(t.evaluation_metrics).where(t.evaluation_metrics.c.run_id == run_id)
                                       .order_by(t.evaluation_metrics.c.benchmark, t.evaluation_metrics.c.model)).all()
            run["responses"] = conn.execute(sa.select(sa.func.count()).select_from(t.evaluation_responses).where(
                t.evaluation_responses.c.run_id.in_(row_runs(conn, t, run_id)))).scalar_one()
            errors = conn.execute(sa.select(t.evaluation_errors.c.benchmark, t.evaluation_errors.c.model,
                                            t.evaluation_errors.c.item_id, t.evaluation_errors.c.error_class,
                                            t.evaluation_errors.c.message)
                                  .where(t.evaluation_errors.c.run_id == run_id)
                                  .order_by(t.evaluation_errors.c.error_id)).all()
            legacy = legacy_versions(conn, t)
        run["errors"] = [error._asdict() for error in errors]
        run["created_at"], run["completed_at"] = iso(run["created_at"]), iso(run["completed_at"])
        run["corpus_versions"] = {b.benchmark: b.corpus_version for b in benches}
        run["content_hashes"] = {b.benchmark: b.content_hash for b in benches}
        run["headline"] = {b.benchmark: list(b.headline) for b in benches}
        run["legacy"] = any((b.benchmark, b.corpus_version) in legacy for b in benches)
        metrics: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
        for m in metric_rows:
            metrics.setdefault(m.benchmark, {}).setdefault(m.model, {})[m.metric] = {
                "value": m.value, "ci95": [m.ci_lo, m.ci_hi], "n": m.n, "n_clusters": None}
        for bench, entries in ((run.get("payload") or {}).get("benchmarks") or {}).items():
            for model, entry in entries.items():
                for name, value in metric_entries(entry):  # n_clusters and ci95_within live in the saved payload
                    if name in metrics.get(bench, {}).get(model, {}):
                        metrics[bench][model][name]["n_clusters"] = value.get("n_clusters")
                        if value.get("ci95_within") is not None:
                            metrics[bench][model][name]["ci95_within"] = list(value["ci95_within"])
        run["metrics"] = metrics
        if run.get("totals"):  # kept in full precision, shown as the report shows it
            run["totals"] = {model: shown(total) for model, total in run["totals"].items()}
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
        responses = self.tables.evaluation_responses
        with self.engine.connect() as conn:
            require_runs(conn, self.tables, [run_id], self.url)
            sources = row_runs(conn, self.tables, run_id)
            query = sa.select(responses).where(responses.c.run_id.in_(sources))
            if benchmark:
                query = query.where(responses.c.benchmark == benchmark)
            if model:
                query = query.where(responses.c.model == model)
            rows = conn.execute(query.order_by(responses.c.response_id)).all()
        if sources != [run_id]:  # a merged run's rows are its shards', shard by shard, under its own id
            order = {source: position for position, source in enumerate(sources)}
            rows = sorted(rows, key=lambda row: order[row.run_id])
            return [{**row._asdict(), "run_id": run_id, "scored_at": iso(row.scored_at)} for row in rows]
        return [{**row._asdict(), "scored_at": iso(row.scored_at)} for row in rows]

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
            return self._delete_run(conn, run_id)

    def _delete_run(self, conn: Connection, run_id: str) -> int:
        """:meth:`delete_run` inside the caller's transaction."""
        t = self.tables
        require_runs(conn, t, [run_id], self.url)
        shard = conn.execute(sa.select(t.evaluations.c.run_group, t.evaluations.c.shard_index).where(
            t.evaluations.c.run_id == run_id)).one()
        if shard.shard_index is not None and shard.run_group:
            for merged_id, in conn.execute(sa.select(t.evaluations.c.run_id).where(
                    t.evaluations.c.run_group == shard.run_group, t.evaluations.c.shard_index.is_(None))):
                if run_id in row_runs(conn, t, merged_id) and merged_id != run_id:
                    raise UsageError(f"run {run_id}: shard {shard.shard_index} of the merged run {merged_id}, "
                                     f"which reads its rows; `fieldeval runs delete {merged_id}` first")
        deleted = conn.execute(t.evaluation_responses.delete().where(
            t.evaluation_responses.c.run_id == run_id)).rowcount
        for table in (t.evaluation_errors, t.evaluation_metrics, t.evaluation_benchmarks, t.evaluations):
            conn.execute(table.delete().where(table.c.run_id == run_id))
        return deleted

    def _replace_run(self, conn: Connection, run_id: str, lease: str | None) -> None:
        """Delete the run a resumed session completes, in the caller's transaction, while ``lease`` still holds it."""
        t = self.tables
        held = conn.execute(sa.select(t.run_leases.c.holder).where(t.run_leases.c.run_id == run_id)).scalar()
        if lease is not None and held != lease:
            raise UsageError(f"run {run_id}: its resume lease is no longer this session's ({held or 'none'}); the "
                             "stored run is left as it was")
        self._delete_run(conn, run_id)
        conn.execute(t.run_leases.delete().where(t.run_leases.c.run_id == run_id))

    def take_lease(self, run_id: str, holder: str) -> None:
        """Hold ``run_id`` for one resuming session (``holder``: host and process); a usage error while another
        live session holds it. A lease whose process on this host is gone is taken over."""
        from fieldeval.store.schema import utcnow

        t = self.tables.run_leases
        for _ in range(2):
            try:
                with self.engine.begin() as conn:
                    conn.execute(t.insert().values(run_id=run_id, holder=holder, taken_at=utcnow()))
                return
            except sa.exc.IntegrityError:
                with self.engine.begin() as conn:
                    found = conn.execute(sa.select(t.c.holder, t.c.taken_at).where(t.c.run_id == run_id)).first()
                    if found is None:
                        continue
                    if not _alive(found.holder):
                        conn.execute(t.delete().where(t.c.run_id == run_id, t.c.holder == found.holder))
                        continue
                raise UsageError(f"--resume {run_id}: another session is resuming it ({found.holder}, since "
                                 f"{iso(found.taken_at)}); wait for it to end") from None
        raise UsageError(f"--resume {run_id}: could not take its lease; try again")

    def release_lease(self, run_id: str, holder: str) -> None:
        """Let go of ``run_id``'s lease, if ``holder`` still holds it."""
        t = self.tables.run_leases
        with self.engine.begin() as conn:
            conn.execute(t.delete().where(t.c.run_id == run_id, t.c.holder == holder))


def _alive(holder: str) -> bool:
    """Whether a lease's holder (``host:pid``) may still be running: any other host's, or a live process here."""
    import os
    import socket

    host, _, pid = holder.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
