"""Runs in the store: save one immutable run, delete it (:class:`RunStore`, which also reads runs and holds leases)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from fieldeval.benchmark import StoreColumns
from fieldeval.errors import UsageError
from fieldeval.store.leases import RunLeases
from fieldeval.store.payload import FlatRun, flatten_run
from fieldeval.store.run_reads import RunReads, require_runs, row_runs
from fieldeval.store.schema import Tables
from fieldeval.store.sql import insert_responses

if TYPE_CHECKING:
    from fieldeval.store.stage import ResponseStage


class RunExists(UsageError):
    """A run of that id is in the store already (runs are immutable)."""


INSERT_BATCH = 1_000  # response rows per executemany (100,000 rows: as fast as 5,000 a time, 4 MB held instead of 19)


class RunStore(RunReads, RunLeases):
    """The :class:`~fieldeval.store.Store` methods on runs: save and delete here, list, show and read in
    :class:`~fieldeval.store.run_reads.RunReads`, resume leases in :class:`~fieldeval.store.leases.RunLeases`."""

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
        self.require_writable()
        return self.save_flat(flatten_run(payload, rows_by_benchmark, meta or {}, self.columns), rows_by_benchmark,
                              meta, staged)

    def save_flat(self, flat: FlatRun, rows_by_benchmark: Mapping[str, Sequence[Mapping[str, Any]]],
                  meta: Mapping[str, Any] | None = None, staged: ResponseStage | None = None, *,
                  replaces: str | None = None, lease: str | None = None) -> str:
        """The second half of :meth:`save_run`: store a run whose table rows are built already (``flat``, from
        :func:`~fieldeval.store.payload.flatten_run` with this store's columns), in one transaction. With
        ``replaces`` (a resumed run, under its own id), that run is deleted in the same transaction, which
        ``lease`` (its holder, :meth:`take_lease`) must still hold; the lease goes with it."""
        self.require_writable()
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
        self.require_writable()
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
        self.require_writable()
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
