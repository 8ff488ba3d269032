"""The batches a cache has paid for: their ids and the requests they hold, in the response cache's own file.

A batch is recorded, with every request key it holds, in one transaction as soon as the provider has
created it and before anything waits on it. A later session (the same command again, or ``--resume``) finds
its requests pending and waits for that batch instead of submitting them again; ``fieldeval batches list``
and ``fieldeval batches cancel ID`` read and change the same tables. A batch stays pending until its
results are in the cache (``collected``); a cancelled one too, for the lines it answered before it stopped.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS batches (id TEXT PRIMARY KEY, provider TEXT NOT NULL, model TEXT NOT NULL, "
    "base_url TEXT NOT NULL, state TEXT NOT NULL, requests INTEGER NOT NULL, submitted_at TEXT NOT NULL, "
    "collected INTEGER NOT NULL DEFAULT 0)",
    "CREATE TABLE IF NOT EXISTS batch_requests (batch_id TEXT NOT NULL, key TEXT NOT NULL, "
    "PRIMARY KEY (batch_id, key))",
    "CREATE INDEX IF NOT EXISTS batch_requests_key ON batch_requests (key)",
)


@dataclass(frozen=True)
class BatchRecord:
    """One recorded batch."""

    id: str
    provider: str
    model: str
    base_url: str
    state: str
    requests: int
    submitted_at: str
    collected: bool


class BatchLedger:
    """The ``batches`` and ``batch_requests`` tables of a response cache file."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._db = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA busy_timeout=60000")
        for statement in _SCHEMA:
            self._db.execute(statement)

    def record(self, batch_id: str, provider: str, model: str, base_url: str, keys: Iterable[str]) -> None:
        """A created batch and its requests, committed before anything waits on it."""
        keys = list(keys)
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute("INSERT INTO batches (id, provider, model, base_url, state, requests, submitted_at) "
                       "VALUES (?, ?, ?, ?, 'submitted', ?, ?)",
                       (batch_id, provider, model, base_url, len(keys), datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")))
            db.executemany("INSERT OR IGNORE INTO batch_requests (batch_id, key) VALUES (?, ?)",
                           ((batch_id, key) for key in keys))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def mark(self, batch_id: str, state: str, *, collected: bool = False) -> None:
        self._db.execute("UPDATE batches SET state = ?, collected = MAX(collected, ?) WHERE id = ?",
                         (state, int(collected), batch_id))

    def batches(self, *, pending_only: bool = False) -> list[BatchRecord]:
        """Every recorded batch, newest first (only those whose results are not yet collected, with ``pending_only``;
        a cancelled batch's answered lines are paid for, so it is collected too)."""
        where = " WHERE collected = 0" if pending_only else ""
        rows = self._db.execute("SELECT id, provider, model, base_url, state, requests, submitted_at, collected "
                                f"FROM batches{where} ORDER BY submitted_at DESC, id").fetchall()
        return [BatchRecord(*row[:7], bool(row[7])) for row in rows]

    def get(self, batch_id: str) -> BatchRecord | None:
        return next((b for b in self.batches() if b.id == batch_id), None)

    def pending_for(self, keys: Iterable[str]) -> dict[str, str]:
        """``{key: batch id}`` of the keys a pending batch holds."""
        wanted = set(keys)
        pending = {b.id for b in self.batches(pending_only=True)}
        if not wanted or not pending:
            return {}
        found: dict[str, str] = {}
        for batch_id, key in self._db.execute(
                f"SELECT batch_id, key FROM batch_requests WHERE batch_id IN ({', '.join('?' * len(pending))})",
                tuple(pending)):
            if key in wanted:
                found[key] = batch_id
        return found

    def keys(self, batch_id: str) -> set[str]:
        return {row[0] for row in self._db.execute("SELECT key FROM batch_requests WHERE batch_id = ?", (batch_id,))}

    def close(self) -> None:
        self._db.close()


__all__ = ["BatchLedger", "BatchRecord"]
