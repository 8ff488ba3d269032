"""The seed's side-by-side payload, ``GET /api/evaluations/compare``, for every benchmark."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from fieldeval.benchmark import StoreColumns
from fieldeval.errors import UsageError
from fieldeval.stats import DEFAULT_RESAMPLES, DEFAULT_SEED
from fieldeval.store.run_reads import legacy_versions, require_runs
from fieldeval.store.schema import Tables


def declared_keys(declared: StoreColumns, values: Mapping[str, float | None]) -> dict[str, Any]:
    """A benchmark's declared columns as the seed shows them: per-item scores under ``scores``, aggregates beside it.

    A ``run`` column that is also a ``response`` column is the run-level mean of an item score (the
    IBF seed's five dimensions); the other ``run`` columns are aggregates (``mean_dimension_score``).
    """
    keys: dict[str, Any] = {name: values.get(name) for name in declared.run if name not in declared.response}
    scores = {name: values.get(name) for name in declared.run if name in declared.response}
    if scores:
        keys["scores"] = scores
    return keys


class PartialRunError(UsageError):
    """A run to compare did not complete every planned item (the service answers 409)."""


def partial_note(run_id: str, status: str, done: int | None, planned: int | None, errored: int | None) -> str:
    """``run run_x is interrupted (12 of 340 items done, 3 errored)``."""
    counts = []
    if planned is not None:
        counts.append(f"{'?' if done is None else done} of {planned} items done")
    if errored:
        counts.append(f"{errored} errored")
    return f"run {run_id} is {status}" + (f" ({', '.join(counts)})" if counts else "")


class Compare:
    """The :class:`~fieldeval.store.Store` method that puts runs side by side."""

    engine: Engine
    tables: Tables
    url: str
    columns: Mapping[str, StoreColumns]

    def run_rows(self, run_id: str) -> dict[str, list[dict[str, Any]]]:
        """A stored run's recorded rows by benchmark, as the session recorded them (``metrics`` + ``row_extra``)."""
        t = self.tables
        with self.engine.connect() as conn:
            require_runs(conn, t, [run_id], self.url)
            query = (sa.select(t.evaluation_responses.c.benchmark, t.evaluation_responses.c.model,
                               t.evaluation_responses.c.corpus_item_id, t.evaluation_responses.c.metrics,
                               t.evaluation_responses.c.row_extra)
                     .where(t.evaluation_responses.c.run_id == run_id).order_by(t.evaluation_responses.c.response_id))
            found = conn.execute(query).all()
        rows: dict[str, list[dict[str, Any]]] = {}
        for bench, model, item, metrics, extra in found:
            row = {"model": model, "nodeid": item, **(metrics or {}), **(extra or {})}
            rows.setdefault(bench, []).append(row)
        return rows

    def run_settings(self, run_id: str) -> dict[str, Any]:
        """The settings a run was stored with (seed, resamples, cluster_by, ...), ``{}`` for older runs."""
        t = self.tables.evaluations
        with self.engine.connect() as conn:
            require_runs(conn, self.tables, [run_id], self.url)
            return dict(conn.execute(sa.select(t.c.settings).where(t.c.run_id == run_id)).scalar_one() or {})

    def check_scoring_rules(self, run_ids: Sequence[str], *, allow_mixed: bool = False) -> None:
        """A usage error when two of the runs scored a benchmark they share under different scoring rules (options
        declared ``scoring_rule``, e.g. ``--ebs-truth``; a run stored without one used its default), unless
        ``allow_mixed``."""
        from fieldeval.benchmark import benchmarks

        if allow_mixed:
            return
        t = self.tables.evaluation_benchmarks
        with self.engine.connect() as conn:
            require_runs(conn, self.tables, list(run_ids), self.url)
            held = conn.execute(sa.select(t.c.run_id, t.c.benchmark).where(t.c.run_id.in_(list(run_ids)))).all()
        seen: dict[tuple[str, str], tuple[str, Any]] = {}  # (benchmark, flag) -> (first run, its value)
        for run_id in dict.fromkeys(run_ids):
            stored = (self.run_settings(run_id).get("benchmark_options") or {})
            for bench in sorted({b for r, b in held if r == run_id} & set(benchmarks())):
                for f in benchmarks()[bench].option_fields():
                    if not f.metadata.get("scoring_rule"):
                        continue
                    value = (stored.get(bench) or {}).get(f.name, f.default)
                    first, before = seen.setdefault((bench, f.metadata["flag"]), (run_id, value))
                    if value != before:
                        flag = f.metadata["flag"]
                        raise UsageError(f"runs compare: {first} scored {bench} with {flag} {before}, {run_id} with "
                                         f"{flag} {value}; their scores mean different things: compare runs scored "
                                         "under one rule, or pass --allow-mixed-rules")

    def differences(self, base_run: str, run_ids: Sequence[str], *, cluster_by: str | None = None,
                    seed: int | None = None, resamples: int | None = None) -> dict[str, list]:
        """Each run's paired differences against ``base_run`` (see :func:`fieldeval.stats.paired.differences`).

        The seed, resamples and clustering default to the base run's settings.

        Returns:
            ``{"differences": [...], "notes": [one line per pairing that shares no or only some items]}``;
            each difference's ``p_holm`` is adjusted over all of them (one family).
        """
        from fieldeval.stats.paired import adjust, differences

        settings = self.run_settings(base_run)
        base_rows = self.run_rows(base_run)
        out: list[dict[str, Any]] = []
        notes: list[str] = []
        for run_id in run_ids:
            if run_id == base_run:
                continue
            diffs, lines = differences(
                base_run, base_rows, run_id, self.run_rows(run_id),
                seed=seed if seed is not None else int(settings.get("seed") or DEFAULT_SEED),
                resamples=resamples if resamples is not None else int(settings.get("resamples") or DEFAULT_RESAMPLES),
                cluster_by=cluster_by or settings.get("cluster_by") or "benchmark")
            out += diffs
            notes += lines
        return {"differences": adjust(out), "notes": notes}

    def compare(self, run_ids: Sequence[str], *, allow_partial: bool = False) -> dict[str, list[dict[str, Any]]]:
        """The side-by-side payload of the seed's ``GET /api/evaluations/compare``, for every benchmark.

        Args:
            run_ids: stored run ids, in the order to show them.
            allow_partial: compare runs that are not ``completed`` too (their metrics cover only the
                items that ran); their entries then carry ``"status"`` (e.g. ``"interrupted"``).

        Returns:
            ``{"runs": [entry, ...]}`` with one entry per (run, model): ``run_id``, ``model_name``,
            ``label``, ``corpus_version``, ``benchmarks`` (``{bench: {headline metric: value}}``); for
            a benchmark the store was opened with columns for, also those columns (see
            :func:`declared_keys`: for IBF the seed's ``mean_dimension_score``, ``threshold_pass_rate``
            and ``scores``); ``"legacy": true`` when the run used a superseded corpus version.

        Raises:
            UsageError: no run ids, or a run id that is not stored.
            PartialRunError: a run is not ``completed`` and ``allow_partial`` is False.

        Example:
            >>> store.compare(["run_3b9e204a", "run_9c1d88f0"])["runs"][1]["mean_dimension_score"]  # doctest: +SKIP
            3.21
        """
        run_ids = list(dict.fromkeys(run_ids))
        if not run_ids:
            raise UsageError("runs compare: no run ids; pass two or more ids from `fieldeval runs list`")
        t = self.tables
        with self.engine.connect() as conn:
            require_runs(conn, t, run_ids, self.url)
            e = t.evaluations
            runs = {r.run_id: r for r in conn.execute(sa.select(e.c.run_id, e.c.label, e.c.models, e.c.status,
                                                                e.c.items_done, e.c.items_planned, e.c.items_errored)
                                                      .where(e.c.run_id.in_(run_ids)))}
            for run_id in run_ids:
                run = runs[run_id]
                if run.status != "completed" and not allow_partial:
                    raise PartialRunError(
                        partial_note(run_id, run.status, run.items_done, run.items_planned, run.items_errored)
                        + ": its metrics cover only the items that ran; compare completed runs, or pass "
                        "--allow-partial (allow_partial=true over HTTP) to compare it marked as partial")
            benches = conn.execute(sa.select(t.evaluation_benchmarks).where(
                t.evaluation_benchmarks.c.run_id.in_(run_ids)).order_by(t.evaluation_benchmarks.c.benchmark)).all()
            values = conn.execute(sa.select(t.evaluation_metrics.c.run_id, t.evaluation_metrics.c.benchmark,
                                            t.evaluation_metrics.c.model, t.evaluation_metrics.c.metric,
                                            t.evaluation_metrics.c.value)
                                  .where(t.evaluation_metrics.c.run_id.in_(run_ids))).all()
            legacy = legacy_versions(conn, t)
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
                for bench, declared in sorted(self.columns.items()):
                    if (run_id, bench, model) in metric:
                        entry.update(declared_keys(declared, metric[(run_id, bench, model)]))
                entry["label"] = runs[run_id].label
                entry["corpus_version"] = versions.pop() if len(versions) == 1 else {
                    b.benchmark: b.corpus_version for b in run_benches}
                entry["benchmarks"] = {
                    b.benchmark: {name: metric.get((run_id, b.benchmark, model), {}).get(name) for name in b.headline}
                    for b in run_benches if (run_id, b.benchmark, model) in metric}
                if any((b.benchmark, b.corpus_version) in legacy for b in run_benches):
                    entry["legacy"] = True
                if runs[run_id].status != "completed":
                    entry["status"] = runs[run_id].status
                out.append(entry)
        return {"runs": out}
