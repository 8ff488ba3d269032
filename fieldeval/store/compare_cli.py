"""``fieldeval runs compare RUN...``: stored runs side by side, their paired differences and the models tied with
the best."""

from __future__ import annotations

import argparse
import json
import sys

from rich.markup import escape

from fieldeval.store.shell import add_run_id_column, command_store, fmt, make_console


def runs_compare(args: argparse.Namespace) -> int:
    """Print the headline metrics of the runs side by side, each run's paired differences against the first, and
    the models tied with the best (tables, or the compare payload with ``--json``)."""
    from rich.table import Table

    with command_store(args) as store:
        store.check_scoring_rules(args.run_ids, allow_mixed=args.allow_mixed_rules)
        payload = store.compare(args.run_ids, allow_partial=args.allow_partial)
        paired = store.differences(args.run_ids[0], args.run_ids[1:], cluster_by=args.cluster_by)
        rankings = _rankings(store, args.run_ids, cluster_by=args.cluster_by)
    payload["differences"] = paired["differences"]
    if rankings:
        payload["tied_with_best"] = rankings
    for note in paired["notes"]:
        print(f"fieldeval: {note}", file=sys.stderr)
    if args.json:
        print(json.dumps(payload, indent=2))
        return 0
    entries = payload["runs"]
    table = Table(title="headline metrics, side by side", title_justify="left")
    table.add_column("benchmark", overflow="fold", min_width=3)
    table.add_column("metric", overflow="fold", min_width=3)
    for entry in entries:  # the header's first line, the run id, is never cut (the other columns fold first)
        tag = (" (legacy)" if entry.get("legacy") else "") + (f" ({entry['status']})" if "status" in entry else "")
        table.add_column(escape(f"{entry['run_id']}\n{entry['model_name']}{tag}"), justify="right", no_wrap=True,
                         min_width=len(entry["run_id"]))
    rows: dict[tuple[str, str], None] = {}
    for entry in entries:
        for bench, metrics in entry["benchmarks"].items():
            rows.update(((bench, metric), None) for metric in metrics)
    for bench, metric in rows:
        table.add_row(escape(bench), escape(metric), *(fmt(e["benchmarks"].get(bench, {}).get(metric)) for e in entries))
    console = make_console()
    console.print(table, crop=False)  # run ids whole even where the table cannot fit
    if payload["differences"]:
        from fieldeval.run.summary import format_difference, format_p
        from fieldeval.stats import FEW_CLUSTERS
        from fieldeval.stats.paired import family_size
        from fieldeval.stats.wording import span

        family = family_size(payload["differences"])
        diff_table = Table(title=escape(f"paired differences against {args.run_ids[0]} (run - base): {family} "
                                        "comparisons; each difference with its ci95 on new clusters, then on more "
                                        "samples from these clusters; p, then Holm-adjusted p; * where that is "
                                        "below 0.05"), title_justify="left")
        wide = "run - base"
        for column in ["benchmark", "metric", "model", "run", wide, "p (Holm)", "items / clusters"]:
            if column == "run":
                add_run_id_column(diff_table, column, [d["run"] for d in payload["differences"]])
                continue
            diff_table.add_column(column, justify="left" if column in ("benchmark", "metric", "model") else "right",
                                  no_wrap=column == wide, overflow="fold", min_width=3)
        for d in payload["differences"]:  # each interval on a line of its own, so the table fits 80 columns
            diff_table.add_row(escape(d["benchmark"]), escape(d["metric"]), escape(d["model"]), escape(d["run"]),
                               f"{format_difference(d)}\n{span(d.get('ci95_within'), sign=True)}",
                               f"{format_p(d.get('p_value'))}\n({format_p(d.get('p_holm'))})",
                               f"{d['n_items']} / {d['n_clusters']}")
        console.print(diff_table, crop=False)
        thin = sorted({(d["benchmark"], d["n_clusters"]) for d in payload["differences"]
                       if d.get("n_clusters") is not None and d["n_clusters"] < FEW_CLUSTERS})
        for bench, clusters in thin:
            console.print(escape(f"note: {bench}'s differences rest on {clusters} clusters (under {FEW_CLUSTERS}): "
                                 "the intervals on new clusters are wide and approximate"))
    if rankings:
        from fieldeval.stats.ranking import tied_line

        for run_id, by_bench in rankings.items():
            for bench, ranking in by_bench.items():
                console.print(escape(f"run {run_id}: {tied_line(bench, ranking)}"), crop=False, soft_wrap=True)
    return 0


def _rankings(store, run_ids, *, cluster_by: str | None) -> dict[str, dict]:
    """``{run_id: {bench: ranking}}`` for each run of two or more models (or matrix combinations) in a
    benchmark: the best by its lead metric and those tied with it after Holm."""
    from fieldeval.benchmark import benchmarks
    from fieldeval.stats import DEFAULT_RESAMPLES, DEFAULT_SEED
    from fieldeval.stats.ranking import tied_with_best

    installed = benchmarks()
    out: dict[str, dict] = {}
    for run_id in dict.fromkeys(run_ids):
        metrics = store.get_run(run_id)["metrics"]
        several = [b for b, models in metrics.items() if len(models) > 1 and b in installed]
        if not several:
            continue
        settings = store.run_settings(run_id)
        rows = store.run_rows(run_id)
        for bench in several:
            ranking = tied_with_best(bench, rows.get(bench, []), metrics[bench],
                                     seed=int(settings.get("seed") or DEFAULT_SEED),
                                     resamples=int(settings.get("resamples") or DEFAULT_RESAMPLES),
                                     cluster_by=cluster_by or settings.get("cluster_by") or "benchmark")
            if ranking:
                out.setdefault(run_id, {})[bench] = ranking
    return out
