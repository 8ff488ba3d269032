"""Every input file, read one way: TSV, YAML and JSON Lines, and the output paths commands write to.

Each reader accepts UTF-8 with or without a byte-order mark, CRLF or LF line
ends, and fields of any length; anything else (a folder, a missing file,
binary content, undecodable bytes, an empty file, a malformed table) is a
:class:`~fieldeval.errors.UsageError` of one line naming the option, the
file and the problem.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Sequence
from itertools import repeat
from pathlib import Path
from typing import Any

from fieldeval.errors import UsageError

FIELD_LIMIT = 2**31 - 1  # csv's default limit (131,072 characters) refuses long descriptions and responses


def read_text(path: str | Path, *, what: str, hint: str = "", empty_ok: bool = False,
              line_ends: bool = True) -> str:
    """The file's text, BOM dropped and line ends as LF (kept as they are when ``line_ends`` is false).

    Args:
        path: the file.
        what: how the user named it, e.g. ``--ebs-suite`` or ``SOURCE_TSV``: the start of every message.
        hint: what to pass instead, appended to every message.
        empty_ok: an empty (or whitespace-only) file is returned as it is instead of refused.

    Example:
        >>> read_text("suite.yaml", what="--ebs-suite")  # doctest: +SKIP
    """
    path = Path(path)
    fix = f"; {hint}" if hint else ""
    if path.is_dir():
        raise UsageError(f"{what} {path}: is a folder, not a file{fix}")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{what} {path}: no such file{fix}") from None
    except OSError as error:
        raise UsageError(f"{what} {path}: cannot read it ({error.strerror}){fix}") from None
    nul = data.find(b"\x00")
    if nul >= 0:
        raise UsageError(f"{what} {path}: binary content (NUL byte at offset {nul}), "
                         f"not a text file{fix}")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise UsageError(f"{what} {path}: not UTF-8 text (byte 0x{data[error.start]:02x} at offset "
                         f"{error.start}){fix}") from None
    if (not text or text.isspace()) and not empty_ok:  # not text.strip(), which copies the text
        raise UsageError(f"{what} {path}: the file is empty{fix}")
    if not line_ends or b"\r" not in data:
        return text
    return text.replace("\r\n", "\n").replace("\r", "\n")


def read_tsv(path: str | Path, *, what: str, required: Sequence[str] = (), hint: str = "",
             empty_ok: bool = False) -> tuple[list[str], list[dict[str, str]]]:
    """The header and rows of a tab-separated table; a usage error for missing ``required`` columns."""
    # the csv reader takes CRLF, CR and LF row ends itself, and keeps a carriage return inside a quoted cell
    text = read_text(path, what=what, hint=hint, empty_ok=empty_ok, line_ends=False)
    csv.field_size_limit(FIELD_LIMIT)
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""), delimiter="\t")
        columns = [c.strip() for c in reader.fieldnames or []]
        reader.fieldnames = columns
        rows = [{k: v if v is not None else "" for k, v in row.items() if k is not None} for row in reader]
    except csv.Error as error:
        raise UsageError(f"{what} {path}: not a readable TSV ({error}){f'; {hint}' if hint else ''}") from None
    _check_required(path, columns, required, what=what)
    return columns, rows


def _check_required(path, columns: Sequence[str], required: Sequence[str], *, what: str) -> None:
    missing = [c for c in required if c not in columns]
    if missing:
        raise UsageError(f"{what} {path}: missing column(s) {', '.join(missing)}; the table needs "
                         f"{', '.join(required)}")


def read_tsv_frame(path: str | Path, *, what: str, required: Sequence[str] = (), hint: str = ""):
    """A TSV as a pandas DataFrame of strings (empty cells as ``""``), read by the rules of :func:`read_tsv`."""
    import pandas as pd

    text = read_text(path, what=what, hint=hint)
    columns_of = _unquoted_columns(text)
    if columns_of is not None:  # every line its cells between tabs, as many as the header's
        header, cells = columns_of
        columns = [c.strip() for c in header]
        if len(set(columns)) == len(columns):
            _check_required(path, columns, required, what=what)
            if not cells[0]:
                return pd.DataFrame({c: [] for c in columns}, columns=columns, dtype=object)
            return pd.DataFrame(dict(zip(columns, cells)), columns=columns, dtype=object)
    csv.field_size_limit(FIELD_LIMIT)
    try:
        records = list(csv.reader(io.StringIO(text, newline=""), delimiter="\t"))
    except csv.Error as error:
        raise UsageError(f"{what} {path}: not a readable TSV ({error}){f'; {hint}' if hint else ''}") from None
    columns = [c.strip() for c in records[0]] if records else []
    if len(set(columns)) != len(columns):  # a repeated column name: read_tsv's rules (the last one wins)
        columns, rows = read_tsv(path, what=what, required=required, hint=hint)
        return pd.DataFrame(rows, columns=columns, dtype=str).fillna("")
    _check_required(path, columns, required, what=what)
    width = len(columns)
    body = [row if len(row) == width else (row + [""] * width)[:width] for row in records[1:] if row]
    # as csv.DictReader: short rows padded with blanks, extra cells dropped, blank lines skipped
    if not body:
        return pd.DataFrame({c: [] for c in columns}, columns=columns, dtype=object)
    return pd.DataFrame(body, columns=columns, dtype=object)


def _unquoted_columns(text: str) -> tuple[list[str], list[list[str]]] | None:
    """The header's cells and each column's cells of a table (LF line ends) that has no double quote and whose every
    non-blank line has the header's number of cells: what ``csv.reader`` reads from it, blank lines skipped, split
    in one pass instead of a row at a time (5x faster). None for any other table."""
    if '"' in text:
        return None
    lines = list(filter(None, text.split("\n")))  # csv.reader gives a blank line no cells, and it is skipped
    if not lines:
        return None
    width = lines[0].count("\t") + 1
    if any(count != width - 1 for count in map(str.count, lines, repeat("\t"))):
        return None
    flat = "\t".join(lines).split("\t")
    return flat[:width], [flat[width + position::width] for position in range(width)]


QUOTED = frozenset('\t\n\r"')  # a cell holding any of these is quoted, csv-style


def tsv_cell(value: Any) -> str:
    """One cell of a written table: None blank, NUL as the text ``\\x00``, quoted when it holds a tab,
    newline, carriage return or double quote.

    Quoting is the csv module's (``"a""b"`` for ``a"b``), applied to a bare
    carriage return too, which ``csv.writer`` with ``lineterminator="\\n"`` and
    ``DataFrame.to_csv`` leave unquoted: ``pandas.read_csv`` then splits the row.
    NUL is escaped as the run store keeps it, because readers (ours included)
    refuse a file holding a NUL byte. Lone surrogates become ``\\udXXX`` when
    the file is encoded (``errors="backslashreplace"``).

    Example:
        >>> tsv_cell('say "hi"\\rnow')
        '"say ""hi""\\rnow"'
    """
    text = "" if value is None else str(value)
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    if not QUOTED.isdisjoint(text):
        return '"' + text.replace('"', '""') + '"'
    return text


def write_tsv(path: str | Path, header: Sequence[str], rows) -> Path:
    """Write a tab-separated table (LF line ends, UTF-8) whose every cell goes through :func:`tsv_cell`.

    ``pandas.read_csv(path, sep="\\t", dtype=str, keep_default_na=False)`` and
    :func:`read_tsv` read back exactly the text written, for any text.

    Example:
        >>> write_tsv("scores.tsv", ["item_id", "response_text"], [["i1", "line 1\\nline 2"]])  # doctest: +SKIP
    """
    path = Path(path)
    with open(path, "w", newline="", encoding="utf-8", errors="backslashreplace") as handle:
        handle.write("\t".join(map(tsv_cell, header)) + "\n")
        for row in rows:
            handle.write("\t".join(map(tsv_cell, row)) + "\n")
    return path


def read_yaml(path: str | Path, *, what: str, hint: str = "", empty_ok: bool = False) -> Any:
    """A YAML document (safe loader); a usage error with the line of a syntax error."""
    import yaml

    text = read_text(path, what=what, hint=hint, empty_ok=empty_ok)
    try:
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(error, "problem", None) or type(error).__name__
        raise UsageError(f"{what} {path}: not valid YAML ({where}{problem}){f'; {hint}' if hint else ''}") from None


def read_jsonl(path: str | Path, *, what: str, hint: str = "") -> list[tuple[int, Any]]:
    """``(line number, value)`` for every non-blank line of a JSON Lines file."""
    out = []
    for number, line in enumerate(read_text(path, what=what, hint=hint).split("\n"), start=1):
        if not line.strip():
            continue
        try:
            out.append((number, json.loads(line)))
        except json.JSONDecodeError as error:
            fix = f"; {hint}" if hint else ""
            raise UsageError(f"{what} {path} line {number}: not JSON ({error.msg}){fix}") from None
    return out


def check_output_file(path: str | Path, *, what: str) -> Path:
    """A file path a command may write: not a folder, in a folder that exists or can be made, writable."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{what} {path}: is a folder; pass a file path such as {path / 'out'}")
    _check_folder(path.parent, what=what, shown=path)
    if path.exists() and not os.access(path, os.W_OK):
        raise UsageError(f"{what} {path}: not writable; pass another path")
    return path


def check_output_dir(path: str | Path, *, what: str) -> Path:
    """A folder a command may write into: an existing folder, or one that can be made."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{what} {path}: is a file, not a folder; pass a folder path")
    _check_folder(path, what=what, shown=path)
    return path


def _check_folder(folder: Path, *, what: str, shown: Path) -> None:
    existing = next((p for p in [folder, *folder.parents] if p.exists()), None)
    if existing is not None and not existing.is_dir():
        raise UsageError(f"{what} {shown}: {existing} is a file, not a folder; pass another path")
    if existing is not None and not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{what} {shown}: {existing} is not writable; pass another path")


__all__ = ["FIELD_LIMIT", "check_output_dir", "check_output_file", "read_jsonl", "read_text", "read_tsv",
           "read_tsv_frame", "read_yaml"]
