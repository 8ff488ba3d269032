"""mkdocs hook: fill the reference pages from the code, so they cannot drift from ``--help``.

A page holds a marker on a line of its own; the hook puts in its place:

- ``<!-- fieldeval:cli -->``: every ``fieldeval`` subcommand's ``--help``, walked from
  ``fieldeval.cli.build_parser()``;
- ``<!-- fieldeval:pytest-options -->``: the plugin's groups of ``pytest --help`` (the engine's and
  each installed benchmark's), cut from a ``python -m pytest --help`` subprocess in the project root;
- ``<!-- fieldeval:store-tables -->``: the run store's tables and columns, from their SQLAlchemy
  definitions, with each benchmark's declared columns.

A marker whose source cannot be read fails the build.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

WIDTH = "100"  # help is wrapped at this many columns, whatever the terminal building the site
MARKERS = ("<!-- fieldeval:cli -->", "<!-- fieldeval:pytest-options -->", "<!-- fieldeval:store-tables -->")


@contextmanager
def _columns(width: str) -> Iterator[None]:
    """argparse and pytest wrap help at $COLUMNS: fix it while the help is rendered."""
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = width
    try:
        yield
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


def _subparsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """The parsers of ``parser``'s subcommands, in the order --help lists them.

    argparse has no public way to walk subcommands; its ``_SubParsersAction`` has been stable since 3.2.
    """
    for action in parser._actions:  # noqa: SLF001 - see the docstring
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            seen: set[int] = set()
            for sub in action.choices.values():
                if id(sub) not in seen:  # an alias names the same parser twice
                    seen.add(id(sub))
                    yield sub


def _walk(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``parser`` and every parser below it, depth first."""
    yield parser
    for sub in _subparsers(parser):
        yield from _walk(sub)


def cli_reference() -> str:
    """Markdown: one section per ``fieldeval`` command, its ``--help`` as text."""
    from fieldeval.cli import build_parser

    parts = []
    with _columns(WIDTH):
        for parser in _walk(build_parser()):
            level = "#" * min(2 + parser.prog.count(" "), 4)
            parts.append(f"{level} `{parser.prog}`\n\n```text\n{parser.format_help().rstrip()}\n```\n")
    return "\n".join(parts)


def _help_sections(text: str) -> list[tuple[str, list[str]]]:
    """``pytest --help`` as (heading, lines) pairs: a heading is an unindented line ending in ':'."""
    sections: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line and not line[0].isspace() and line.rstrip().endswith(":"):
            sections.append((line.rstrip()[:-1], []))
        elif sections:
            sections[-1][1].append(line)
    return sections


def pytest_options(root: Path) -> str:
    """Markdown: the fieldeval groups of ``pytest --help``, each as text under its own heading."""
    env = {**os.environ, "COLUMNS": WIDTH, "PYTEST_ADDOPTS": ""}
    done = subprocess.run([sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"], cwd=root,
                          env=env, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"pytest --help exited {done.returncode} in {root}: {done.stderr.strip()[-500:]}")
    groups = [(name, lines) for name, lines in _help_sections(done.stdout) if name.startswith("fieldeval")]
    if not groups:
        raise RuntimeError(f"pytest --help in {root} has no fieldeval group: is the plugin installed?")
    parts = []
    for name, lines in groups:
        body = "\n".join(lines).strip("\n")
        parts.append(f"### {name}\n\n```text\n{body}\n```\n")
    return "\n".join(parts)


def store_tables() -> str:
    """Markdown: one table per store table (column, type, key and nullability)."""
    import sqlalchemy as sa

    from fieldeval.benchmark import benchmarks
    from fieldeval.service.jobs import service_jobs
    from fieldeval.store.schema import GENERIC

    tables = [getattr(GENERIC, name) for name in GENERIC.__dataclass_fields__
              if isinstance(getattr(GENERIC, name), sa.Table)] + [service_jobs]
    parts = []
    for table in tables:
        rows = ["| column | type | |", "|---|---|---|"]
        for column in table.columns:
            notes = []
            if column.primary_key:
                notes.append("primary key")
            notes.extend(f"references `{key.target_fullname}`" for key in column.foreign_keys)
            if not column.nullable and not column.primary_key:
                notes.append("not null")
            rows.append(f"| `{column.name}` | {column.type.__class__.__name__} | {', '.join(notes)} |")
        parts.append(f"### `{table.name}`\n\n" + "\n".join(rows) + "\n")
    declared = ["| benchmark | `evaluations` (floats) | `evaluation_responses` (small integers) |", "|---|---|---|"]
    for name, bench in sorted(benchmarks().items()):
        columns = bench.store_columns
        if columns is not None and (columns.run or columns.response):
            declared.append(f"| `{name}` | {', '.join(f'`{c}`' for c in columns.run)} | "
                            f"{', '.join(f'`{c}`' for c in columns.response)} |")
    parts.append("### Columns each benchmark declares\n\n" + "\n".join(declared) + "\n")
    return "\n".join(parts)


def on_page_markdown(markdown: str, page, config, files) -> str:
    """Put the generated reference in place of each marker the page holds."""
    if not any(marker in markdown for marker in MARKERS):
        return markdown
    root = Path(config["config_file_path"]).resolve().parent
    makers = {MARKERS[0]: cli_reference, MARKERS[1]: lambda: pytest_options(root), MARKERS[2]: store_tables}
    for marker, make in makers.items():
        if marker in markdown:
            markdown = markdown.replace(marker, make())
    return markdown
