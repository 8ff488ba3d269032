"""``fieldeval runs items RUN`` and ``fieldeval runs item RUN CASE_ID``: a stored run's items, from the shell."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from rich.markup import escape

from fieldeval.errors import UsageError
from fieldeval.store.shell import fmt, visible

TABLE_LIMIT = 50  # items a table shows unless --limit says otherwise (--json and --tsv: every item)
SHORT = 60  # characters of the response a table or TSV line shows


def short(text: str | None, width: int = SHORT) -> str:
    """``text`` on one line, its control characters shown (:func:`visible`), cut to ``width`` characters (an
    ellipsis marks the cut)."""
    flat = visible(" ".join((text or "").split()))
    return flat if len(flat) <= width else flat[:width - 1] + "\u2026"


def listed_columns(items: Sequence[Mapping[str, Any]], benchmark: str | None) -> list[str]:
    """The columns of a listing: the item columns, then the score columns of every benchmark listed."""
    from fieldeval.store.items import BASE_COLUMNS, score_columns

    columns = dict.fromkeys(BASE_COLUMNS)
    benches = [benchmark] if benchmark else list(dict.fromkeys(item["benchmark"] for item in items))
    for bench in benches:
        columns.update(dict.fromkeys(score_columns(bench).get(bench, ())))
    return list(columns)


def runs_items(args: argparse.Namespace) -> int:
    """Print one item per line (a table, ``--tsv`` or ``--json``), filtered, sorted and limited."""
    from fieldeval.inputs import tsv_cell
    from fieldeval.store.shell import command_store, make_console
    from fieldeval.store.items import items_page

    if args.limit is not None and args.limit < 1:
        raise UsageError(f"runs items --limit {args.limit}: must be at least 1; pass e.g. --limit 50")
    limit = args.limit if args.limit is not None else (None if args.json or args.tsv else TABLE_LIMIT)
    with command_store(args) as store:
        page = items_page(store, args.run_id, benchmark=args.benchmark, model=args.model, where=args.where,
                          sort=args.sort, limit=limit)
    items, total = page["items"], page["total"]
    columns = listed_columns(items, args.benchmark)
    if args.json or args.tsv:  # whole records: what each item's calls cost too
        from fieldeval.store.item_records import CALL_COLUMNS

        columns += [c for c in CALL_COLUMNS if c not in columns]
    if args.json:
        print(json.dumps([{**{c: item.get(c) for c in columns}, "response_text": item.get("response_text")}
                          for item in items], indent=2, ensure_ascii=False))
        return 0
    if args.tsv:
        out = sys.stdout
        out.write("\t".join(map(tsv_cell, [*columns, "response"])) + "\n")
        for item in items:
            out.write("\t".join(map(tsv_cell, [*(item.get(c) for c in columns), short(item.get("response_text"))]))
                      + "\n")
        return 0
    from rich import box
    from rich.table import Table

    table = Table(title=escape(f"{args.run_id}: {total} items" + (f", the first {len(items)} (--limit, or --json "
                                                                   "for all)" if len(items) < total else "")),
                  title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    cells = [[visible(fmt(item.get(c))) for c in columns] + [short(item.get("response_text"))] for item in items]
    for i, column in enumerate([*columns, "response"]):  # one line per item: headers may wrap, cells never do
        # a header breaks after its underscores (hazard_ / recognition), never a letter at a time
        header = column.replace("_", "_\n")
        widest = max([len(part) for part in header.split("\n")] + [len(row[i]) for row in cells])
        if column in ("cluster", "stratum", "response"):  # long free text: cut with an ellipsis (--json: whole)
            table.add_column(header, no_wrap=True, overflow="ellipsis", max_width=SHORT if column == "response"
                             else 20, min_width=min(widest, 12))
        else:
            table.add_column(header, overflow="fold", min_width=widest, justify="left" if column in (
                "benchmark", "model", "case_id", "status") else "right")
    for row in cells:
        table.add_row(*map(escape, row))
    console = make_console()
    console.print(table)
    if items:
        console.print(escape(f"one item whole: fieldeval runs item {args.run_id} {items[0]['case_id']}"))
    return 0


def _section(console: Any, title: str, text: str | None, missing: str = "not stored with this run") -> None:
    console.print(f"[bold]{escape(title)}[/bold]")
    console.print(escape(visible(text)) if text else f"[dim]{escape(missing)}[/dim]", soft_wrap=True)


def _print_item(console: Any, item: Mapping[str, Any]) -> None:
    where = " / ".join(str(item[k]) for k in ("benchmark", "model", "case_id"))
    drawn = ", ".join(f"{k} {item[k]}" for k in ("cluster", "stratum") if item.get(k) not in (None, ""))
    console.print(escape(f"{where}: {item['status']}" + (f" ({drawn})" if drawn else "")))
    for call in item.get("earlier_calls") or []:
        _section(console, "earlier call: system", call.get("system"), "none")
        _section(console, "earlier call: prompt", call.get("prompt"))
        _section(console, "earlier call: response", call.get("response_text"), "none")
    _section(console, "system", item.get("system"), "none" if item.get("prompt") else "not stored with this run")
    _section(console, "prompt", item.get("prompt"))
    _section(console, "response", item.get("response_text"), "none")
    if item["status"] == "scored":
        from rich.table import Table

        table = Table(title="scores", title_justify="left")
        table.add_column("column")
        table.add_column("value", overflow="fold")
        for name, value in item["scores"].items():
            table.add_row(escape(name), escape(visible(fmt(value))))
        console.print(table)
        _section(console, "explanation", item.get("explanation"), "none for this item")
    cost = item.get("est_cost_usd")
    console.print(escape(
        f"call: prompt tokens {fmt(item.get('prompt_tokens'))}, completion tokens "
        f"{fmt(item.get('completion_tokens'))}, cost {'-' if cost is None else f'${cost:.6f}'}, "
        f"latency {fmt(item.get('response_time_s'))} s, cached {fmt(item.get('cached'))}"))
    if item.get("error"):
        error = item["error"]
        console.print(escape(visible(f"error: {error.get('error_class')}: {error.get('message') or ''}")))


def runs_item(args: argparse.Namespace) -> int:
    """Print one item whole: what was sent, the response, its scores and why, and what the call cost."""
    from fieldeval.store.shell import command_store, make_console
    from fieldeval.store.items import item_whole

    with command_store(args) as store:
        item = item_whole(store, args.run_id, args.case_id, benchmark=args.benchmark, model=args.model)
    if args.json:
        print(json.dumps(item, indent=2, ensure_ascii=False, default=str))
        return 0
    _print_item(make_console(), item)
    return 0


def add_parsers(runs_sub: argparse._SubParsersAction) -> list[argparse.ArgumentParser]:
    """The ``runs items`` and ``runs item`` subparsers (their ``--store`` is added with the others')."""
    items = runs_sub.add_parser("items", help="a run's items, one per line: filter (--where), sort, limit")
    items.add_argument("run_id", metavar="RUN")
    items.add_argument("--benchmark", metavar="B", help="only this benchmark's items")
    items.add_argument("--model", metavar="M", help="only this model's items")
    items.add_argument("--where", metavar="EXPR",
                       help="a filter on the listed columns, e.g. \"ontology_score < 0.5\" or "
                            "\"relationship == 'ancestor'\" (and / or / not, in, is None)")
    items.add_argument("--sort", metavar="COL", help="order by this column (-COL: descending); blanks come last")
    items.add_argument("--limit", type=int, metavar="N", default=None,
                       help=f"at most N items (default: {TABLE_LIMIT} in the table, every item with --json or --tsv)")
    shape = items.add_mutually_exclusive_group()
    shape.add_argument("--json", action="store_true", help="print an array of objects, with the full response_text")
    shape.add_argument("--tsv", action="store_true", help="print a tab-separated table")
    items.set_defaults(func=runs_items)
    item = runs_sub.add_parser("item", help="one item whole: prompt, response, scores, explanation, cost")
    item.add_argument("run_id", metavar="RUN")
    item.add_argument("case_id", metavar="CASE_ID")
    item.add_argument("--benchmark", metavar="B", help="the item's benchmark (when the case id names several)")
    item.add_argument("--model", metavar="M", help="the item's model (when the run holds several)")
    item.add_argument("--json", action="store_true", help="print the item as JSON")
    item.set_defaults(func=runs_item)
    return [items, item]
