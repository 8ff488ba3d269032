"""Where a session's files go: ``reports/runs/<run_id>/`` first, then published to ``reports/``.

Every eval session writes its ``status.json`` (``running`` at the start, the
run status at the end), ``report.json``, its per-item rows (``rows.jsonl``, one
JSON object per recorded row; ``report["evals_rows"]`` points to it) and scored
tables under its own folder, each file through a temporary file and a rename. Once finished, it
publishes them under a lock: ``reports/report.json`` (or ``--eval-report``)
and the top-level ``reports/<benchmark>/`` tables become this session's, so
two concurrent sessions never mix their files, and a session killed half way
never leaves a report that claims to be its own.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from fieldeval.atomic import atomic_path, copy_atomic, write_atomic

RUNS_DIR = "runs"
STATUS_FILE = "status.json"
REPORT_FILE = "report.json"
ROWS_FILE = "rows.jsonl"
# above this many eval items (or $FIELDEVAL_REPORT_TESTS_LIMIT), report.json keeps pytest-json-report's entries
# of the items that did not pass only, and no collectors: the rows file holds every item
TRIM_ABOVE_ITEMS = 10_000
TRIM_ENV = "FIELDEVAL_REPORT_TESTS_LIMIT"


def trim_limit() -> int:
    """The eval item count above which report.json's per-test entries are trimmed."""
    value = os.environ.get(TRIM_ENV, "")
    return int(value) if value.strip().isdigit() else TRIM_ABOVE_ITEMS
LOCK_FILE = ".publish.lock"
SESSION_LOCK = ".session.lock"  # in a session's folder: held (flock) while the session lives, released when it ends


@contextmanager
def publish_lock(reports_dir: Path) -> Iterator[None]:
    """Hold the reports folder's publish lock (one publishing session at a time)."""
    reports_dir.mkdir(parents=True, exist_ok=True)
    with open(reports_dir / LOCK_FILE, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class RunFiles:
    """One session's folder under ``<reports>/runs/`` and where its report is published.

    The folder is this session's alone: ``runs/<run_id>/`` when no session had it, else ``runs/<run_id>.2/``
    (``.3``, ...), so a second session with the same run id (refused by the store, or resuming the run) never
    overwrites another's files.
    """

    def __init__(self, reports_dir: Path, run_id: str, report_path: Path) -> None:
        self.reports_dir = Path(reports_dir)
        self.run_id = run_id
        self.folder = _claim(self.reports_dir / RUNS_DIR, run_id)
        self._held = _hold(self.folder)  # closed (the lock let go) when the process ends, however it ends
        self.report_path = Path(report_path)
        self.rows_sha256: str | None = None  # the rows file's digest, once written

    def mark(self, status: str, **fields: object) -> None:
        """Write ``status.json``: ``running`` while the session runs, then its run status."""
        now = datetime.now(UTC).isoformat(timespec="seconds")
        write_atomic(self.folder / STATUS_FILE, json.dumps(
            {"run_id": self.run_id, "status": status, "pid": os.getpid(), "updated_at": now, **fields}) + "\n")

    def write_report(self, report: dict, *, indent: int | None = None) -> Path:
        """The session's JSON report as ``runs/<run_id>/report.json``."""
        path = self.folder / REPORT_FILE
        write_atomic(path, json.dumps(report, default=str, indent=indent))
        return path

    def write_rows(self, rows: Iterable[dict | bytes]) -> Path:
        """Every recorded row as ``runs/<run_id>/rows.jsonl``, one compact JSON object a line: a dict is encoded
        here, bytes are such a line already (:meth:`~fieldeval.run.spool.RowSpool.lines`)."""
        path = self.folder / ROWS_FILE
        dumps = json.JSONEncoder(default=str, separators=(",", ":")).encode  # ASCII: lone surrogates escaped too
        digest = hashlib.sha256()

        def lines() -> Iterator[bytes]:
            for row in rows:
                line = row if type(row) is bytes else (dumps(row) + "\n").encode("ascii")
                digest.update(line)
                yield line

        with atomic_path(path) as tmp, open(tmp, "wb") as handle:
            handle.writelines(lines())
        self.rows_sha256 = "sha256:" + digest.hexdigest()
        return path

    def rows_pointer(self, path: Path, count: int) -> dict:
        """``report["evals_rows"]``: where the rows file is (relative to the reports folder), its format and size."""
        return {"path": path.relative_to(self.reports_dir).as_posix(), "format": "jsonl", "rows": count}

    def publish(self, tables: Iterable[Path]) -> None:
        """Make this session's report and tables the current ones in ``reports/`` (newest finished wins)."""
        with publish_lock(self.reports_dir):
            for table in tables:
                copy_atomic(table, self.reports_dir / Path(table).relative_to(self.folder))
            report = self.folder / REPORT_FILE
            if report.is_file() and report.resolve() != self.report_path.resolve():
                copy_atomic(report, self.report_path)


def _claim(runs_dir: Path, run_id: str) -> Path:
    """Make the first of ``runs_dir/<run_id>``, ``<run_id>.2``, ... that does not exist yet, and return it."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    for n in range(1, 10_000):
        folder = runs_dir / (run_id if n == 1 else f"{run_id}.{n}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        return folder
    raise OSError(f"{runs_dir}: 9,999 folders of run {run_id} already; remove the old ones")


def _hold(folder: Path) -> object:
    """Take the session folder's lock for as long as the returned handle is open (the process's life)."""
    handle = open(folder / SESSION_LOCK, "a")  # noqa: SIM115  (held open on purpose)
    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a fresh folder: nobody else holds it
    return handle


def session_alive(folder: Path) -> bool:
    """Whether a live session holds ``folder``'s lock: its kept run is still its own (being stored), not left."""
    try:
        handle = open(Path(folder) / SESSION_LOCK, "a")  # noqa: SIM115
    except OSError:
        return False  # no lock file (a folder of an older version, or read-only): nobody holds it
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def sha256_file(path: Path) -> str:
    """``sha256:<hex>`` of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def trim_report(report: dict, items: int, released: int = 0) -> None:
    """Above :func:`trim_limit` eval items, keep only the per-test entries of items that did not pass.

    The dropped counts go to ``report["trimmed"]``, with the ``released`` entries let go of while the
    session ran (:mod:`fieldeval.run.memory`); the rows file holds every item's values.
    """
    limit = trim_limit()
    if items <= limit:
        return
    tests = report.get("tests") or []
    kept = [test for test in tests if test.get("outcome") != "passed"]
    report["trimmed"] = {"tests": len(tests) - len(kept) + released, "collectors": len(report.get("collectors") or []),
                         "reason": f"more than {limit} eval items: every item's row is in evals_rows"}
    if "tests" in report:
        report["tests"] = kept
    report["collectors"] = []  # omitted from the start when the suite's size was known before collection


__all__ = ["ROWS_FILE", "TRIM_ABOVE_ITEMS", "trim_limit", "RunFiles", "publish_lock", "sha256_file", "trim_report"]
