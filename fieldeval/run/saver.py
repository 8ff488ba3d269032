"""Storing a finished run: one transaction in a thread of its own, or the run kept for ``fieldeval runs push``.

The protocol, in order (:class:`RunSaver`):

1. :meth:`~RunSaver.begin` (with a stage, a SQLite store) starts the store's thread as the session ends: it copies
   the staged responses while the session parses and aggregates its rows, then waits for the rest;
2. :meth:`~RunSaver.save` hands the thread the run's rows, meta and table rows (starting the thread when
   :meth:`~RunSaver.begin` did not), after keeping the run beside its rows file (``unstored.json``), which the
   thread removes once the store has committed: a session killed at any moment leaves a run to push;
3. :meth:`~RunSaver.abandon` lets a thread that was never handed the run end with its transaction rolled back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fieldeval.run.resumed import ResumedRun
    from fieldeval.store.payload import FlatRun


class RunSaver:
    """The store's side of one session's run (controller): its stage, its thread, and its kept copy.

    ``payload()`` gives the run's report, ``recompute()`` what a kept run's metrics are recomputed from besides its
    rows, and ``say(line)`` prints one line (a run an earlier session kept, stored now).
    """

    def __init__(self, url: str | None, run_id: str, *, resumed: ResumedRun | None, reports_dir: Path,
                 payload: Callable[[], dict], recompute: Callable[[], dict], say: Callable[[str], None]) -> None:
        self.url = url
        self.run_id = run_id
        self.resumed = resumed
        self.reports_dir = reports_dir
        self.stage: Any = None  # the store's rows built while the run goes (fieldeval.store.stage)
        self.completed_at: str | None = None  # when the session began to end (the store's completed_at)
        self._payload, self._recompute, self._say = payload, recompute, say
        self._saving: Future | None = None  # the store's thread, once started
        self._handoff: Future | None = None  # what save() hands a thread begin() started
        self._kept: Path | None = None  # the run's unstored.json, from before the store write until its commit

    @property
    def begun(self) -> bool:
        """Whether the run's rows are closed: the store's thread was started or handed the run."""
        return self._handoff is not None

    def start_stage(self, session_dir: Path | None) -> Any:
        """Build the run's store rows while it runs when the store is a SQLite file (with a session folder; not
        for ``--resume``, whose stored rows the stage would not hold); the stage, or None."""
        from fieldeval.store import declared_columns
        from fieldeval.store.stage import STAGE_FILE, ResponseStage
        from fieldeval.store.url import resolve_url

        if (self.url is not None and session_dir is not None and self.resumed is None
                and resolve_url(self.url).get_backend_name() == "sqlite"):
            self.stage = ResponseStage(session_dir / STAGE_FILE, self.run_id, declared_columns())
        return self.stage

    def flush_stage(self) -> None:
        """Build and write the store rows of the items that reported since the stage's last chunk."""
        if self.stage is not None:
            self.stage.flush()

    def drop_stage(self) -> None:
        """Remove the stage's file once the run is stored (or kept without it)."""
        if self.stage is not None:
            self.stage.discard()

    def begin(self, counts: Mapping[str, int]) -> None:
        """Start the store's thread now, copying the stage's ``counts`` responses per benchmark, when a stage
        holds them and no thread runs yet."""
        if self.stage is None or self.url is None or self._saving is not None:
            return
        self.completed_at = _now()
        self._handoff = Future()
        self._saving = _in_thread(self._store_run, self.url, dict(counts), self._handoff)

    def abandon(self) -> None:
        """Let a thread :meth:`begin` started end without storing the run (its transaction is rolled back)."""
        if self._handoff is not None and not self._handoff.done():
            self._handoff.set_exception(_Abandoned())

    def save(self, folder: Path, rows: dict[str, list[dict]], meta: dict, rows_digest: str | None) -> Future:
        """Hand the run to the store's thread; the future gives None once stored, else the one line saying where
        the run is kept. With ``rows_digest`` (of ``folder``'s rows file), the run is kept in ``folder`` first."""
        from fieldeval.store import declared_columns
        from fieldeval.store.payload import flatten_run

        if self.url is None:
            return _done(None)
        self.completed_at = meta["completed_at"]
        if rows_digest is not None:
            self._keep_first(folder, meta, rows_digest)
        try:
            flat: FlatRun | Exception = flatten_run(self._payload(), rows, meta, declared_columns())
        except Exception as error:  # noqa: BLE001  (reported as the store's refusal: the run is kept)
            flat = error
        handoff = self._handoff = self._handoff if self._handoff is not None else Future()
        handoff.set_result((folder, rows, meta, flat))
        if self._saving is None:
            self._saving = _in_thread(self._store_run, self.url, {name: len(r) for name, r in rows.items()}, handoff)
        return self._saving

    def kept_file(self) -> Path | None:
        """The run's kept file while the store has not committed the run (or refused it), else None."""
        return self._kept if self._kept is not None and self._kept.exists() else None

    def keep_unsaved(self) -> str | None:
        """Keep the run for ``runs push`` when its store write has begun and not returned (the process is about to
        stop at once); the words saying where, else None."""
        from fieldeval.store.pending import keep_unstored
        from fieldeval.store.url import redact

        handoff, url = self._handoff, self.url
        if url is None or handoff is None or not handoff.done() or handoff.exception() is not None \
                or self._saving is None or self._saving.done():
            return None
        folder, rows, meta, _ = handoff.result()
        kept = self.kept_file() or keep_unstored(folder, url, self._payload(), rows, meta, recompute=self._recompute())
        name = self.run_id if kept.parent.name == self.run_id else kept
        return (f"run {self.run_id} may not be stored; kept in {kept}: store it with "
                f"`fieldeval runs push {name} --store {redact(url)}`")

    def _keep_first(self, folder: Path, meta: dict, rows_digest: str) -> None:
        """Keep the run beside its rows file before the store may commit it, with the digests of both (a full disk
        leaves it to be kept whole if the store refuses it)."""
        from fieldeval.run.runfiles import ROWS_FILE
        from fieldeval.store.pending import digest_of, keep_unstored

        payload = self._payload()
        payload["digest"] = {"rows": rows_digest, "metrics": digest_of(payload.get("benchmarks"))}
        try:
            self._kept = keep_unstored(folder, self.url, payload, None, meta, rows_file=Path(folder) / ROWS_FILE,
                                       recompute=self._recompute())
        except OSError:
            self._kept = None

    def _kept_line(self, kept: Path, reason: str | None, error: Exception | None = None) -> str:
        """The one line saying the run was not stored and where it is kept, with the command that stores it."""
        from fieldeval.store.runs import RunExists
        from fieldeval.store.url import redact

        head = f"fieldeval: run {self.run_id} not stored" + (f" ({reason})" if reason else "")
        name = self.run_id if kept.parent.name == self.run_id else kept  # a later session's folder: its file
        if isinstance(error, RunExists):
            return (f"{head}; kept in {kept}: store it under a new id with "
                    f"`fieldeval runs push {kept} --as run_NEW --store {redact(self.url)}`")
        return (f"{head}; kept in {kept}: store it with `fieldeval runs push {name} --store {redact(self.url)}` once "
                "the store is back")

    def _store_run(self, url: str, counts: dict[str, int], handoff: Future) -> str | None:
        """The store's thread: one transaction, or the run kept for ``runs push`` (also when building its rows
        failed: that error is the store's refusal)."""
        from fieldeval.store import declared_columns, open_store
        from fieldeval.store.pending import keep_unstored
        from fieldeval.store.url import database_errors

        def built() -> FlatRun:
            flat = handoff.result()[3]
            if isinstance(flat, Exception):
                raise flat
            return flat

        try:
            with open_store(url, columns=declared_columns()) as store, database_errors(store.url):
                if self.stage is not None:
                    store.save_staged(self.stage, self.run_id, self.completed_at, counts, built)
                else:
                    flat, (_, rows, meta, _) = built(), handoff.result()
                    # a resumed run is replaced by its completed self, under the same id, in the same transaction
                    resumed = self.resumed
                    store.save_flat(flat, rows, meta, replaces=resumed.run_id if resumed else None,
                                    lease=resumed.holder if resumed else None)
                    if resumed is not None:
                        resumed.handed_over()
                if self._kept is not None:  # committed: the kept copy goes
                    self._kept.unlink(missing_ok=True)
                    self._kept = None
                self._push_kept(store, url)
        except _Abandoned:
            return None
        except Exception as error:  # noqa: BLE001  (whatever the store says, the run must not be lost)
            self.drop_stage()
            reason = " ".join(str(error).split()) or type(error).__name__
            try:
                folder, rows, meta, _ = handoff.result()
            except _Abandoned:
                return None
            if self.kept_file() is not None:
                return self._kept_line(self._kept, reason, error)
            try:
                self._kept = keep_unstored(folder, url, self._payload(), rows, meta, recompute=self._recompute())
            except OSError as write_error:
                return (f"fieldeval: run {self.run_id} not stored ({reason}) and could not be kept either "
                        f"({write_error.strerror or write_error}); free the disk and run again")
            return self._kept_line(self._kept, reason, error)
        self.drop_stage()
        return None

    def _push_kept(self, store: Any, url: str) -> None:
        """Store the runs earlier sessions kept for this store (a failure leaves them for later)."""
        from fieldeval.store.pending import push, read_unstored, unstored_runs
        from fieldeval.store.url import redact

        for path in unstored_runs(self.reports_dir):
            try:
                run = read_unstored(path)
                if run.store != redact(url) or run.run_id == self.run_id:
                    continue
                push(run, store)
            except Exception:  # noqa: BLE001  (a kept run that cannot go yet stays kept)
                continue
            self._say(f"fieldeval: stored {run.run_id}, kept by an earlier session")


class _Abandoned(Exception):
    """The session ended before it handed its run to the store's thread (:meth:`RunSaver.abandon`)."""


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _in_thread(function: Callable[..., Any], *args: Any) -> Future:
    """``function(*args)`` in a thread of its own, which ends with it."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fieldeval-store")
    future = pool.submit(function, *args)
    pool.shutdown(wait=False)
    return future


def _done(value: Any) -> Future:
    """A future that holds ``value`` already."""
    future: Future = Future()
    future.set_result(value)
    return future


__all__ = ["RunSaver"]
