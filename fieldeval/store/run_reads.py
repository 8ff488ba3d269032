"""Runs in the store, read: the list, one run's record, its responses, and which stored runs hold a run's rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from fieldeval.errors import UsageError
from fieldeval.run.totals import shown
from fieldeval.store.payload import metric_entries
from fieldeval.store.schema import Tables, iso


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
        unverified: pushed with ``runs push --unverified`` (kept by an older fieldeval, without digests).
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
    unverified: bool = False  # pushed without the digests that check a kept run (runs push --unverified)

    def as_dict(self) -> dict[str, Any]:
        """The summary as a JSON-ready dict."""
        return asdict(self)


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


class RunReads:
    """The :class:`~fieldeval.store.Store` methods that read runs."""

    engine: Engine
    tables: Tables
    url: str

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
            unverified=bool(getattr(run, "unverified", None)),
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
