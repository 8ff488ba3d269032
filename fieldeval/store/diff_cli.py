"""``fieldeval runs diff BASE RUN``: the items that changed between two stored runs, from the shell."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from typing import Any

from rich.markup import escape

from fieldeval.errors import UsageError

SHOWN_IDS = 5


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _items_table(title: str, items: Sequence[Mapping[str, Any]], limit: int) -> Any:
    from rich.table import Table

    table = Table(title=escape(title), title_justify="left")
    for column in ("case_id", "base", "run", "delta"):
        table.add_column(column, justify="left" if column == "case_id" else "right", overflow="fold")
    for item in items[:limit]:
        table.add_row(escape(item["case_id"]), _num(item["base"]), _num(item["run"]), f"{item['delta']:+.3f}")
    return table


def _transitions_table(diff: Mapping[str, Any]) -> Any:
    from rich.table import Table

    from fieldeval.store.diff import updown

    rows = diff["transitions"]
    table = Table(title=escape(f"{diff['benchmark']}: outcome, base -> run"), title_justify="left")
    if rows and "dimension" in rows[0]:
        for column in ("dimension", "up", "down", "unchanged"):
            table.add_column(column, justify="left" if column == "dimension" else "right")
        for entry in updown(rows):
            table.add_row(escape(entry["dimension"]), str(entry["up"]), str(entry["down"]), str(entry["unchanged"]))
        return table
    keyed = bool(rows) and "class" in rows[0]
    for column in (["class"] if keyed else []) + ["base", "run", "items"]:
        table.add_column(column, justify="right" if column == "items" else "left")
    for entry in rows:
        table.add_row(*([escape(str(entry["class"]))] if keyed else []), escape(str(entry["from"])),
                      escape(str(entry["to"])), str(entry["count"]))
    return table


def _flips_table(diff: Mapping[str, Any], cis: Mapping[str, Any]) -> Any:
    from rich.table import Table

    table = Table(title="flips (b: right in base, wrong in run; c: the reverse; exact McNemar)", title_justify="left")
    for column in ("metric", "b worse", "c better", "p_value", "paired difference (ci95)"):
        table.add_column(column, justify="left" if column == "metric" else "right", no_wrap=True)
    for flip in diff["flips"]:
        ci = cis.get(flip["metric"])
        text = "-" if ci is None or ci["value"] is None else (
            f"{ci['value']:+.3f} ({_num(ci['ci95'][0])} to {_num(ci['ci95'][1])})")
        table.add_row(escape(flip["metric"]), str(flip["worse"]), str(flip["better"]), f"{flip['p_value']:.4g}", text)
    return table


def _print_diff(console: Any, diff: Mapping[str, Any], cis: Mapping[str, Any], limit: int) -> None:
    from fieldeval.store.diff import worse_better

    worse, better, unchanged, unscored = worse_better(diff["items"])
    console.print(escape(f"{diff['benchmark']}: {diff['run']} against {diff['base_run']}, "
                         f"{diff['paired_items']} paired items"))
    for title, items in ((f"worse ({len(worse)}), worst first", worse), (f"better ({len(better)}), best first", better)):
        if len(items) > limit:
            title += f"; the first {limit} (--limit, or --json for all)"
        console.print(_items_table(title, items, limit) if items else escape(f"  {title.split(',')[0]}: none"))
    console.print(f"  unchanged: {unchanged}" + (f"; not scored in one run: {unscored}" if unscored else ""))
    console.print(_transitions_table(diff))
    console.print(_flips_table(diff, cis))
    for run_id, ids in ((diff["base_run"], diff["only_in_base"]), (diff["run"], diff["only_in_run"])):
        if ids:
            shown = ", ".join(ids[:SHOWN_IDS]) + (", ..." if len(ids) > SHOWN_IDS else "")
            console.print(escape(f"  only in {run_id}: {len(ids)} items: {shown}"))


def runs_diff(args: argparse.Namespace) -> int:
    """Print the diff of RUN against BASE (tables, or one benchmark's JSON with ``--json``)."""
    from fieldeval.store.shell import command_store, make_console
    from fieldeval.store.diff import paired_ci, run_diff

    if args.limit < 1:
        raise UsageError(f"runs diff --limit {args.limit}: must be at least 1; pass e.g. --limit 20")
    with command_store(args) as store:
        diffs = run_diff(store, args.base, args.run, benchmark=args.benchmark, base_model=args.base_model,
                         model=args.model)
        if args.json:
            if len(diffs) > 1:
                raise UsageError(f"runs diff --json: runs {args.base} and {args.run} share "
                                 f"{', '.join(d['benchmark'] for d in diffs)}; pass --benchmark with one of them")
            print(json.dumps(diffs[0], indent=2))
            return 0
        cis = {d["benchmark"]: paired_ci(store, d, base_model=args.base_model, model=args.model) for d in diffs}
    console = make_console()
    for diff in diffs:
        ci = cis[diff["benchmark"]]
        _print_diff(console, diff, {ci["metric"]: ci} if ci else {}, args.limit)
    return 0


def add_parser(runs_sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """The ``runs diff`` subparser (its ``--store`` is added with the others')."""
    parser = runs_sub.add_parser(
        "diff", help="the items of RUN that got worse or better than in BASE, outcome transitions and flips "
                     "(exact McNemar)")
    parser.add_argument("base", metavar="BASE", help="the base run id")
    parser.add_argument("run", metavar="RUN", help="the run to diff against it")
    parser.add_argument("--benchmark", metavar="B", help="only this benchmark (default: every one both runs hold)")
    parser.add_argument("--base-model", metavar="M", dest="base_model",
                        help="the base run's model to diff (default: its only model)")
    parser.add_argument("--model", metavar="M", help="RUN's model to diff (default: its only model)")
    parser.add_argument("--limit", type=int, metavar="N", default=20,
                        help="worse and better items shown in the tables (default: 20; --json lists all)")
    parser.add_argument("--json", action="store_true",
                        help="print one benchmark's diff as JSON (every paired item, worst first)")
    parser.set_defaults(func=runs_diff)
    return parser
