"""What the API answers: the seed's per-run view, the runs list, job progress and a run's responses, from the
store and the jobs.

Pure functions over a :class:`~fieldeval.store.Store` and a
:class:`~fieldeval.service.jobs.JobTable`; the FastAPI routes only call these.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fieldeval.errors import UsageError
from fieldeval.service.jobs import ACTIVE, Job, JobTable

if TYPE_CHECKING:
    from fieldeval.calls.limits import ModelLimits

# Nothing measured for a model yet: the seed's example run, 340 items in about 420 s at batch_size 8,
# is about 9.9 s an item's calls (1.24 s an item at 8 in flight).
SEED_LATENCY_S = 420 * 8 / 340
LATENCY_SAMPLE = 500  # the latest stored items of the model that the latency is the mean of


class NotFound(LookupError):
    """An unknown run or model: the API answers 404 with this message."""


def model_ids_by_name(store) -> dict[str, str]:
    """The latest registered model_id of every registered name."""
    return {record.name: record.model_id for record in store.list_models()}


def seed_scores(bench: str) -> tuple[list[str], list[str]]:
    """The seed's top-level ``scores`` and aggregate keys of a one-model run of ``bench``, from its face:
    the metrics of its radar chart and its store's run columns (IBF: five dimensions, MDS and TPR)."""
    from fieldeval.benchmark import benchmarks

    face = benchmarks().get(bench)
    radar = next((chart for chart in face.dashboard.charts if chart.kind == "radar"), None) if face else None
    if radar is None:
        return [], []
    return list(radar.metrics), [name for name in face.store_columns.run if name not in radar.metrics]


def job_view(job: Job) -> dict[str, Any]:
    """A job that has no stored run (yet): its status and progress."""
    return {
        "run_id": job.run_id, "model_id": job.model_id, "model_name": job.model, "label": job.label,
        "benchmark": job.benchmark, "corpus_version": job.corpus_version, "status": job.status,
        "created_at": job.created_at, "started_at": job.started_at, "completed_at": job.finished_at,
        "total_items": job.total, "progress": {"done": job.done, "total": job.total, "errors": job.errors},
        "returncode": job.returncode, "stderr_tail": job.stderr_tail if job.status == "failed" else None,
        **job_pace(job),
    }


def job_pace(job: Job, now: datetime | None = None) -> dict[str, int]:
    """A running job's ``estimated_seconds`` (the whole job) and ``seconds_left``, from its own pace once one item
    is done (elapsed / done); nothing before that, when only the estimate at submission exists.

    Example:
        >>> job = Job(run_id="run_1", benchmark="ibf", model="m", model_id=None, corpus_version=None, label=None,
        ...           status="running", total=65, done=5, errors=0, created_at="2026-01-01T00:00:00+00:00",
        ...           started_at="2026-01-01T00:00:00+00:00", finished_at=None, options={}, pid=None,
        ...           returncode=None, stderr_tail=None, command=None)
        >>> job_pace(job, now=datetime(2026, 1, 1, 0, 0, 50, tzinfo=timezone.utc))
        {'estimated_seconds': 650, 'seconds_left': 600}
    """
    if job.status != "running" or not job.done or not job.started_at or not job.total:
        return {}
    elapsed = ((now or datetime.now(timezone.utc)) - datetime.fromisoformat(job.started_at)).total_seconds()
    if elapsed <= 0:
        return {}
    whole = elapsed / job.done * job.total
    return {"estimated_seconds": max(1, round(whole)), "seconds_left": max(0, round(whole - elapsed))}


def run_entries(run: dict[str, Any], model_ids: Mapping[str, str | None]) -> list[dict[str, Any]]:
    """One entry per (benchmark, model) of a stored run, each in the seed's per-run shape: ``benchmark``,
    ``model_name``, ``model_id`` and ``corpus_version`` as strings (or null), ``total_items``, and for a
    benchmark with seed scores (:func:`seed_scores`) its ``scores`` and aggregates."""
    payload = (run.get("payload") or {}).get("benchmarks") or {}
    entries = []
    for bench, by_model in run["metrics"].items():
        dimensions, aggregates = seed_scores(bench)
        for model, metrics in by_model.items():
            entry: dict[str, Any] = {
                "benchmark": bench, "model_name": model, "model_id": model_ids.get(model),
                "corpus_version": run["corpus_versions"].get(bench),
                "total_items": (payload.get(bench, {}).get(model) or {}).get("items")}
            if dimensions:
                entry["scores"] = {name: (metrics.get(name) or {}).get("value") for name in dimensions}
                entry.update({name: (metrics.get(name) or {}).get("value") for name in aggregates})
            entries.append(entry)
    return entries


def stored_view(run: dict[str, Any], *, model_ids: Mapping[str, str | None] | None = None) -> dict[str, Any]:
    """The seed's per-run view of a stored run, with every benchmark's headline metrics and their ci95.

    ``model_name``, ``benchmark`` and ``corpus_version`` are strings, as in the seed: those of the run's
    one (benchmark, model) entry, or of its one entry with seed scores (the IBF part of a
    ``pytest evals --store`` run, whose ``scores``, ``mean_dimension_score``, ``threshold_pass_rate``
    and ``total_items`` the top level then shows), else null. ``entries`` (an extension) lists every
    (benchmark, model) of the run in that shape (:func:`run_entries`).
    """
    model_ids = model_ids or {}
    entries = run_entries(run, model_ids)
    seeded = [entry for entry in entries if "scores" in entry]
    head = entries[0] if len(entries) == 1 else seeded[0] if len(seeded) == 1 else None
    if head is None and not entries and len(run["benchmarks"]) == len(run["models"]) == 1:  # no metrics stored
        (bench,), (model,) = run["benchmarks"], run["models"]
        head = {"benchmark": bench, "model_name": model, "model_id": model_ids.get(model),
                "corpus_version": run["corpus_versions"].get(bench)}
    head = head or {}
    view: dict[str, Any] = {
        "run_id": run["run_id"], "model_id": head.get("model_id"), "model_name": head.get("model_name"),
        "label": run["label"], "benchmark": head.get("benchmark"), "corpus_version": head.get("corpus_version"),
        "status": run["status"], "created_at": run["created_at"], "completed_at": run["completed_at"],
        "total_items": head["total_items"] if len(entries) > 1 and head else run["total_items"],
        "legacy": run["legacy"],
    }
    view.update({key: value for key, value in head.items() if key not in view})  # the seed's scores, if any
    view["entries"] = entries
    view["metrics"] = {
        bench: {model: {name: metrics[name] for name in run["headline"].get(bench, []) if name in metrics}
                for model, metrics in by_model.items()}
        for bench, by_model in run["metrics"].items()}
    return view


def run_view(store, jobs: JobTable, run_id: str) -> dict[str, Any]:
    """``GET /api/evaluations/{run_id}``: the stored run, else the job's status; NotFound for neither."""
    job = jobs.get(run_id)
    if job is None or job.status == "completed":
        try:
            run = store.get_run(run_id)
        except UsageError:  # not stored: the job (if any) says why
            run = None
        if run is not None:
            model_ids: dict[str, str | None] = dict(model_ids_by_name(store))
            if job is not None and job.model_id:  # the registration the job was started with
                model_ids[job.model] = job.model_id
            view = stored_view(run, model_ids=model_ids)
            if job is not None:  # the run was created when it was asked for, not when pytest started it
                view["created_at"] = job.created_at
                if job.returncode in (0, 1):  # completed either way: pytest's 1 is a failed gate (or item)
                    view["gates_passed"] = job.returncode == 0
            return view
    if job is None:
        raise NotFound(f"run {run_id!r}: no such run or job; GET /api/evaluations lists them")
    return job_view(job)


def run_list(store, jobs: JobTable, *, benchmark: str | None = None, model: str | None = None,
             corpus_version: str | None = None) -> list[dict[str, Any]]:
    """``GET /api/evaluations``: stored runs, then jobs without a stored run (queued, running, failed...)."""
    out = []
    stored = set()
    registered = model_ids_by_name(store)
    every_job = jobs.list()
    asked_at = {job.run_id: job.created_at for job in every_job}
    for run in store.list_runs(benchmark=benchmark, corpus_version=corpus_version):
        stored.add(run.run_id)
        if model and model not in run.models:
            continue
        versions = run.corpus_versions
        out.append({"run_id": run.run_id, "label": run.label, "benchmarks": run.benchmarks, "models": run.models,
                    "model_id": registered.get(run.models[0]) if len(run.models) == 1 else None,
                    "corpus_version": next(iter(versions.values())) if len(versions) == 1 else versions,
                    "status": run.status, "total_items": run.total_items, "done": run.total_items,
                    "created_at": asked_at.get(run.run_id, run.created_at), "completed_at": run.completed_at,
                    "legacy": run.legacy})
    every_stored = {run.run_id for run in store.list_runs()}
    for job in every_job:
        if job.run_id in every_stored:
            continue
        if (benchmark and job.benchmark != benchmark) or (model and job.model != model) or (
                corpus_version and job.corpus_version != corpus_version):
            continue
        out.append({"run_id": job.run_id, "label": job.label, "benchmarks": [job.benchmark], "models": [job.model],
                    "model_id": job.model_id or registered.get(job.model),
                    "corpus_version": job.corpus_version, "status": job.status, "total_items": job.total,
                    "done": job.done, "created_at": job.created_at, "completed_at": job.finished_at,
                    "legacy": False})
    return out


def measured_pace(store, model: str) -> float | None:
    """Wall seconds per item of the latest stored run of ``model`` alone that recorded its span (``wall_s``,
    start to end): what the server really delivered, however many calls it takes at once; None without one."""
    for run in reversed(store.list_runs()):
        if run.models != [model] or not run.total_items:
            continue
        wall = ((store.get_run(run.run_id).get("payload") or {}).get("wall_s"))
        if isinstance(wall, int | float) and wall > 0:
            return wall / run.total_items
    return None


def measured_latency(store, model: str) -> float | None:
    """Mean seconds of one item's model calls for ``model``, over its latest :data:`LATENCY_SAMPLE` stored items
    that called the model; a model only ever answered from the response cache, over its latest cached items (the
    next run is likely answered from it too); None when the store holds no item of it."""
    import sqlalchemy as sa

    responses = store.tables.evaluation_responses
    timed = sa.select(responses.c.response_time_s).where(responses.c.model == model,
                                                         responses.c.response_time_s.is_not(None))
    called = timed.where(sa.or_(responses.c.cached.is_(None), responses.c.cached.is_(False)))
    with store.engine.connect() as conn:
        for query in (called, timed):
            latest = query.order_by(responses.c.response_id.desc()).limit(LATENCY_SAMPLE).subquery()
            mean = conn.execute(sa.select(sa.func.avg(latest.c.response_time_s))).scalar_one_or_none()
            if mean is not None:
                return mean
    return None


def estimate_seconds(store, *, model: str, total: int, concurrency: int, limits: ModelLimits | None = None) -> int:
    """Seconds a job of ``total`` items should take: ``total / concurrency`` rounds of the model's measured
    per-item latency (:func:`measured_latency`), else of the seed's (:data:`SEED_LATENCY_S`).

    ``limits``: the model's own ``[tool.fieldeval.models."MODEL"]`` table in the project the jobs run in; its
    ``concurrency`` caps the calls in flight, and its ``rpm`` makes a job take at least ``total / rpm`` minutes.
    """
    latency = measured_latency(store, model)
    if latency is None:
        latency = SEED_LATENCY_S
    if limits is not None and limits.concurrency:
        concurrency = min(concurrency, limits.concurrency)
    rounds = math.ceil(total / max(1, min(concurrency, total or 1)))
    seconds = rounds * latency
    pace = measured_pace(store, model)
    if pace is not None:  # a server that takes fewer calls at once than the batch: its last run's pace says so
        seconds = max(seconds, total * pace)
    if limits is not None and limits.rpm:
        seconds = max(seconds, 60.0 * (total - 1) / limits.rpm + latency)  # the last call starts (total-1)/rpm in
    return max(1, round(seconds))


def model_limits(project: Path, model: str) -> ModelLimits | None:
    """The model's own limits in the project's pyproject.toml; None without a table, or when it does not read (the
    job then fails naming the file)."""
    from fieldeval.settings import load_model_limits, tool_settings

    try:
        return load_model_limits(tool_settings(project)).get(model)
    except UsageError:
        return None


def is_active(job: Job | None) -> bool:
    """Whether the job still waits or runs."""
    return job is not None and job.status in ACTIVE


MAX_PAGE = 1000  # the most items one GET /api/evaluations/{run_id}/responses returns


def require_stored(store, run_id: str) -> None:
    """NotFound unless ``run_id`` is a stored run (a queued or running job has no responses to read yet)."""
    from fieldeval.store.run_reads import require_runs

    with store.engine.connect() as conn:
        try:
            require_runs(conn, store.tables, [run_id], store.url)
        except UsageError:
            raise NotFound(f"run {run_id!r}: not a stored run; a run's responses can be read once it is stored, "
                           "GET /api/evaluations lists them") from None


def response_page(store, run_id: str, *, benchmark: str | None = None, model: str | None = None,
                  limit: int = 50, offset: int = 0) -> dict[str, Any]:
    """``GET /api/evaluations/{run_id}/responses``: ``{"total", "items"}``, one page of the run's items
    (scored, then errored) as :func:`fieldeval.store.items.items_page` gives them, less each item's ``row``."""
    from fieldeval.store.items import items_page

    if not 0 <= limit <= MAX_PAGE:
        raise UsageError(f"limit {limit}: pass 0 to {MAX_PAGE} items a page, and walk the rest with offset=")
    if offset < 0:
        raise UsageError(f"offset {offset}: pass 0 or more (the items skipped before the page)")
    require_stored(store, run_id)
    page = items_page(store, run_id, benchmark=benchmark, model=model, limit=limit, offset=offset)
    return {"total": page["total"],
            "items": [{key: value for key, value in item.items() if key != "row"} for item in page["items"]]}


def response_item(store, run_id: str, case_id: str, *, benchmark: str | None = None,
                  model: str | None = None) -> dict[str, Any]:
    """``GET /api/evaluations/{run_id}/responses/{case_id}``: the item whole
    (:func:`fieldeval.store.items.item_whole`); NotFound for no such item, a usage error naming ``model=``
    (or ``benchmark=``) when the case id is an item of several."""
    from fieldeval.store.items import AmbiguousItem, ItemNotFound, item_whole

    require_stored(store, run_id)
    try:
        return item_whole(store, run_id, case_id, benchmark=benchmark, model=model)
    except ItemNotFound as error:
        raise NotFound(error.worded(flags=False, listing=f"GET /api/evaluations/{run_id}/responses lists its "
                                                         "case ids")) from None
    except AmbiguousItem as error:
        raise UsageError(error.worded(flags=False)) from None
