"""The dashboard page: served at ``/`` and written as one self-contained file by ``fieldeval report``.

Every benchmark reaches the page through its :class:`~fieldeval.benchmark.Benchmark`
face: its name, title and headline metrics (one chart across runs, with ci95),
and the charts its ``dashboard`` member declares, with the gold-data audit findings
the runs' reports recorded (``evals.audit.<benchmark>``, kept in the stored payload).
A third-party benchmark shows up as the built-in ones do.

Jinja2 renders the page with autoescape on (model names, labels and any text
from a run are escaped); the chart data travels as JSON inside a
``<script type="application/json">`` with ``<``, ``>`` and ``&`` escaped, and
Plotly's own ``plotly.min.js`` (shipped in its Python package) is inlined in a
report or served by the service, so a page fetches nothing from the internet.
"""

from __future__ import annotations

import json
import math
from importlib.resources import files
from pathlib import Path
from typing import Any

from markupsafe import Markup

from fieldeval.benchmark import Benchmark, Chart, benchmarks
from fieldeval.errors import UsageError
from fieldeval.service.diffview import diff_sections
from fieldeval.service.pages import item_href
from fieldeval.service.views import run_list

ERRORED = ("failed", "interrupted")


def plotly_path() -> Path:
    """The ``plotly.min.js`` file inside the installed plotly package."""
    return Path(str(files("plotly") / "package_data" / "plotly.min.js"))


def script_json(value: Any) -> Markup:
    """JSON safe inside a ``<script>`` element: no ``<``, ``>`` or ``&`` left to end it."""
    text = json.dumps(value, sort_keys=True, allow_nan=False, default=str)
    text = text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
    return Markup(text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _metric(entry: dict[str, Any] | None) -> dict[str, Any]:
    """``{"value", "lo", "hi", "within"}`` of a stored metric entry (all None when absent): ``lo``-``hi`` its ci95
    on new clusters, ``within`` its ``ci95_within`` (on more items from the same clusters) when its items came
    in clusters, else None."""
    from fieldeval.stats.wording import clustered

    entry = entry or {}
    ci = entry.get("ci95") or [None, None]
    within = entry.get("ci95_within") if clustered(entry) else None
    return {"value": entry.get("value"), "lo": ci[0], "hi": ci[1],
            "within": list(within) if within and within[0] is not None else None}


def wilson(count: int, total: int) -> dict[str, Any]:
    """A share ``count/total`` with its Wilson score 95% interval (``value`` None when ``total`` is 0).

    Example:
        >>> wilson(5, 10)["value"]
        0.5
    """
    if total <= 0:
        return {"value": None, "lo": None, "hi": None}
    z, p = 1.959963984540054, count / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return {"value": round(p, 6), "lo": round(max(0.0, centre - half), 6), "hi": round(min(1.0, centre + half), 6)}


def headline_metrics(bench: Benchmark) -> list[dict[str, Any]]:
    """The metrics of the benchmark's headline chart: its headline metrics on the first one's scale."""
    heads = [m for m in bench.metrics if m.headline] or list(bench.metrics)
    if not heads:
        return []
    scale = (heads[0].low, heads[0].high)
    return [{"name": m.name, "low": m.low, "high": m.high} for m in heads if (m.low, m.high) == scale]


def _chart_data(chart: Chart, full: dict[str, Any]) -> Any:
    """What one chart needs of one model's report entry."""
    if chart.kind == "groups":
        return {group: _metric((values or {}).get(chart.metric)) for group, values in (full.get(chart.key) or {}).items()}
    if chart.kind == "shares":
        counts = full.get(chart.key) or {}
        total = sum(int(n) for n in counts.values())
        return {name: {**wilson(int(n), total), "count": int(n)} for name, n in counts.items()}
    if chart.kind == "classes":
        out = {}
        for name, values in (full.get(chart.key) or {}).items():
            ci = values.get(f"{chart.metric}_ci95") or [None, None]
            out[name] = {"value": values.get(chart.metric), "lo": ci[0], "hi": ci[1], "support": values.get("support")}
        return out
    if chart.kind == "radar":
        return {name: _metric(full.get(name)) for name in chart.metrics}
    if chart.kind == "matrix":
        return full.get(chart.key) or {"labels": [], "columns": [], "matrix": []}
    raise ValueError(f"unknown chart kind {chart.kind!r}")


def _entries(run: dict[str, Any], known: dict[str, Benchmark]) -> dict[str, list[dict[str, Any]]]:
    """Each benchmark's entries of one stored run, one per model."""
    out: dict[str, list[dict[str, Any]]] = {}
    payload = (run.get("payload") or {}).get("benchmarks") or {}
    base = {"run_id": run["run_id"], "label": run["label"] or "", "legacy": run["legacy"]}
    errors: dict[tuple[str, str], int] = {}
    for error in run.get("errors") or []:
        errors[(error["benchmark"], error["model"])] = errors.get((error["benchmark"], error["model"]), 0) + 1
    for name, by_model in sorted(run["metrics"].items()):
        bench = known.get(name)
        if bench is None:
            continue  # a benchmark no longer installed: its numbers stay in the store and the API
        for model, metrics in by_model.items():
            full = (payload.get(name) or {}).get(model) or {}
            entry = {**base, "model": model, "corpus_version": run["corpus_versions"].get(name) or "",
                     "key": f"{run['run_id']} {model}",
                     "errors": int(full.get("errors") or errors.get((name, model), 0)),
                     "items": full.get("items"),
                     "metrics": {m.name: _metric(metrics.get(m.name)) for m in bench.metrics},
                     "charts": [_chart_data(chart, {**full, **{k: v for k, v in metrics.items() if k not in full}})
                                for chart in bench.dashboard.charts]}
            out.setdefault(name, []).append(entry)
    return out


def differences(store, base: str | None, run_ids: list[str]) -> dict[str, Any] | None:
    """Each run's paired differences against ``base`` (run - base), or None without a base: both intervals, the
    Holm-adjusted p over all of them (``family`` comparisons) and whether that marks the difference."""
    if not base:
        return None
    from fieldeval.stats import FEW_CLUSTERS
    from fieldeval.stats.paired import family_size, significant

    try:
        found = store.differences(base, [r for r in run_ids if r != base])
    except UsageError as error:  # an unknown base run: said on the page, not a server error
        return {"base": base, "rows": [], "notes": [str(error)], "family": 0}
    known = benchmarks()
    rows = [{**d, "significant": significant(d), "few_clusters": (d["n_clusters"] or 0) < FEW_CLUSTERS,
             "within": d.get("ci95_within") if (d["n_clusters"] or 0) < (d["n_items"] or 0) else None,
             "called": known[d["benchmark"]].clusters_called if d["benchmark"] in known else "clusters"}
            for d in found["differences"]]
    return {"base": base, "rows": rows, "notes": found["notes"], "family": family_size(found["differences"])}


def interval_legends(records: list[dict[str, Any]]) -> dict[str, str]:
    """``{benchmark: "first interval on new studies (6 studies: approximate), second on more samples from these
    6 studies"}`` for each benchmark of the shown runs whose items came in clusters (the headline metric over the
    most items names the counts)."""
    from fieldeval.stats.wording import clustered, interval_names

    known = benchmarks()
    widest: dict[str, dict[str, Any]] = {}
    for record in records:
        for bench, by_model in record["metrics"].items():
            if bench not in known:
                continue
            for metrics in by_model.values():
                for name in record["headline"].get(bench, []):
                    entry = metrics.get(name)
                    if clustered(entry) and "ci95_within" in entry and (
                            bench not in widest or (entry["n"], entry["n_clusters"]) >
                            (widest[bench]["n"], widest[bench]["n_clusters"])):
                        widest[bench] = entry
    out = {}
    for bench, entry in widest.items():
        new, within = interval_names(entry, known[bench].clusters_called)
        out[bench] = f"first interval {new}, second {within}"
    return out


def few_cluster_notes(run: dict[str, Any]) -> dict[str, list[str]]:
    """``{benchmark: lines}``: one line per model of a stored run whose headline intervals rest on under 10
    clusters, shown beside the benchmark's charts."""
    from fieldeval.stats import FEW_CLUSTERS, few_clusters

    known = benchmarks()
    lines: dict[str, list[str]] = {}
    for bench, by_model in run["metrics"].items():
        called = known[bench].clusters_called if bench in known else "clusters"
        for model, metrics in by_model.items():
            thin = [(metrics[m]["n"], metrics[m]["n_clusters"]) for m in run["headline"].get(bench, [])
                    if few_clusters(metrics.get(m))]
            if thin:
                items, clusters = max(thin)
                lines.setdefault(bench, []).append(
                    f"{run['run_id']} {bench} {model}: {items} items in only {clusters} {called} "
                    f"(under {FEW_CLUSTERS}): the intervals on new {called} are wide and approximate")
    return lines


def audit_groups(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each benchmark's gold-data findings as the shown runs' reports keep them (``evals.audit.<benchmark>``):
    one group per distinct set of findings, with the runs that found it (runs stored without an audit left out)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for record in records:
        for bench, findings in ((record.get("payload") or {}).get("audit") or {}).items():
            kept = [{"kind": f.get("kind"), "message": f.get("message"), "count": f.get("count")} for f in findings]
            groups = out.setdefault(bench, {})
            group = groups.setdefault(json.dumps(kept, sort_keys=True), {"findings": kept, "runs": []})
            group["runs"].append(record["run_id"])
    return {bench: list(groups.values()) for bench, groups in out.items()}


def _face(bench: Benchmark) -> dict[str, Any]:
    """The benchmark as the page sees it."""
    return {"name": bench.name, "title": bench.title, "headline": headline_metrics(bench),
            "metrics": [m.name for m in bench.metrics],
            "charts": [{"kind": c.kind, "title": c.title, "metric": c.metric, "metrics": list(c.metrics),
                        "x_title": c.x_title, "y_title": c.y_title, "low": c.low, "high": c.high}
                       for c in bench.dashboard.charts]}


def context(store, jobs=None, *, run_ids: list[str] | None = None, live: bool = False,
            base: str | None = None, run: str | None = None) -> dict[str, Any]:
    """What the template shows: the runs list, each benchmark's entries, the data the charts draw, the
    gold-data audit findings the runs recorded, the paired differences of the stored runs against ``base``,
    and the item diff of ``run`` against ``base``."""
    if jobs is not None:
        runs = run_list(store, jobs)
    else:
        runs = [{**summary.as_dict(), "done": summary.total_items} for summary in store.list_runs()]
        for one in runs:
            versions = one.pop("corpus_versions")
            one["corpus_version"] = next(iter(versions.values())) if len(versions) == 1 else versions
    if run_ids is not None:
        by_id = {run["run_id"]: run for run in runs}
        missing = [run_id for run_id in run_ids if run_id not in by_id]
        if missing:
            raise UsageError(f"run {missing[0]!r}: not in the store {store.url}; run `fieldeval runs list` for the ids")
        runs = [by_id[run_id] for run_id in dict.fromkeys(run_ids)]
    known = benchmarks()
    details: dict[str, list[dict[str, Any]]] = {}
    cluster_notes: dict[str, list[str]] = {}
    stored = {summary.run_id for summary in store.list_runs()}
    records: dict[str, dict[str, Any]] = {}
    for one in runs:
        version = one["corpus_version"]
        one["corpus_text"] = version if isinstance(version, str) else "; ".join(f"{b}={v}" for b, v in (version or {}).items())
        one["corpus_list"] = [version] if isinstance(version, str) else list((version or {}).values())
        if one["run_id"] in stored:
            records[one["run_id"]] = record = store.get_run(one["run_id"])
            for bench, entries in _entries(record, known).items():
                details.setdefault(bench, []).extend(entries)
            for bench, lines in few_cluster_notes(record).items():
                cluster_notes.setdefault(bench, []).extend(lines)
    merged = {(r.get("run_group"), r["run_id"]) for r in records.values()
              if r.get("run_group") and r.get("shard_index") is None}
    for one in runs:
        record = records.get(one["run_id"]) or {}
        errors = len(record.get("errors") or [])
        one["errored_items"] = errors
        one["errored"] = one["status"] in ERRORED or errors > 0
        group = record.get("run_group")
        one["shard_of"] = next((merged_id for g, merged_id in merged if g == group), None) \
            if group and record.get("shard_index") is not None else None
        one["shard"] = f"{record['shard_index']}/{record['shard_count']}" if one["shard_of"] else None
    keys = list(dict.fromkeys(e["key"] for entries in details.values() for e in entries))
    faces = [_face(known[name]) for name in sorted(details)]
    data = {"live": live, "benchmarks": faces, "entries": details, "colours": {k: i for i, k in enumerate(keys)},
            "runs": [{"run_id": r["run_id"], "status": r["status"], "errored": r["errored"],
                      "shard_of": r["shard_of"]} for r in runs],
            "available": [{"name": b.name, "title": b.title,
                           "corpus_versions": list(b.corpus_versions()) if b.corpus_versions else []}
                          for b in known.values()]}
    paired = differences(store, base, [r["run_id"] for r in runs if r["run_id"] in records and
                                       r["status"] in ("completed", "partial")])
    return {"runs": runs, "details": details, "data": script_json(data), "live": live,
            "differences": paired, "cluster_notes": cluster_notes, "legends": interval_legends(list(records.values())),
            "stored_runs": [summary.run_id for summary in store.list_runs()],
            "diff": diff_sections(store, base, run) if live else None, "base": base,
            "faces": {face["name"]: face for face in faces}, "available": data["available"],
            "audits": audit_groups(list(records.values())),
            "benchmarks": sorted({b for r in runs for b in r["benchmarks"]}),
            "models": sorted({m for r in runs for m in r["models"]}),
            "corpus_versions": sorted({v for r in runs for v in r["corpus_list"] if v})}


def render(store, jobs=None, *, run_ids: list[str] | None = None, live: bool = False, base: str | None = None,
           run: str | None = None) -> str:
    """The dashboard HTML; ``live`` pages load Plotly from the service and poll it, others inline everything.

    Args:
        store: the run store.
        jobs: the service's job table (None: stored runs only).
        run_ids: only these runs, in this order (None: every run).
        live: served by ``fieldeval serve`` (also shows the form that starts an evaluation).
        base: show each run's paired differences against this stored run.
        run: with ``base`` on a live page, the run whose items to diff against it (default: the newest other).

    Returns:
        One HTML document.

    Example:
        >>> Path("report.html").write_text(render(store, run_ids=["run_3b9e204a"]))  # doctest: +SKIP
    """
    from jinja2 import Environment, PackageLoader, select_autoescape

    from fieldeval.run.summary import format_p

    env = Environment(loader=PackageLoader("fieldeval.service", "templates"),
                      autoescape=select_autoescape(["html"], default_for_string=True, default=True))
    env.filters["num"] = lambda value, digits=3: "-" if value is None else f"{value:.{digits}f}"
    env.filters["pvalue"] = format_p
    script = (files("fieldeval.service") / "templates" / "dashboard.js").read_text(encoding="utf-8")
    plotly = None if live else Markup(plotly_path().read_text(encoding="utf-8").replace("</script", "<\\/script"))
    env.globals["item_href"] = item_href
    return env.get_template("dashboard.html").render(**context(store, jobs, run_ids=run_ids, live=live, base=base,
                                                               run=run),
                                                     script=Markup(script), plotly=plotly)
