"""The dashboard page: served at ``/`` and written as one self-contained file by ``fieldeval report``.

Jinja2 renders the page with autoescape on (model names, labels and any text
from a run are escaped); the chart data travels as JSON inside a
``<script type="application/json">`` with ``<``, ``>`` and ``&`` escaped, and
Plotly's own ``plotly.min.js`` (shipped in its Python package) is inlined in a
report or served by the service, so a page fetches nothing from the internet.
"""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path
from typing import Any

from markupsafe import Markup

from fieldeval.errors import UsageError
from fieldeval.service.views import IBF_AGGREGATES, IBF_DIMENSIONS, run_list

EBS_METRICS = ["ontology_score", "exact_match"]
RELATIONSHIPS = ["exact", "descendant", "ancestor", "unrelated", "parse_failure"]


def plotly_path() -> Path:
    """The ``plotly.min.js`` file inside the installed plotly package."""
    return Path(str(files("plotly") / "package_data" / "plotly.min.js"))


def script_json(value: Any) -> Markup:
    """JSON safe inside a ``<script>`` element: no ``<``, ``>`` or ``&`` left to end it."""
    text = json.dumps(value, sort_keys=True, allow_nan=False, default=str)
    text = text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
    return Markup(text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _metric(entry: dict[str, Any] | None) -> dict[str, Any]:
    """``{"value", "lo", "hi"}`` of a stored metric entry (all None when absent)."""
    entry = entry or {}
    ci = entry.get("ci95") or [None, None]
    return {"value": entry.get("value"), "lo": ci[0], "hi": ci[1]}


def _details(run: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The IBF, EBS and MicrobioRel entries of one stored run, one per model."""
    out: dict[str, list[dict[str, Any]]] = {"ibf": [], "ebs": [], "microbiorel": []}
    payload = (run.get("payload") or {}).get("benchmarks") or {}
    base = {"run_id": run["run_id"], "label": run["label"] or "", "legacy": run["legacy"]}
    for bench, by_model in run["metrics"].items():
        version = run["corpus_versions"].get(bench) or ""
        for model, metrics in by_model.items():
            entry = {**base, "model": model, "corpus_version": version, "key": f"{run['run_id']} {model}"}
            full = (payload.get(bench) or {}).get(model) or {}
            if bench == "ibf":
                entry["scores"] = {name: _metric(metrics.get(name)) for name in IBF_DIMENSIONS + IBF_AGGREGATES}
            elif bench == "ebs":
                entry["headline"] = {name: _metric(metrics.get(name)) for name in run["headline"].get(bench, [])}
                entry["per_stratum"] = {stratum: {m: _metric(values.get(m)) for m in EBS_METRICS}
                                        for stratum, values in (full.get("per_stratum") or {}).items()}
                counts = full.get("relationship_counts") or {}
                entry["relationships"] = {name: counts.get(name, 0) for name in RELATIONSHIPS}
            elif bench == "microbiorel":
                entry["headline"] = {name: _metric(metrics.get(name)) for name in run["headline"].get(bench, [])}
                entry["per_class"] = full.get("per_class") or {}
                entry["confusion"] = full.get("confusion_matrix") or {"labels": [], "columns": [], "matrix": []}
            else:
                continue
            out[bench].append(entry)
    return out


def differences(store, base: str | None, run_ids: list[str]) -> dict[str, Any] | None:
    """Each run's paired differences against ``base`` (run - base, ci95), or None without a base."""
    if not base:
        return None
    from fieldeval.paired import excludes_zero
    from fieldeval.stats import FEW_CLUSTERS

    try:
        found = store.differences(base, [r for r in run_ids if r != base])
    except UsageError as error:  # an unknown base run: said on the page, not a server error
        return {"base": base, "rows": [], "notes": [str(error)]}
    rows = [{**d, "excludes_zero": excludes_zero(d), "few_clusters": (d["n_clusters"] or 0) < FEW_CLUSTERS}
            for d in found["differences"]]
    return {"base": base, "rows": rows, "notes": found["notes"]}


def few_cluster_notes(run: dict[str, Any]) -> list[str]:
    """One line per benchmark and model of a stored run whose headline intervals rest on under 10 clusters."""
    from fieldeval.stats import FEW_CLUSTERS, few_clusters

    lines = []
    for bench, by_model in run["metrics"].items():
        for model, metrics in by_model.items():
            thin = [(metrics[m]["n"], metrics[m]["n_clusters"]) for m in run["headline"].get(bench, [])
                    if few_clusters(metrics.get(m))]
            if thin:
                items, clusters = max(thin)
                lines.append(f"{run['run_id']} {bench} {model}: {items} items in only {clusters} clusters "
                             f"(under {FEW_CLUSTERS}): the intervals are wide and approximate")
    return lines


def context(store, jobs=None, *, run_ids: list[str] | None = None, live: bool = False,
            base: str | None = None) -> dict[str, Any]:
    """What the template shows: the runs list, the details of every stored run in it, and the paired
    differences of the stored runs against ``base``."""
    if jobs is not None:
        runs = run_list(store, jobs)
    else:
        runs = [{**summary.as_dict(), "done": summary.total_items} for summary in store.list_runs()]
        for run in runs:
            versions = run.pop("corpus_versions")
            run["corpus_version"] = next(iter(versions.values())) if len(versions) == 1 else versions
    if run_ids is not None:
        by_id = {run["run_id"]: run for run in runs}
        missing = [run_id for run_id in run_ids if run_id not in by_id]
        if missing:
            raise UsageError(f"run {missing[0]!r}: not in the store {store.url}; run `fieldeval runs list` for the ids")
        runs = [by_id[run_id] for run_id in dict.fromkeys(run_ids)]
    details: dict[str, list[dict[str, Any]]] = {"ibf": [], "ebs": [], "microbiorel": []}
    cluster_notes: list[str] = []
    stored = {summary.run_id for summary in store.list_runs()}
    for run in runs:
        version = run["corpus_version"]
        run["corpus_text"] = version if isinstance(version, str) else "; ".join(f"{b}={v}" for b, v in (version or {}).items())
        run["corpus_list"] = [version] if isinstance(version, str) else list((version or {}).values())
        if run["run_id"] in stored:
            full = store.get_run(run["run_id"])
            for bench, entries in _details(full).items():
                details[bench].extend(entries)
            cluster_notes += few_cluster_notes(full)
    data = {"live": live, "dimensions": IBF_DIMENSIONS, "relationships": RELATIONSHIPS, **details,
            "runs": [{"run_id": r["run_id"], "status": r["status"]} for r in runs]}
    paired = differences(store, base, [r["run_id"] for r in runs if r["run_id"] in stored and
                                       r["status"] in ("completed", "partial")])
    return {"runs": runs, "details": details, "data": script_json(data), "live": live, "differences": paired,
            "cluster_notes": cluster_notes,
            "dimensions": IBF_DIMENSIONS, "aggregates": IBF_AGGREGATES, "relationships": RELATIONSHIPS,
            "benchmarks": sorted({b for r in runs for b in r["benchmarks"]}),
            "models": sorted({m for r in runs for m in r["models"]}),
            "corpus_versions": sorted({v for r in runs for v in r["corpus_list"] if v})}


def render(store, jobs=None, *, run_ids: list[str] | None = None, live: bool = False, base: str | None = None) -> str:
    """The dashboard HTML; ``live`` pages load Plotly from the service and poll it, others inline everything.

    Args:
        store: the run store.
        jobs: the service's job table (None: stored runs only).
        run_ids: only these runs, in this order (None: every run).
        live: served by ``fieldeval serve``.
        base: show each run's paired differences against this stored run.

    Returns:
        One HTML document.

    Example:
        >>> Path("report.html").write_text(render(store, run_ids=["run_3b9e204a"]))  # doctest: +SKIP
    """
    from jinja2 import Environment, PackageLoader, select_autoescape

    env = Environment(loader=PackageLoader("fieldeval.service", "templates"),
                      autoescape=select_autoescape(["html"], default_for_string=True, default=True))
    env.filters["num"] = lambda value, digits=3: "-" if value is None else f"{value:.{digits}f}"
    script = (files("fieldeval.service") / "templates" / "dashboard.js").read_text(encoding="utf-8")
    plotly = None if live else Markup(plotly_path().read_text(encoding="utf-8").replace("</script", "<\\/script"))
    return env.get_template("dashboard.html").render(**context(store, jobs, run_ids=run_ids, live=live, base=base),
                                                     script=Markup(script), plotly=plotly)
