"""What the store's commands (``fieldeval runs ...``, ``fieldeval models ...``) share: the store ``--store`` names,
the console they print to, and a metric's cell."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def command_store(args: argparse.Namespace, *, create: bool = False) -> Iterator[Any]:
    """The store named by ``--store`` (or the default); a database failure while using it is one line."""
    from fieldeval.store import declared_columns, open_store
    from fieldeval.store.url import database_errors

    with open_store(args.store, columns=declared_columns(), create=create) as store, database_errors(store.url):
        yield store


def make_console():
    """A rich console on the current stdout (so tests can capture it)."""
    from rich.console import Console

    return Console(file=sys.stdout, highlight=False, width=None if sys.stdout.isatty() else 200)


_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """``text`` with every control character but newline and tab shown as ``\\xNN``: a model's answer that holds a
    terminal escape (a clipboard write, a new window title, a cleared screen) is printed, never obeyed."""
    return _CONTROLS.sub(lambda found: f"\\x{ord(found.group()):02x}", text)


def fmt(value: Any) -> str:
    """A metric value for a table cell."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if 0 < abs(value) < 0.001 else f"{value:.3f}"  # a cost of 5.76e-05 is not 0.000
    return str(value)


def add_run_id_column(table: Any, header: str, run_ids: list[str], **options: Any) -> None:
    """A column of run ids as wide as the longest: never wrapped nor cut, whatever the terminal's width (the other
    columns fold)."""
    table.add_column(header, no_wrap=True, min_width=max(len(run_id) for run_id in [header, *run_ids]), **options)


def add_store_option(parser: argparse.ArgumentParser) -> None:
    """The ``--store`` option every subcommand takes."""
    parser.add_argument("--store", metavar="URL", default=None,
                        help="sqlite:///PATH or postgresql://USER:PASSWORD@HOST/DB "
                             "(default: $FIELDEVAL_STORE, else reports/fieldeval.db)")


__all__ = ["add_run_id_column", "add_store_option", "command_store", "fmt", "make_console"]
