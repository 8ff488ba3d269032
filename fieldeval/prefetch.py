"""Calls ahead of the items: how a session keeps ``--concurrency`` calls in flight.

pytest runs one item at a time per process. Before the items run, each
process starts a :class:`Prefetcher`: daemon threads that run its share of
the eval items' test functions with a no-op ``record``, so every model call
an item makes (a summary then an answer, an answer then a judgement) is
made ahead, within the client's limits. Each call is kept in the
:class:`Memo`, a SQLite file all the session's processes share, under the
call's full key (model, options, system prompt, prompt, schema). When the
item itself runs, its calls find their results there; a call another
process is still making is waited for, never made twice. Items, ids,
reports and numbers are those of a sequential run.
"""

from __future__ import annotations

import inspect
import json
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fieldeval.client import Completion
from fieldeval.failures import ModelCallError

POLL_S = 0.02
SQLITE_TIMEOUT_S = 60.0


class Memo:
    """The session's record of model calls: claimed, done (with the completion) or failed (with why)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._local = threading.local()
        with self._connect() as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, state TEXT NOT NULL, "
                         "owner INTEGER NOT NULL, payload TEXT)")
            conn.execute("CREATE TABLE IF NOT EXISTS dead (model TEXT PRIMARY KEY, message TEXT NOT NULL)")

    def _connect(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=SQLITE_TIMEOUT_S, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=OFF")
            self._local.conn = conn
        return conn

    def run(self, key: str, call: Callable[[], Completion]) -> Completion:
        """The completion for ``key``: from the memo, after waiting for its claimant, or by making ``call``."""
        conn = self._connect()
        while True:
            row = conn.execute("SELECT state, owner, payload FROM calls WHERE key = ?", (key,)).fetchone()
            if row is None:
                claimed = conn.execute("INSERT OR IGNORE INTO calls (key, state, owner) VALUES (?, 'claimed', ?)",
                                       (key, os.getpid())).rowcount
                if claimed:
                    break
                continue
            state, owner, payload = row
            if state == "done":
                return Completion(**json.loads(payload))
            if state == "failed":
                raise ModelCallError(**json.loads(payload))
            if owner != os.getpid() and not _alive(owner):  # its claimant was killed: take the call over
                conn.execute("UPDATE calls SET owner = ? WHERE key = ? AND owner = ?", (os.getpid(), key, owner))
                continue
            time.sleep(POLL_S)
        try:
            completion = call()
        except ModelCallError as error:
            failure = {"model": error.model, "detail": error.detail, "kind": error.kind}
            conn.execute("UPDATE calls SET state = 'failed', payload = ? WHERE key = ?", (_dumps(failure), key))
            raise
        except BaseException:
            conn.execute("DELETE FROM calls WHERE key = ?", (key,))
            raise
        conn.execute("UPDATE calls SET state = 'done', payload = ? WHERE key = ?", (_dumps(asdict(completion)), key))
        return completion

    def mark_dead(self, model: str, message: str) -> None:
        """Record that ``model`` failed permanently, so every process skips its remaining calls."""
        self._connect().execute("INSERT OR IGNORE INTO dead (model, message) VALUES (?, ?)", (model, message))

    def dead(self, model: str) -> str | None:
        """The permanent failure recorded for ``model``, if any."""
        row = self._connect().execute("SELECT message FROM dead WHERE model = ?", (model,)).fetchone()
        return row[0] if row else None


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=True)  # lone surrogates survive as \\udXXX escapes


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Prefetcher:
    """Daemon threads that run eval items' test functions ahead, so their model calls land in the memo.

    Args:
        jobs: (test function, keyword arguments) for each item this process prefetches.
        threads: how many items run ahead at once (the client's limits still bound the calls).
    """

    def __init__(self, jobs: Sequence[tuple[Callable[..., Any], dict[str, Any]]], threads: int) -> None:
        self._queue: queue.Queue = queue.Queue()
        for job in jobs:
            self._queue.put(job)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._work, daemon=True, name=f"fieldeval-prefetch-{i}")
                         for i in range(max(1, min(threads, len(jobs))))] if jobs else []

    def start(self) -> None:
        """Start the threads."""
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Start no further item (calls in flight finish or time out on their own)."""
        self._stop.set()

    def _work(self) -> None:
        while not self._stop.is_set():
            try:
                function, kwargs = self._queue.get_nowait()
            except queue.Empty:
                return
            try:
                function(**kwargs)
            except BaseException:  # noqa: BLE001 - the item itself runs later and reports its own failure
                pass


def dry_run_arguments(function: Callable[..., Any], params: dict[str, Any],
                      fixtures: dict[str, Any]) -> dict[str, Any] | None:
    """Keyword arguments for running a test function outside pytest, or None when one cannot be supplied."""
    kwargs: dict[str, Any] = {}
    for name in inspect.signature(function).parameters:
        if name in params:
            kwargs[name] = params[name]
        elif name in fixtures:
            kwargs[name] = fixtures[name]
        else:
            return None
    return kwargs
