"""``fieldeval runs ...`` and ``fieldeval models ...``: the run store and model registry from the shell.

Every subcommand takes ``--store URL`` (default ``$FIELDEVAL_STORE``, else
``reports/fieldeval.db``); a user mistake is one line and exit status 2. Only
``models add`` creates a store; the others need one (a missing, empty or damaged
file is one line). Names, labels and messages are data: they are escaped, never
read as rich markup.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rich.markup import escape

from fieldeval.store.compare_cli import runs_compare
from fieldeval.store.shell import add_run_id_column, add_store_option, command_store, fmt, make_console, visible


def _versions(versions: dict[str, str | None]) -> str:
    """``ibf-v2.1`` for one benchmark, ``ebs=...; ibf=...`` for several."""
    if len(versions) == 1:
        return escape(next(iter(versions.values())) or "-")
    return escape("; ".join(f"{bench}={version or '-'}" for bench, version in versions.items()))


def _items(run: Any) -> str:
    """``338/340 (2 errored)`` from a run's counts, or the total items for runs stored before they were kept."""
    data = run if isinstance(run, dict) else run.as_dict()
    if data.get("items_planned") is None:
        return fmt(data.get("total_items"))
    text = f"{fmt(data.get('items_done'))}/{data['items_planned']}"
    return text + (f" ({data['items_errored']} errored)" if data.get("items_errored") else "")


def _runs_list(args: argparse.Namespace) -> int:
    from rich.table import Table

    with command_store(args) as store:
        runs = store.list_runs(benchmark=args.benchmark, corpus_version=args.corpus_version)
    kept = _kept_lines(args.reports_dir, {run.run_id for run in runs})
    if args.json:
        print(json.dumps([run.as_dict() for run in runs], indent=2))
        for line in kept:  # the JSON on stdout stays the store's runs alone
            print(line, file=sys.stderr)
        return 0
    if not runs:
        print(f"no runs in {store.url}" + (" matching the filters" if args.benchmark or args.corpus_version else ""))
        for line in kept:
            print(line)
        return 0
    print(f"runs in {store.url}")  # a plain line: which store this is, never wrapped or cut
    table = Table()
    add_run_id_column(table, "run_id", [run.run_id for run in runs])
    for column in ["created_at", "label", "benchmarks", "models", "corpus", "status", "items"]:
        table.add_column(column, justify="right" if column == "items" else "left", overflow="fold")
    for run in runs:
        corpus = _versions(run.corpus_versions) + (" (legacy)" if run.legacy else "")
        table.add_row(escape(run.run_id), run.created_at, escape(run.label or "-"), escape(", ".join(run.benchmarks)),
                      escape(", ".join(run.models)), corpus,
                      escape(run.status + (" (unverified)" if run.unverified else "")), _items(run))
    make_console().print(table, crop=False)  # run ids whole even where the table cannot fit
    for line in kept:
        print(line)
    return 0


def _kept_lines(reports_dir: str, stored: set[str]) -> list[str]:
    """One line per run a session kept because its save was refused or cut off, with the command that stores it."""
    from pathlib import Path

    from fieldeval.store.pending import unstored_runs

    lines = []
    for path in unstored_runs(Path(reports_dir)):
        status = _kept_status(path.parent)
        also = "; a run of that id is stored" if path.parent.name.split(".")[0] in stored else ""
        lines.append(f"not stored ({status}{also}): {path.parent.name}, kept in {path}; "
                     f"store it with `fieldeval runs push {path}`")
    return lines


def _kept_status(folder: Any) -> str:
    """What a kept run's status.json says of its save: refused (kept), or cut off while saving."""
    try:
        status = json.loads((folder / "status.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "its save was cut off"
    if status.get("status") == "saving":
        return f"its save was cut off, run {status.get('run_status', '?')}"
    return f"the store refused it, run {status.get('run_status') or status.get('status', '?')}"


# the totals `runs show` prints: the calls' time is their sum, which concurrent calls overlap (not the run's span)
TOTAL_ROWS = (("items", "items"), ("cached", "cached"), ("prompt_tokens", "prompt tokens"),
              ("completion_tokens", "completion tokens"), ("est_cost_usd", "cost (USD)"),
              ("response_time_s", "calls' time, summed (s)"))


def options_text(sent: dict | list | None) -> str:
    """The options a model was sent, one per line, as ``runs show`` prints them: ``none`` for a model that takes
    none, ``--`` between sets when its items were sent different ones.

    Example:
        >>> options_text({"max_tokens": 128})
        'max_tokens 128'
    """
    if sent is None:
        return "not recorded"
    sets = sent if isinstance(sent, list) else [sent]
    return "\n--\n".join("\n".join(f"{k} {v}" for k, v in one.items()) or "none" for one in sets)


def _runs_show(args: argparse.Namespace) -> int:
    from rich.table import Table

    with command_store(args) as store:
        run = store.get_run(args.run_id)
    if args.json:
        print(json.dumps(run, indent=2, sort_keys=True, default=str))
        return 0
    console = make_console()
    console.print(escape(f"run {run['run_id']}  {run['label'] or ''}".rstrip()))
    for key in ["status", "created_at", "completed_at", "ontology_version", "git_commit", "total_items", "responses"]:
        console.print(escape(f"  {key}: {fmt(run[key])}"))
    if run.get("items_planned") is not None:
        console.print(escape(f"  items done/planned: {_items(run)}"))
    console.print(f"  corpus: {_versions(run['corpus_versions'])}" + ("  (legacy corpus)" if run["legacy"] else ""))
    from fieldeval.benchmark import benchmarks
    from fieldeval.run.summary import few_cluster_notes, format_metric, interval_legend

    installed = benchmarks()
    for bench, by_model in run["metrics"].items():
        headline = run["headline"].get(bench) or sorted({m for v in by_model.values() for m in v})
        legend = interval_legend(bench, by_model) if bench in installed else []
        called = installed[bench].clusters_called if bench in installed else "clusters"
        title = f"value (ci95 on new {called}; on more samples from these)" if legend else "value (ci95 lo-hi)"
        # metrics as rows and a column per model, each value above its intervals: readable at 80 columns
        table = Table(title=escape(f"{bench}: {title}"), title_justify="left")
        table.add_column("metric", no_wrap=True)
        for model in by_model:
            table.add_column(escape(model), justify="right", overflow="fold")
        for metric in headline:
            table.add_row(escape(metric), *(format_metric(metrics.get(metric)).replace(" (", "\n(", 1)
                                            for metrics in by_model.values()))
        entries = ((run.get("payload") or {}).get("benchmarks") or {}).get(bench) or {}
        sent = [entries.get(model, {}).get("options_sent") for model in by_model]
        if any(s is not None for s in sent):  # what each model was really sent: a plugin may take no temperature
            table.add_row("options sent", *(escape(options_text(s)) for s in sent))
        console.print(table)
        for line in legend + (few_cluster_notes(bench, by_model) if bench in installed else []):
            console.print(escape(f"  {line}"))
    if run.get("totals"):
        table = Table(title="totals", title_justify="left")
        table.add_column("total", no_wrap=True)
        for model in run["totals"]:
            table.add_column(escape(model), justify="right", overflow="fold")
        missing = {"prompt_tokens": "not reported", "completion_tokens": "not reported", "est_cost_usd": "no price"}
        for key, name in TOTAL_ROWS:
            table.add_row(name, *(fmt(total.get(key)) if total.get(key) is not None else missing.get(key, "-")
                                  for total in run["totals"].values()))
        console.print(table)
        if run.get("created_at") and run.get("completed_at"):
            from fieldeval.store.schema import parse_time

            span = (parse_time(run["completed_at"]) - parse_time(run["created_at"])).total_seconds()
            console.print(escape(f"  the run's wall time: {span:.0f} s, start to end (calls in flight at once "
                                 "overlap, so their summed time can exceed it)"))
    if run["errors"]:
        table = Table(title=f"errored items ({len(run['errors'])})", title_justify="left")
        for column in ["model", "benchmark", "item", "error", "message"]:
            table.add_column(column, overflow="fold")
        for error in sorted(run["errors"], key=lambda e: (e["model"], e["benchmark"])):
            table.add_row(*(escape(visible(error[key] or "-")) for key in ("model", "benchmark", "item_id",
                                                                            "error_class", "message")))
        console.print(table)
    return 0




def _runs_merge(args: argparse.Namespace) -> int:
    import os

    from fieldeval.settings import tool_settings
    from fieldeval.store.location import project_root
    from fieldeval.store.groups import merge_group
    from fieldeval.run.summary import gate_line, render_markdown, render_summary

    from fieldeval.run.gates import check_gate_options

    check_gate_options(args.max_errors, args.regression_tolerance)
    tool = tool_settings(project_root())  # the thresholds of the project the command runs in
    with command_store(args) as store:
        merged = merge_group(store, args.group, tool, allow_partial=args.allow_partial, max_errors=args.max_errors,
                             baseline_run=args.baseline_run, tolerance=args.regression_tolerance)
        run = store.get_run(merged.run_id) if args.json else None
    summary_md = args.summary_md or os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_md:
        with open(summary_md, "a", encoding="utf-8") as handle:
            handle.write(render_markdown(merged.payload))
    if run is not None:
        print(json.dumps(run, indent=2, sort_keys=True, default=str))
    else:
        print(f"merged {len(merged.shards)} shards of run group {args.group} into {merged.run_id}")
        print(render_summary(merged.payload), end="")
    for gate in merged.payload["gates"]:  # with --json, stdout holds the JSON alone
        print(gate_line(gate), file=sys.stdout if gate["passed"] and run is None else sys.stderr)
    return 0 if merged.gates_passed else 1


def _runs_push(args: argparse.Namespace) -> int:
    from pathlib import Path

    from fieldeval.errors import UsageError
    from fieldeval.run.options import RUN_ID
    from fieldeval.run.runfiles import session_alive
    from fieldeval.store.pending import find_unstored, push, read_unstored

    target = args.run_id
    if RUN_ID.fullmatch(target):
        path = find_unstored(Path(args.reports_dir), target)
    elif target.endswith(".json") or Path(target).is_file():
        path = Path(target)
    else:
        raise UsageError(f"runs push {target!r}: not a run id nor a kept file; pass the id the session printed "
                         "(e.g. run_3b9e204a) or its reports/runs/<run>/unstored.json")
    if session_alive(path.parent):
        raise UsageError(f"runs push {target}: the session that kept {path} is still running and stores the run "
                         "itself; wait for it to end, then see `fieldeval runs list` before pushing")
    run = read_unstored(path)
    with command_store(args, create=True) as store:
        stored_id = push(run, store, as_id=args.as_id, unverified=args.unverified)
    count = sum(len(rows) for rows in run.rows.values())
    print(f"stored {stored_id} ({count} responses) in {store.url}")
    return 0


def _runs_delete(args: argparse.Namespace) -> int:
    with command_store(args) as store:
        deleted = store.delete_run(args.run_id)
    print(f"deleted {args.run_id} and its {deleted} responses")
    return 0


def _models_add(args: argparse.Namespace) -> int:
    from fieldeval.calls.endpoints import check_endpoint, register_endpoint

    check_endpoint(args.endpoint)  # before a store is created for it
    with command_store(args, create=True) as store:
        record, created = register_endpoint(
            store, args.name, args.endpoint, key_env=args.key_env, replace=args.replace, provider=args.provider,
            context_window=args.context_window, parameters_billion=args.parameters_billion, notes=args.notes,
            **({"batch": True} if args.batch else {}))
    state = ("registered" if created else "already registered") + (f" (key from ${record.key_env})"
                                                                    if record.key_env else "")
    print(f"{record.model_id}  {record.name}  {record.endpoint}  {state} {record.registered_at}")
    return 0


def _models_list(args: argparse.Namespace) -> int:
    from rich.table import Table

    with command_store(args) as store:
        records = store.list_models()
    if args.json:
        print(json.dumps([record.as_dict() for record in records], indent=2))
        return 0
    if not records:
        print(f"no models in {store.url}; add one with `fieldeval models add NAME --endpoint URL`")
        return 0
    table = Table(title=escape(f"models in {store.url}"), title_justify="left")
    columns = ["model_id", "name", "provider", "endpoint", "key_env", "context_window", "parameters_billion",
               "registered_at", "notes"]
    for column in columns:
        table.add_column(column)
    for record in records:
        data = record.as_dict()
        table.add_row(*("-" if data[column] is None else escape(str(data[column])) for column in columns))
    make_console().print(table)
    return 0


def register_cli(sub: argparse._SubParsersAction) -> None:
    """Add the ``runs`` and ``models`` subcommands to the ``fieldeval`` parser's subparsers ``sub``."""
    runs = sub.add_parser("runs", help="list, show, compare, diff, merge and delete stored runs; read their items")
    runs_sub = runs.add_subparsers(dest="runs_command", required=True)
    r_list = runs_sub.add_parser("list", help="stored runs, oldest first")
    r_list.add_argument("--benchmark", metavar="B", help="only runs of this benchmark, e.g. ebs or ibf")
    r_list.add_argument("--corpus-version", metavar="V", help="only runs on this corpus or suite version")
    r_list.add_argument("--json", action="store_true", help="print JSON instead of a table")
    r_list.add_argument("--reports-dir", metavar="DIR", default="reports",
                        help="where sessions keep the runs the store did not take (default: reports)")
    r_list.set_defaults(func=_runs_list)
    r_show = runs_sub.add_parser("show", help="one run's metrics and totals")
    r_show.add_argument("run_id", metavar="RUN")
    r_show.add_argument("--json", action="store_true", help="print the stored record as JSON")
    r_show.set_defaults(func=_runs_show)
    r_compare = runs_sub.add_parser(
        "compare", help="headline metrics of several runs side by side, and each run's paired differences "
                        "against the first (run - first, ci95)")
    r_compare.add_argument("run_ids", metavar="RUN", nargs="+")
    r_compare.add_argument("--json", action="store_true", help="print the compare payload as JSON")
    r_compare.add_argument("--allow-mixed-rules", action="store_true", dest="allow_mixed_rules",
                           help="also compare runs scored under different scoring rules (e.g. --ebs-truth curie and "
                                "label)")
    r_compare.add_argument("--allow-partial", action="store_true", dest="allow_partial",
                           help="also compare runs that did not complete every planned item (marked with their status)")
    r_compare.add_argument("--cluster-by", choices=("benchmark", "none"), default=None, dest="cluster_by",
                           help="paired intervals resample whole clusters (benchmark) or items (none); "
                                "default: as the first run was stored")
    r_compare.set_defaults(func=runs_compare)
    r_merge = runs_sub.add_parser(
        "merge", help="store the shards of a sharded run (--run-group NAME) as one run; exit 1 when a gate fails")
    r_merge.add_argument("group", metavar="NAME", help="the --run-group the shards ran with")
    r_merge.add_argument("--json", action="store_true", help="print the merged run's stored record as JSON")
    r_merge.add_argument("--summary-md", metavar="PATH",
                         help="append a Markdown summary here (default: $GITHUB_STEP_SUMMARY when set)")
    r_merge.add_argument("--allow-partial", action="store_true", dest="allow_partial",
                         help="merge even when shards are partial or their union lacks planned items "
                              "(the merged run is then partial)")
    r_merge.add_argument("--max-errors", type=int, metavar="N", default=None, dest="max_errors",
                         help="let the gates judge a partial merge with at most N errored or missing items")
    r_merge.add_argument("--baseline-run", metavar="RUN_ID", dest="baseline_run",
                         help="exit 1 when a headline metric is worse than this stored run's with 95%% confidence")
    r_merge.add_argument("--regression-tolerance", type=float, metavar="D", default=0.0, dest="regression_tolerance",
                         help="a drop the --baseline-run gate tolerates, in the metric's units (default: 0)")
    r_merge.set_defaults(func=_runs_merge)
    r_push = runs_sub.add_parser("push", help="store a run its session kept because the store could not take it")
    r_push.add_argument("run_id", metavar="RUN_OR_FILE",
                        help="the run id its session printed, or the path of its unstored.json")
    r_push.add_argument("--unverified", action="store_true",
                        help="store a run kept by an older fieldeval, which wrote no digests to check it by; "
                             "it is marked unverified in the store and in runs list")
    r_push.add_argument("--as", dest="as_id", metavar="NEW_ID",
                        help="store it under this run id (when the store holds another run of its id)")
    r_push.add_argument("--reports-dir", metavar="DIR", default="reports",
                        help="the session's reports folder, holding runs/RUN/unstored.json (default: reports)")
    r_push.set_defaults(func=_runs_push)
    r_delete = runs_sub.add_parser("delete", help="hard-delete a run and its responses")
    r_delete.add_argument("run_id", metavar="RUN")
    r_delete.set_defaults(func=_runs_delete)
    from fieldeval.store.diff_cli import add_parser as add_diff_parser

    r_diff = add_diff_parser(runs_sub)
    from fieldeval.store.items_cli import add_parsers as add_items_parsers

    r_items, r_item = add_items_parsers(runs_sub)

    model = sub.add_parser("models", help="register OpenAI-compatible model endpoints")
    model_sub = model.add_subparsers(dest="models_command", required=True)
    m_add = model_sub.add_parser("add", help="register NAME at an endpoint (idempotent; one endpoint per name)")
    m_add.add_argument("name", metavar="NAME", help="the model name the server serves; also the --model id")
    m_add.add_argument("--endpoint", metavar="URL", required=True,
                       help="OpenAI-compatible base URL, e.g. http://localhost:11434/v1")
    m_add.add_argument("--provider", help="who serves it, e.g. local, ollama, vllm")
    m_add.add_argument("--context-window", type=int, metavar="TOKENS", help="context window in tokens")
    m_add.add_argument("--parameters-billion", type=float, metavar="B", help="size in billions of parameters")
    m_add.add_argument("--notes", help="free text, e.g. quantisation and hardware")
    m_add.add_argument("--key-env", metavar="VAR", dest="key_env",
                       help="environment variable holding the endpoint's API key, read at call time; only the "
                            "name is stored (`llm keys set VAR` works too)")
    m_add.add_argument("--batch", action="store_true",
                       help="the endpoint offers OpenAI's Batch API (/v1/files, /v1/batches): `pytest evals --batch` "
                            "sends its calls as batches")
    m_add.add_argument("--replace", action="store_true",
                       help="point an already registered NAME at this endpoint instead of refusing")
    m_add.set_defaults(func=_models_add)
    m_list = model_sub.add_parser("list", help="registered models")
    m_list.add_argument("--json", action="store_true", help="print JSON instead of a table")
    m_list.set_defaults(func=_models_list)
    for parser in (r_list, r_show, r_compare, r_merge, r_push, r_delete, r_diff, r_items, r_item, m_add, m_list):
        add_store_option(parser)
