"""Runs the store could not take: kept in ``reports/runs/<run_id>/unstored.json`` until pushed.

When the store is down (or full, or refuses the run) as a session ends, the session keeps the exact
arguments of :meth:`~fieldeval.store.runs.RunStore.save_run` (payload, rows, meta) beside its report,
with the store URL (password hidden), says so in one line and exits non-zero. ``fieldeval runs push
RUN_ID`` stores it later, and so does the next session that saves to that store: the same run, the
same id, the same rows. Once stored, the file is removed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fieldeval.atomic import write_atomic
from fieldeval.errors import UsageError

UNSTORED_FILE = "unstored.json"
RUNS_DIR = "runs"


@dataclass(frozen=True)
class UnstoredRun:
    """A kept run: where it is, the store it was meant for (password hidden), and save_run's arguments."""

    path: Path
    run_id: str
    store: str
    payload: dict[str, Any]
    rows: dict[str, list[dict[str, Any]]]
    meta: dict[str, Any]


def keep_unstored(folder: Path, store: str, payload: Mapping[str, Any],
                  rows: Mapping[str, Sequence[Mapping[str, Any]]], meta: Mapping[str, Any]) -> Path:
    """Write the run's save_run arguments to ``folder/unstored.json`` (whole, or not at all)."""
    from fieldeval.store.url import redact

    path = Path(folder) / UNSTORED_FILE
    document = {"run_id": payload.get("run_id"), "store": redact(store), "payload": payload,
                "rows": {bench: list(items) for bench, items in rows.items()}, "meta": dict(meta)}
    write_atomic(path, json.dumps(document, default=str, ensure_ascii=False))
    return path


def read_unstored(path: Path) -> UnstoredRun:
    """A kept run; a usage error naming the file when it cannot be read."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return UnstoredRun(Path(path), str(data["run_id"]), str(data["store"]), dict(data["payload"]),
                           {bench: list(items) for bench, items in data["rows"].items()}, dict(data["meta"]))
    except FileNotFoundError:
        raise UsageError(f"{path}: no kept run there; `ls reports/runs/*/{UNSTORED_FILE}` lists the kept runs"
                         ) from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise UsageError(f"{path}: not a kept run ({type(error).__name__}: {error}); it cannot be pushed") from None


def unstored_runs(reports_dir: Path) -> list[Path]:
    """The ``unstored.json`` files under ``reports_dir/runs/``, oldest first."""
    folder = Path(reports_dir) / RUNS_DIR
    if not folder.is_dir():
        return []
    found = [path for path in folder.glob(f"*/{UNSTORED_FILE}") if path.is_file()]
    return sorted(found, key=lambda p: (p.stat().st_mtime, p.name))


def push(run: UnstoredRun, store: Any) -> str:
    """Store a kept run in ``store`` (an open :class:`~fieldeval.store.Store`) and remove its file.

    A run the store already holds (a push that was cut off after its commit) counts as pushed when
    it holds the same rows; the file is then removed too.
    """
    try:
        store.save_run(run.payload, run.rows, run.meta)
    except UsageError:
        if not _already_there(run, store):
            raise
    run.path.unlink(missing_ok=True)
    return run.run_id


def _already_there(run: UnstoredRun, store: Any) -> bool:
    stored = {summary.run_id for summary in store.list_runs()}
    if run.run_id not in stored:
        return False
    responses = store.get_run(run.run_id).get("responses")
    return responses == sum(len(rows) for rows in run.rows.values())


__all__ = ["UNSTORED_FILE", "UnstoredRun", "keep_unstored", "push", "read_unstored", "unstored_runs"]
