"""Output paths checked before the first model call, and a full disk turned into one line.

A session writes its reports folder, JSON report, progress file, response cache and (SQLite) store.
:func:`check_outputs` tries each place for real (a file created and removed beside the target) before
anything is spent, so an unwritable path, a folder where a file belongs or a read-only mount is one
line and exit 2, not a traceback after the run. :func:`out_of_space` tells a full disk (ENOSPC,
EDQUOT, SQLite's "database or disk is full") from other failures so the session can stop with one
line instead of an INTERNALERROR.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import tempfile
from collections.abc import Iterable
from pathlib import Path

from fieldeval.errors import UsageError

FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
FULL_SQLITE = ("database or disk is full", "disk i/o error")


PROBE_BYTES = 8192  # an empty file needs no space: the probe writes some, so a full disk shows


def _probe(folder: Path, flag: str, shown: Path) -> None:
    """Write and remove a small file in ``folder``; a usage error naming ``flag`` and ``shown`` when that fails."""
    name = None
    try:
        fd, name = tempfile.mkstemp(dir=folder, prefix=".fieldeval-probe-")
        try:
            os.write(fd, b"\0" * PROBE_BYTES)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as error:
        if name is not None:
            Path(name).unlink(missing_ok=True)
        raise UsageError(f"{flag} {shown}: cannot write in {folder} ({error.strerror or error}); "
                         "pass a writable path or free the disk") from None
    Path(name).unlink(missing_ok=True)


def _make_folder(folder: Path, flag: str, shown: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UsageError(f"{flag} {shown}: {folder} is a file, not a folder; pass another path") from None
    except OSError as error:
        raise UsageError(f"{flag} {shown}: cannot create the folder {folder} ({error.strerror or error}); "
                         "pass a writable path") from None


def check_folder(path: str | Path, flag: str) -> Path:
    """A folder the session writes in: created if missing, and really writable.

    Example:
        >>> check_folder(tmp_path / "reports", "--reports-dir")  # doctest: +SKIP
    """
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{flag} {folder}: a file, not a folder; pass a folder path")
    _make_folder(folder, flag, folder)
    _probe(folder, flag, folder)
    return folder


def check_file(path: str | Path, flag: str) -> Path:
    """A file the session replaces or appends to: not a folder, its folder created and writable,
    and the file itself writable when it exists."""
    target = Path(path)
    if target.is_dir():
        raise UsageError(f"{flag} {target}: a folder, not a file; pass a file path such as {target / 'report.json'}")
    _make_folder(target.parent, flag, target)
    _probe(target.parent, flag, target)
    if target.exists() and not os.access(target, os.W_OK):
        raise UsageError(f"{flag} {target}: the file is read-only; pass a writable path")
    return target


def check_outputs(files: Iterable[tuple[str, str | Path | None]],
                  folders: Iterable[tuple[str, str | Path | None]]) -> None:
    """Check every ``(flag, path)`` of ``files`` and ``folders`` (None: not used this session)."""
    for flag, path in folders:
        if path is not None:
            check_folder(path, flag)
    for flag, path in files:
        if path is not None:
            check_file(path, flag)


def check_session_outputs(*, report_path: Path, progress_file: str | None, summary_md: str | None,
                          cache: Path | None, store_url: str | None, reports_dir: Path) -> None:
    """:func:`check_outputs` of what an eval session writes: the JSON report, progress file, Markdown summary,
    response cache and (a SQLite store) the store's file, and the reports folder."""
    files: list[tuple[str, str | Path | None]] = [("--eval-report", report_path), ("--progress-file", progress_file),
                                                  ("--summary-md", summary_md), ("--cache-path", cache)]
    if store_url is not None:
        from fieldeval.store import resolve_url

        parsed = resolve_url(store_url)
        if parsed.get_backend_name() == "sqlite":
            files.append(("--store", Path(parsed.database).expanduser()))
    check_outputs(files, [("--reports-dir", reports_dir)])


def out_of_space(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) says the disk or quota is full."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in FULL_ERRNOS:
            return True
        if isinstance(current, sqlite3.Error) and any(mark in str(current).lower() for mark in FULL_SQLITE):
            return True
        orig = getattr(current, "orig", None)
        current = orig if isinstance(orig, BaseException) else (current.__cause__ or current.__context__)
    return False


def full_disk_line(what: str, error: BaseException) -> str:
    """``fieldeval: no space left on the device writing <what> (...)`` and the fix."""
    reason = getattr(error, "strerror", None) or str(getattr(error, "orig", None) or error).splitlines()[0]
    return (f"fieldeval: no space left on the device writing {what} ({reason}); responses already cached are kept: "
            "free some space and run again")


__all__ = ["check_file", "check_folder", "check_outputs", "full_disk_line", "out_of_space"]
