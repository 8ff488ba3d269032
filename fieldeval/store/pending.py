"""Runs the store could not take: kept in ``reports/runs/<run_id>/unstored.json`` until pushed.

When the store is down (or full, or refuses the run) as a session ends, the session keeps the exact
arguments of :meth:`~fieldeval.store.runs.RunStore.save_run` (payload, rows, meta) beside its report,
with the store URL (password hidden), says so in one line and exits non-zero. ``fieldeval runs push
RUN_ID`` stores it later, and so does the next session that saves to that store: the same run, the
same id, the same rows, checked against the digests its session wrote and recomputed from the rows.
A session writes the file before its store write begins and removes it once the store has committed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fieldeval.atomic import write_atomic
from fieldeval.errors import UsageError

UNSTORED_FILE = "unstored.json"
RUNS_DIR = "runs"


KEPT_FORMAT = 2  # a kept run with digests of its rows and metrics, and what its metrics are recomputed from


@dataclass(frozen=True)
class UnstoredRun:
    """A kept run: where it is, the store it was meant for (password hidden), and save_run's arguments.

    ``digest`` holds what the session wrote (``rows`` and ``metrics``, ``sha256:`` hex), ``rows_sha256`` what the
    rows read now hash to, and ``recompute`` the session's errors, planned items and bootstrap settings.
    """

    path: Path
    run_id: str
    store: str
    payload: dict[str, Any]
    rows: dict[str, list[dict[str, Any]]]
    meta: dict[str, Any]
    digest: dict[str, Any] | None = None
    rows_sha256: str | None = None
    recompute: dict[str, Any] | None = None


def digest_of(value: Any) -> str:
    """``sha256:<hex>`` of a JSON value, written canonically."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str, ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def keep_unstored(folder: Path, store: str, payload: Mapping[str, Any],
                  rows: Mapping[str, Sequence[Mapping[str, Any]]] | None, meta: Mapping[str, Any], *,
                  rows_file: Path | None = None, recompute: Mapping[str, Any] | None = None) -> Path:
    """Write the run's save_run arguments to ``folder/unstored.json`` (whole, or not at all), with the digests of its
    rows and metrics; the rows are the session's rows file ``rows_file`` beside it (its digest is
    ``payload["digest"]["rows"]``), else they are written into the file."""
    from fieldeval.store.url import redact

    path = Path(folder) / UNSTORED_FILE
    document: dict[str, Any] = {"format": KEPT_FORMAT, "run_id": payload.get("run_id"), "store": redact(store),
                                "payload": payload, "meta": dict(meta), "recompute": dict(recompute or {})}
    if rows_file is not None:
        document["rows_file"] = Path(rows_file).name
        document["digest"] = {"rows": (payload.get("digest") or {}).get("rows"),
                              "metrics": digest_of(payload.get("benchmarks"))}
    else:
        document["rows"] = {bench: list(items) for bench, items in (rows or {}).items()}
        document["digest"] = {"rows": digest_of(document["rows"]), "metrics": digest_of(payload.get("benchmarks"))}
    write_atomic(path, json.dumps(document, default=str, ensure_ascii=False))
    return path


def read_unstored(path: Path) -> UnstoredRun:
    """A kept run; a usage error naming the file when it cannot be read."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if "rows_file" in data:
            rows_path = path.parent / Path(str(data["rows_file"])).name
            rows, sha = _read_rows(rows_path)
        else:
            rows = {bench: list(items) for bench, items in data["rows"].items()}
            sha = digest_of(rows)
        return UnstoredRun(path, str(data["run_id"]), str(data["store"]), dict(data["payload"]), rows,
                           dict(data["meta"]), data.get("digest"), sha, data.get("recompute"))
    except FileNotFoundError as missing:
        if Path(missing.filename or "") != path:
            raise UsageError(f"{path}: its rows file {missing.filename} is gone; the run cannot be pushed") from None
        raise UsageError(f"{path}: no kept run there; `ls reports/runs/*/{UNSTORED_FILE}` lists the kept runs"
                         ) from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise UsageError(f"{path}: not a kept run ({type(error).__name__}: {error}); it cannot be pushed") from None


def _read_rows(path: Path) -> tuple[dict[str, list[dict[str, Any]]], str]:
    """A rows file's rows by benchmark, in file order, and the digest of its bytes."""
    digest = hashlib.sha256()
    rows: dict[str, list[dict[str, Any]]] = {}
    with open(path, "rb") as handle:
        for line in handle:
            digest.update(line)
            row = json.loads(line)
            rows.setdefault(str(row["benchmark"]), []).append(row)
    return rows, "sha256:" + digest.hexdigest()


def unstored_runs(reports_dir: Path) -> list[Path]:
    """The ``unstored.json`` files under ``reports_dir/runs/``, oldest first, but for those of sessions still
    running: a live session's kept file is its copy while it stores the run itself, not a run left behind."""
    from fieldeval.run.runfiles import session_alive

    folder = Path(reports_dir) / RUNS_DIR
    if not folder.is_dir():
        return []
    found = [path for path in folder.glob(f"*/{UNSTORED_FILE}") if path.is_file() and not session_alive(path.parent)]
    return sorted(found, key=lambda p: (p.stat().st_mtime, p.name))


def find_unstored(reports_dir: Path, run_id: str) -> Path:
    """The one kept file of ``run_id`` under ``reports_dir/runs/`` (its folder, or a later session's ``.N``)."""
    found = [path for path in unstored_runs(reports_dir)
             if path.parent.name == run_id or path.parent.name.startswith(run_id + ".")]
    if not found:
        return Path(reports_dir) / RUNS_DIR / run_id / UNSTORED_FILE  # read_unstored says it is not there
    if len(found) > 1:
        raise UsageError(f"runs push {run_id}: {len(found)} sessions kept a run of that id ({', '.join(map(str, found))})"
                         "; push one file at a time: `fieldeval runs push FILE [--as NEW_ID]`")
    return found[0]


def verify(run: UnstoredRun, *, unverified: bool = False) -> None:
    """A usage error, naming the file, when a kept run is not what its session kept: a run id that breaks the rule,
    rows or metrics whose digest disagrees, or metrics that its rows do not give. ``unverified``: a run kept
    without digests (by an older fieldeval) passes; one whose digests disagree still does not."""
    from fieldeval.run.options import RUN_ID

    where = run.path
    if not RUN_ID.fullmatch(run.run_id) or run.payload.get("run_id") != run.run_id:
        raise UsageError(f"{where}: run id {run.run_id!r} is not a run id (run_ and 1-64 letters, digits, '_' or '-'"
                         f"); push it under one with `fieldeval runs push {where} --as run_NEW`")
    digest = run.digest or {}
    if not digest.get("rows") or not digest.get("metrics"):
        if unverified:
            return
        raise UsageError(f"{where}: no digest of its rows and metrics (kept by an older fieldeval, or edited); "
                         "it cannot be checked, so it is not stored: push it with --unverified to store it "
                         "marked as such, or run the session again")
    if run.rows_sha256 != digest["rows"]:
        raise UsageError(f"{where}: its rows are not the ones its session kept (digest {run.rows_sha256} against "
                         f"{digest['rows']}); it is not stored")
    if digest_of(run.payload.get("benchmarks")) != digest["metrics"]:
        raise UsageError(f"{where}: its metrics are not the ones its session computed (digest differs); "
                         "it is not stored")
    recompute = run.recompute or {}
    if recompute:
        from fieldeval.run.entries import benchmark_entries

        def counter(pairs: Any) -> dict[tuple[str, str], int]:
            return {(str(b), str(m)): int(n) for b, m, n in pairs or []}

        def epochs(quads: Any) -> dict[tuple[str, str], dict[str, int]]:
            found: dict[tuple[str, str], dict[str, int]] = {}
            for b, m, case, n in quads or []:
                found.setdefault((str(b), str(m)), {})[str(case)] = int(n)
            return found

        again = benchmark_entries(run.rows, counter(recompute.get("errors")), seed=int(recompute["seed"]),
                                  resamples=int(recompute["resamples"]),
                                  cluster_by=str(recompute.get("cluster_by") or "benchmark"),
                                  planned=counter(recompute.get("planned")) or None,
                                  errored_epochs=epochs(recompute.get("errored_epochs")))
        if digest_of(again) != digest["metrics"]:
            raise UsageError(f"{where}: its metrics are not what its rows give (recomputed as a session's end "
                             "does); it is not stored")


def renamed(run: UnstoredRun, run_id: str) -> UnstoredRun:
    """The kept run under another run id (``runs push --as``)."""
    from fieldeval.run.options import RUN_ID

    if not RUN_ID.fullmatch(run_id):
        raise UsageError(f"--as {run_id!r}: not a run id; use run_ and 1-64 letters, digits, '_' or '-'")
    return dataclasses.replace(run, run_id=run_id, payload={**run.payload, "run_id": run_id})


def push(run: UnstoredRun, store: Any, *, as_id: str | None = None, unverified: bool = False) -> str:
    """Store a kept run in ``store`` (an open :class:`~fieldeval.store.Store`), checked first (:func:`verify`), and
    remove its file once the store has committed it; the run id stored.

    A run of that id the store already holds counts as pushed when it is this run (the same digests: a push cut
    off after its commit); any other is refused, and the file stays.
    """
    verify(run, unverified=unverified)
    if unverified and not (run.digest or {}).get("rows"):  # stored, and shown, as a run nothing checked
        run = dataclasses.replace(run, meta={**run.meta, "unverified": True})
    original = run
    if as_id is not None:
        run = renamed(run, as_id)
    try:
        store.save_run(run.payload, run.rows, run.meta)
    except UsageError:
        stored = _stored_digest(run, store)
        if stored is None or stored != run.payload.get("digest"):
            if stored is None and not _holds(run, store):
                raise
            raise UsageError(f"run {run.run_id}: the store {store.url} holds another run of that id; the kept run "
                             f"stays in {original.path}: store it under a new id with `fieldeval runs push "
                             f"{original.path} --as run_NEW`") from None
    original.path.unlink(missing_ok=True)
    return run.run_id


def _holds(run: UnstoredRun, store: Any) -> bool:
    return run.run_id in {summary.run_id for summary in store.list_runs()}


def _stored_digest(run: UnstoredRun, store: Any) -> dict[str, Any] | None:
    """The digests of the stored run of ``run``'s id, None when it is not stored (or has none)."""
    if not _holds(run, store):
        return None
    return (store.get_run(run.run_id).get("payload") or {}).get("digest")


__all__ = ["KEPT_FORMAT", "UNSTORED_FILE", "UnstoredRun", "digest_of", "find_unstored", "keep_unstored", "push",
           "read_unstored", "renamed", "unstored_runs", "verify"]
