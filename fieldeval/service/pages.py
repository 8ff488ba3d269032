"""The dashboard's item pages: a run's items at ``/runs/{run_id}`` (filtered, sorted and paged on the server)
and one item at ``/runs/{run_id}/{benchmark}/{case_id}``.

Items come from :mod:`fieldeval.store.items`; the filters become one ``where`` expression whose text
values are Python literals (``repr``), so a value holding quotes stays a value. Jinja2 escapes every text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import quote, urlencode

from fieldeval.errors import UsageError

PAGE_SIZE = 50
TEXT_FILTERS = ("status", "stratum", "cluster", "relationship", "gold")  # exact-match filters, when the column exists


@dataclass(frozen=True)
class ItemQuery:
    """What the runs table page was asked for (its query parameters)."""

    benchmark: str | None = None
    model: str | None = None
    status: str | None = None
    stratum: str | None = None
    cluster: str | None = None
    relationship: str | None = None
    gold: str | None = None
    metric: str | None = None
    min: str | None = None
    max: str | None = None
    sort: str | None = None
    page: int = 1

    @classmethod
    def of(cls, params: Mapping[str, str]) -> ItemQuery:
        """The query from request parameters (blank values: not given); a page that is not a whole number >= 1
        is a usage error."""
        values: dict[str, Any] = {f.name: (params.get(f.name) or "").strip() or None for f in fields(cls)}
        page = values.pop("page") or "1"
        if not page.isdigit() or int(page) < 1:
            raise UsageError(f"page {page!r}: not a page number; pass page=1 or more")
        return cls(**values, page=int(page))

    def params(self, **changes: Any) -> str:
        """This query's URL parameters, with ``changes`` applied (the page goes back to 1 unless given)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update({"page": 1, **changes})
        return urlencode({k: v for k, v in values.items() if v not in (None, "") and not (k == "page" and v == 1)})


def _number(name: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise UsageError(f"{name} {text!r}: not a number; pass e.g. {name}=0.5") from None


def where_of(query: ItemQuery, columns: tuple[str, ...]) -> str | None:
    """The ``where`` expression of the query's filters (None: no filter)."""
    parts = [f"{name} == {getattr(query, name)!r}" for name in TEXT_FILTERS
             if getattr(query, name) is not None and name in columns]
    if query.metric is not None and (query.min is not None or query.max is not None):
        if query.metric not in columns:
            raise UsageError(f"metric {query.metric!r}: not a column of these items; choose from {', '.join(columns)}")
        if query.min is not None:
            parts.append(f"{query.metric} >= {_number('min', query.min)!r}")
        if query.max is not None:
            parts.append(f"{query.metric} <= {_number('max', query.max)!r}")
    return " and ".join(parts) or None


def item_href(run_id: str, benchmark: str, case_id: str, model: str | None = None) -> str:
    """The item page's address (each part quoted as one path segment; the model as ``?model=``)."""
    path = f"/runs/{quote(run_id, safe='')}/{quote(benchmark, safe='')}/{quote(case_id, safe='')}"
    return path + (f"?{urlencode({'model': model})}" if model else "")


def items_context(store: Any, run_id: str, query: ItemQuery) -> dict[str, Any]:
    """What ``run_items.html`` shows: the run, its benchmarks and models, the columns, one page of items."""
    from fieldeval.store.items import BASE_COLUMNS, item_columns, items_page

    run = store.get_run(run_id)  # an unknown run: UsageError
    benchmarks = list(run["benchmarks"])
    bench = query.benchmark or (benchmarks[0] if benchmarks else None)
    if bench not in benchmarks:
        raise UsageError(f"benchmark {bench!r}: run {run_id} holds {', '.join(benchmarks)}; pick one of them")
    columns = item_columns(bench)
    scores = [c for c in columns if c not in BASE_COLUMNS]
    page = items_page(store, run_id, benchmark=bench, model=query.model, where=where_of(query, columns),
                      sort=query.sort, limit=PAGE_SIZE, offset=(query.page - 1) * PAGE_SIZE)
    pages = max(1, -(-page["total"] // PAGE_SIZE))
    return {"run": run, "run_id": run_id, "benchmark": bench, "benchmarks": benchmarks, "models": list(run["models"]),
            "query": query, "scores": scores, "filters": [n for n in TEXT_FILTERS if n in columns],
            "items": page["items"], "total": page["total"], "pages": pages, "page": query.page,
            "several_models": len(run["models"]) > 1}


def item_context(store: Any, run_id: str, benchmark: str, case_id: str, model: str | None) -> dict[str, Any]:
    """What ``item.html`` shows: the item whole (:func:`fieldeval.store.items.item_whole`): what was sent (when
    stored), earlier calls, the response, scores, explanation, the call's tokens, cost and latency, the error."""
    from fieldeval.store.items import item_whole

    item = item_whole(store, run_id, case_id, benchmark=benchmark, model=model)
    call = [("prompt tokens", item.get("prompt_tokens"), 0), ("completion tokens", item.get("completion_tokens"), 0),
            ("cost (USD)", item.get("est_cost_usd"), 6), ("latency (s)", item.get("response_time_s"), 2),
            ("cached", item.get("cached"), 0)]
    return {"run_id": run_id, "benchmark": benchmark, "item": item, "scores": list(item["scores"].items()),
            "call": call, "recorded": sorted(item["recorded"].items()),
            "runs_href": f"/runs/{quote(run_id, safe='')}?{urlencode({'benchmark': benchmark})}"}


def render_page(template: str, context: Mapping[str, Any]) -> str:
    """One of the item pages' templates, autoescaped, with the ``num`` and ``item_href`` helpers."""
    from jinja2 import Environment, PackageLoader, Undefined, select_autoescape

    env = Environment(loader=PackageLoader("fieldeval.service", "templates"),
                      autoescape=select_autoescape(["html"], default_for_string=True, default=True))
    env.filters["num"] = lambda value, digits=3: "-" if value is None or isinstance(value, Undefined) else (
        str(value) if isinstance(value, (bool, str)) else f"{value:.{digits}f}")
    env.globals["item_href"] = item_href
    return env.get_template(template).render(**context)


def _error_page(message: str, status: int) -> Any:
    from html import escape

    from starlette.responses import HTMLResponse

    return HTMLResponse(f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
                        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
                        f'<title>fieldeval</title></head><body><p><a href="/">&larr; all runs</a></p>'
                        f'<p role="alert">{escape(message)}</p></body></html>\n', status_code=status)


def _known_run(store: Any, run_id: str) -> bool:
    return run_id in {summary.run_id for summary in store.list_runs()}


def items_response(store: Any, run_id: str, params: Mapping[str, str]) -> Any:
    """``GET /runs/{run_id}``: the items page; 404 for an unknown run, 400 naming a bad filter."""
    from starlette.responses import HTMLResponse

    if not _known_run(store, run_id):
        return _error_page(f"run {run_id!r}: not a stored run; the runs list is at /", 404)
    try:
        return HTMLResponse(render_page("run_items.html", items_context(store, run_id, ItemQuery.of(params))))
    except UsageError as error:
        return _error_page(str(error), 400)


def item_response(store: Any, run_id: str, benchmark: str, case_id: str, model: str | None) -> Any:
    """``GET /runs/{run_id}/{benchmark}/{case_id}``: one item; 404 for an unknown run or item, 400 when the id
    names items of several models (the page says to pass ``?model=``)."""
    from starlette.responses import HTMLResponse

    if not _known_run(store, run_id):
        return _error_page(f"run {run_id!r}: not a stored run; the runs list is at /", 404)
    try:
        return HTMLResponse(render_page("item.html", item_context(store, run_id, benchmark, case_id, model or None)))
    except UsageError as error:
        from fieldeval.store.items import ItemNotFound

        return _error_page(str(error), 404 if isinstance(error, ItemNotFound) else 400)
