"""The FastAPI application: the seed's endpoints for models and evaluations, and the dashboard at ``/``.

Build it with :func:`create_app`; ``fieldeval serve`` runs it on uvicorn.
Errors are JSON ``{"message": ...}``: 422 names the field, 400 a bad query (a page too big, a case id
of several models), 404 the unknown run, item or model, 409 a run not ready for what was asked (a compare of a
run still queued or running), 401 a request without the token
(:mod:`fieldeval.service.access`: only the benchmark list, the API schema and the page's assets are public).
"""

from __future__ import annotations

import secrets
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from fastapi_offline import FastAPIOffline
from starlette.exceptions import HTTPException as StarletteHTTPException
from sqlalchemy import exc as sa_exc
from starlette.middleware.trustedhost import TrustedHostMiddleware

from fieldeval.calls.endpoints import check_key_binding, register_endpoint
from fieldeval.errors import UsageError
from fieldeval.service import access, dashboard, diffview, pages, views
from fieldeval.service.bodies import EvaluationIn, ModelIn
from fieldeval.store.compare import PartialRunError
from fieldeval.store.registration import ModelConflict
from fieldeval.service.jobs import JobTable, Runner

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")


def benchmark_list() -> list[dict[str, Any]]:
    """``GET /api/benchmarks``: every installed benchmark as its face declares it."""
    from fieldeval.benchmark import benchmarks

    return [{"name": bench.name, "title": bench.title, "baseline": bench.baseline,
             "metrics": [{"name": m.name, "low": m.low, "high": m.high, "headline": m.headline} for m in bench.metrics],
             "corpus_versions": list(bench.corpus_versions()) if bench.corpus_versions else None,
             "options": [f.metadata["flag"] for f in bench.option_fields()],
             "charts": [chart.kind for chart in bench.dashboard.charts]}
            for bench in benchmarks().values()]


def plan_items(benchmark: str, corpus_version: str | None) -> int:
    """How many items an evaluation of ``benchmark`` will run: its cases under default options."""
    import dataclasses

    from fieldeval.benchmark import get_benchmark

    bench = get_benchmark(benchmark)
    fields = {f.name for f in dataclasses.fields(bench.options)}
    options = bench.options(**({"corpus_version": corpus_version} if "corpus_version" in fields else {}))
    return len(bench.cases(bench.load(options)))


# every answer: no page of the service inside another site's page (clickjacking its forms), no type sniffing
SECURITY_HEADERS = {"X-Frame-Options": "DENY", "Content-Security-Policy": "frame-ancestors 'none'",
                    "X-Content-Type-Options": "nosniff"}


def _error(status: int, message: str, *, headers: dict[str, str] | None = None, **extra: Any) -> JSONResponse:
    return JSONResponse({"message": message, **extra}, status_code=status, headers=headers)


def _field_errors(error: RequestValidationError) -> str:
    """``corpus_version: required for an ibf evaluation`` for each invalid field."""
    parts = []
    for item in error.errors():
        loc = [str(p) for p in item["loc"] if p not in ("body", "query", "path")]
        msg = str(item["msg"]).removeprefix("Value error, ")
        parts.append(f"{'.'.join(loc) or 'body'}: {msg}")
    return "; ".join(parts)


def _resolve_model(store, model_id: str) -> tuple[str, str | None]:
    """``(--model id, registered model_id or None)`` for a registered model_id or name, or any llm model id."""
    records = store.list_models()
    latest = {record.name: record.model_id for record in records}
    for record in records:
        if model_id in (record.model_id, record.name):
            name = record.name if latest[record.name] == record.model_id else record.model_id
            return name, record.model_id if model_id == record.model_id else latest[record.name]
    import llm

    try:
        llm.get_model(model_id)
    except llm.UnknownModelError:
        raise views.NotFound(f"model {model_id!r}: not registered and not an llm model; "
                             "POST /api/models first or pass an id from `llm models`") from None
    return model_id, None


def create_app(store_url: str, *, evals_dir: Path, token: str | None, no_token: bool = False,
               work_dir: Path | None = None, allowed_hosts: list[str] | None = None,
               key_envs: dict[str, str | None] | None = None) -> FastAPI:
    """The service on one store.

    Args:
        store_url: the run store (SQLite path or URL, or PostgreSQL URL); jobs live in its database too.
        evals_dir: the folder of ``test_<benchmark>.py`` modules the jobs run.
        token: what every request but the public ones must send (``Authorization: Bearer <token>``, or the
            cookie ``GET /?token=<token>`` sets); None only with ``no_token``.
        no_token: open every route to anyone who can connect (``fieldeval serve --no-token``, loopback only).
        work_dir: where job progress files go (default: a new temporary folder).
        allowed_hosts: the ``Host`` names the service answers to besides the loopback names; any other
            host (a DNS-rebinding page, say) gets 400.
        key_envs: the keys (environment variables or ``llm keys`` aliases) a ``POST /api/models`` may name,
            each with the endpoint it is bound to, or None: only at endpoints the operator already
            registered it with (:func:`fieldeval.calls.endpoints.check_key_binding`).

    Returns:
        The FastAPI app; its lifespan starts the job runner and marks jobs a previous server left as interrupted.

    Example:
        >>> app = create_app("sqlite:///reports/fieldeval.db", evals_dir=Path("evals"),
        ...                  token=secrets.token_urlsafe(32))  # doctest: +SKIP
    """
    if token is None and not no_token:
        raise ValueError("create_app: token is None; pass the service's token, or no_token=True for an open service")
    if token is not None and (no_token or not token):
        raise ValueError("create_app: pass a non-empty token, or token=None with no_token=True")
    from fieldeval.store import declared_columns, open_store

    store = open_store(store_url, columns=declared_columns())
    jobs = JobTable(store.engine)
    runner = Runner(jobs, store_url=_absolute(store_url), evals_dir=evals_dir.resolve(), work_dir=work_dir)
    project = evals_dir.resolve().parent  # where the jobs run: its pyproject.toml's per-model limits apply

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        jobs.interrupt_active()
        runner.start()
        yield
        runner.stop()
        store.close()

    # /docs and /redoc load Swagger UI and ReDoc from fastapi-offline's bundled copies, not a CDN
    app = FastAPIOffline(title="fieldeval", description="Register models, run evaluations, compare runs.",
                         version="1", lifespan=lifespan, static_url=access.DOCS_ASSETS)
    allowed_keys = dict(key_envs or {})

    @app.middleware("http")
    async def _require_token(request: Request, call_next):
        return await access.gate(request, call_next, token)

    @app.middleware("http")
    async def _no_framing(request: Request, call_next):
        response = await call_next(request)  # no page of the service (its forms included) inside another page
        response.headers.update(SECURITY_HEADERS)
        return response

    hosts = list(dict.fromkeys([*LOOPBACK_HOSTS, *(allowed_hosts or [])]))
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=hosts)  # added last: checked first

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, error: RequestValidationError) -> JSONResponse:
        return _error(422, _field_errors(error), errors=[{"field": ".".join(str(p) for p in e["loc"][1:]),
                                                          "message": str(e["msg"]).removeprefix("Value error, ")}
                                                         for e in error.errors()])

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, error: StarletteHTTPException) -> JSONResponse:
        return _error(error.status_code, str(error.detail))

    @app.exception_handler(views.NotFound)
    async def _not_found(_: Request, error: views.NotFound) -> JSONResponse:
        return _error(404, str(error))

    @app.exception_handler(UsageError)
    async def _usage(_: Request, error: UsageError) -> JSONResponse:
        return _error(400, str(error))

    @app.exception_handler(sa_exc.OperationalError)
    @app.exception_handler(sa_exc.InterfaceError)
    async def _store_down(_: Request, error: sa_exc.DBAPIError) -> JSONResponse:
        reason = " ".join(str(getattr(error, "orig", error)).split())[:200]
        return _error(503, f"the run store cannot be reached ({reason}); start it or fix --store, then retry",
                      headers=SECURITY_HEADERS)

    @app.exception_handler(Exception)
    async def _crash(_: Request, error: Exception) -> JSONResponse:
        return _error(500, f"internal error ({type(error).__name__}); the server's log has the details",
                      headers=SECURITY_HEADERS)

    @app.exception_handler(ModelConflict)
    @app.exception_handler(PartialRunError)
    async def _conflict(_: Request, error: UsageError) -> JSONResponse:
        return _error(409, str(error))

    @app.post("/api/models", status_code=201)
    def register_model(body: ModelIn, replace: bool = False) -> JSONResponse:
        """Register a model endpoint; idempotent on (name, endpoint): the same pair answers 200 and the record.

        A name an installed llm model has is refused (422); a name registered at another endpoint is
        refused (409) unless ``replace=true``.
        """
        fields = body.model_dump(exclude={"name", "endpoint", "key_env"})
        if body.key_env is not None:  # keys never come from the API: only those the operator allowed here
            try:
                check_key_binding(store, body.key_env, body.endpoint, allowed_keys)
            except UsageError as error:
                return _error(422, f"key_env: {error}")
        try:
            record, created = register_endpoint(store, body.name, body.endpoint, key_env=body.key_env,
                                                replace=replace, **fields)
        except ModelConflict:
            raise
        except UsageError as error:
            return _error(422, str(error))
        return JSONResponse({"model_id": record.model_id, "name": record.name, "registered_at": record.registered_at},
                            status_code=201 if created else 200)

    @app.get("/api/benchmarks")
    def list_benchmarks() -> list[dict[str, Any]]:
        """The installed benchmarks (built-in and third-party): name, title, metrics, corpus versions, charts."""
        return benchmark_list()

    @app.get("/api/models")
    def list_models() -> list[dict[str, Any]]:
        """The registered models, oldest first."""
        return [record.as_dict() for record in store.list_models()]

    @app.post("/api/evaluations", status_code=202)
    def start_evaluation(body: EvaluationIn) -> dict[str, Any]:
        """Queue an evaluation; answers at once with the run id. Poll ``GET /api/evaluations/{run_id}``."""
        model, model_id = _resolve_model(store, body.model_id)
        total = plan_items(body.benchmark, body.corpus_version)
        run_id = "run_" + secrets.token_hex(4)
        jobs.add(run_id=run_id, benchmark=body.benchmark, model=model, model_id=model_id,
                 corpus_version=body.corpus_version, label=body.label, total=total,
                 options={"batch_size": body.batch_size, "temperature": body.temperature,
                          "max_tokens": body.max_tokens})
        estimate = views.estimate_seconds(store, model=model, total=total, concurrency=body.batch_size,
                                          limits=views.model_limits(project, model))
        runner.submit(run_id)
        return {"run_id": run_id, "status": "queued", "total_items": total, "estimated_seconds": estimate}

    @app.get("/api/evaluations")
    def list_evaluations(benchmark: str | None = None, model: str | None = None,
                         corpus_version: str | None = None) -> list[dict[str, Any]]:
        """Stored runs and the jobs without a stored run, oldest first, optionally filtered."""
        return views.run_list(store, jobs, benchmark=benchmark, model=model, corpus_version=corpus_version)

    @app.get("/api/evaluations/compare")
    def compare(run_ids: str = Query(min_length=1, description="comma-separated run ids"),
                allow_partial: bool = False,
                base: str | None = Query(default=None, max_length=200,
                                         description="add each run's paired differences against this one")
                ) -> dict[str, Any]:
        """The seed's side-by-side payload of stored runs; a run still queued or running is refused (409), and so
        is a stored run that is not completed unless ``allow_partial=true`` (then marked with its ``status``)."""
        ids = [part.strip() for part in run_ids.split(",") if part.strip()]
        stored = {run.run_id for run in store.list_runs()}
        for run_id in ids:
            if run_id in stored:
                continue
            job = jobs.get(run_id)
            if views.is_active(job):
                return _error(409, f"run {run_id!r} is {job.status}; wait until it is completed "
                                   f"(GET /api/evaluations/{run_id}), then compare it")
            raise views.NotFound(f"run {run_id!r}: not a stored run; only completed runs can be compared")
        payload = store.compare(ids, allow_partial=allow_partial)
        if base:
            if base not in ids:
                return _error(422, f"base {base!r}: not one of run_ids; pass one of them")
            payload["differences"] = store.differences(base, ids)["differences"]
        return payload

    @app.get("/api/evaluations/diff")
    def diff(base: str = Query(min_length=1, max_length=200, description="the base run id"),
             run: str = Query(min_length=1, max_length=200, description="the run to diff against it"),
             benchmark: str | None = Query(default=None, max_length=200,
                                           description="the benchmark (default: the only one both runs hold)"),
             base_model: str | None = Query(default=None, max_length=200),
             model: str | None = Query(default=None, max_length=200)) -> Any:
        """The item-level diff of ``run`` against ``base`` for one benchmark, as ``fieldeval runs diff --json``."""
        return diffview.api_diff(store, base, run, benchmark=benchmark, base_model=base_model, model=model)

    @app.get("/api/evaluations/{run_id}/responses")
    def list_responses(run_id: str,
                       benchmark: str | None = Query(default=None, max_length=200),
                       model: str | None = Query(default=None, max_length=200),
                       limit: int = Query(default=50, description=f"items a page, 0 to {views.MAX_PAGE}"),
                       offset: int = Query(default=0, description="items skipped before the page")) -> dict[str, Any]:
        """One page of a stored run's items (the seed's ``evaluation_responses`` rows, then the errored items):
        ``{"total", "items"}``; walk the pages with ``offset``."""
        return views.response_page(store, run_id, benchmark=benchmark, model=model, limit=limit, offset=offset)

    @app.get("/api/evaluations/{run_id}/responses/{case_id:path}")
    def get_response(run_id: str, case_id: str,
                     benchmark: str | None = Query(default=None, max_length=200),
                     model: str | None = Query(default=None, max_length=200)) -> dict[str, Any]:
        """One item whole, as ``fieldeval runs item --json`` prints it: what was sent, the response, the scores
        and their explanation, the call's tokens, cost and latency, and the error of an errored item."""
        return views.response_item(store, run_id, case_id, benchmark=benchmark, model=model)

    @app.get("/api/evaluations/{run_id}")
    def get_evaluation(run_id: str) -> dict[str, Any]:
        """The seed's per-run view, or the job's status and progress while it runs."""
        return views.run_view(store, jobs, run_id)

    @app.delete("/api/evaluations/{run_id}")
    def delete_evaluation(run_id: str) -> dict[str, Any]:
        """Hard-delete a stored run and its responses (and its job record)."""
        job = jobs.get(run_id)
        if views.is_active(job):
            return _error(409, f"run {run_id!r} is {job.status}; wait until it ends, then delete it")
        stored = run_id in {run.run_id for run in store.list_runs()}
        if not stored and job is None:
            raise views.NotFound(f"run {run_id!r}: no such run; GET /api/evaluations lists them")
        responses = store.delete_run(run_id) if stored else 0
        jobs.delete(run_id)
        return {"run_id": run_id, "deleted": True, "responses_deleted": responses}

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def dashboard_page(base: str | None = Query(default=None, max_length=200,
                                                description="show paired differences against this run"),
                       run: str | None = Query(default=None, max_length=200,
                                               description="the run whose items to diff against base")) -> HTMLResponse:
        return HTMLResponse(dashboard.render(store, jobs, live=True, base=base, run=run))

    @app.get("/runs/{run_id}", response_class=HTMLResponse, include_in_schema=False)
    def run_items_page(run_id: str, request: Request) -> HTMLResponse:
        return pages.items_response(store, run_id, request.query_params)

    @app.get("/runs/{run_id}/{benchmark}/{case_id:path}", response_class=HTMLResponse, include_in_schema=False)
    def item_page(run_id: str, benchmark: str, case_id: str, model: str | None = None) -> HTMLResponse:
        return pages.item_response(store, run_id, benchmark, case_id, model)

    @app.get("/assets/plotly.min.js", include_in_schema=False)
    def plotly_js() -> FileResponse:
        return FileResponse(dashboard.plotly_path(), media_type="application/javascript",
                            headers={"Cache-Control": "max-age=86400"})

    return app


def _absolute(url: str) -> str:
    """The store URL with a relative SQLite path made absolute (the jobs run in another folder)."""
    from fieldeval.store import resolve_url

    parsed = resolve_url(url)
    if parsed.get_backend_name() == "sqlite" and not Path(parsed.database).is_absolute():
        return f"sqlite:///{Path(parsed.database).resolve()}"
    return url if "://" in url else f"sqlite:///{Path(url).expanduser().resolve()}"
