"""The batches a cache has paid for: their ids and the requests they hold, in the response cache's own file.

A batch is paid for once, whatever happens around its creation:

- Before a batch is created, its **intent** is recorded: a row in ``batches`` with the digest of its request
  set (:func:`request_set_digest`), an id of the form ``creating-<digest prefix>-<random>``, state ``creating``, and every
  request key it will hold. The provider is sent the same digest (OpenAI's batch ``metadata``), so a batch
  whose creation was cut off (a kill, a lost answer) can be found there afterwards.
- Once the provider answers with the batch's id, the intent becomes the batch (:meth:`BatchLedger.confirm`),
  in one transaction.
- One session at a time submits batches from a given cache (:meth:`BatchLedger.submitting`, a lock on a file
  beside it): a second session waits, then finds the first one's requests pending and waits for its batches.
- An intent still ``creating`` when a session takes the lock was cut off: it is looked up at the provider by
  its digest and becomes the batch found, or is dropped when the provider lists none (nothing was created).
  A provider that cannot be searched (Anthropic's Message Batches keep no metadata) leaves the intent in
  place: its requests wait until ``fieldeval batches forget ID`` says the user has checked.

A later session (the same command again, or ``--resume``) finds its requests pending and waits for that batch
instead of submitting them again; ``fieldeval batches list``, ``cancel ID`` and ``forget ID`` read and change
the same tables. A batch stays pending until its results are in the cache (``collected``); a cancelled one
too, for the lines it answered before it stopped; a forgotten one (the provider no longer knows it) not.
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS batches (id TEXT PRIMARY KEY, provider TEXT NOT NULL, model TEXT NOT NULL, "
    "base_url TEXT NOT NULL, state TEXT NOT NULL, requests INTEGER NOT NULL, submitted_at TEXT NOT NULL, "
    "collected INTEGER NOT NULL DEFAULT 0, digest TEXT)",
    "CREATE TABLE IF NOT EXISTS batch_requests (batch_id TEXT NOT NULL, key TEXT NOT NULL, "
    "PRIMARY KEY (batch_id, key))",
    "CREATE INDEX IF NOT EXISTS batch_requests_key ON batch_requests (key)",
)
CREATING = "creating"  # an intent: the batch is being created, or its creation was cut off
INTENT_PREFIX = "creating-"
FORGOTTEN = "forgotten"
LOCK_WAIT_SAY_S = 2.0  # a session waiting this long for another one's submission says so


def request_set_digest(keys: Iterable[str]) -> str:
    """The sha256 of a batch's request keys, in any order: the same requests give the same digest.

    Example:
        >>> request_set_digest(["b", "a"]) == request_set_digest(["a", "b"])
        True
    """
    return hashlib.sha256("\n".join(sorted(keys)).encode()).hexdigest()


@dataclass(frozen=True)
class BatchRecord:
    """One recorded batch (or the intent to create one: ``state`` ``creating``, ``id`` ``creating-...``)."""

    id: str
    provider: str
    model: str
    base_url: str
    state: str
    requests: int
    submitted_at: str
    collected: bool
    digest: str | None = None

    @property
    def intent(self) -> bool:
        """Whether this is an intent whose batch id the provider has not (yet) given."""
        return self.state == CREATING


class BatchLedger:
    """The ``batches`` and ``batch_requests`` tables of a response cache file."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._db = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA busy_timeout=60000")
        for statement in _SCHEMA:
            self._db.execute(statement)
        if "digest" not in {row[1] for row in self._db.execute("PRAGMA table_info(batches)")}:  # a ledger of 0.x
            self._db.execute("ALTER TABLE batches ADD COLUMN digest TEXT")

    @contextlib.contextmanager
    def submitting(self, say: Callable[[str], None] = lambda line: None) -> Iterator[None]:
        """Hold the cache's submission lock: one session at a time creates batches from this cache (a kill
        releases it). ``say`` is told once when another session holds it for more than a moment."""
        import fcntl

        lock_path = self.path.with_name(self.path.name + ".batch-lock")
        with open(lock_path, "a+b") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                start = time.monotonic()
                said = False
                while True:
                    try:
                        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if not said and time.monotonic() - start > LOCK_WAIT_SAY_S:
                            said = True
                            say(f"fieldeval batch: another session is submitting batches from {self.path}; "
                                "waiting for it, so no request is submitted twice")
                        time.sleep(0.1)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def intend(self, digest: str, provider: str, model: str, base_url: str, keys: Iterable[str]) -> str:
        """Record the intent to create a batch of ``keys`` (before anything is sent); its ``creating-`` id."""
        intent_id = f"{INTENT_PREFIX}{digest[:16]}-{secrets.token_hex(3)}"  # one per try: a forgotten one stays
        self._insert(intent_id, provider, model, base_url, list(keys), state=CREATING, digest=digest)
        return intent_id

    def record(self, batch_id: str, provider: str, model: str, base_url: str, keys: Iterable[str],
               digest: str | None = None) -> None:
        """A created batch and its requests, committed before anything waits on it."""
        self._insert(batch_id, provider, model, base_url, list(keys), state="submitted", digest=digest)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, committed when the block ends, rolled back when it raises (a rollback that
        fails too, as on a full disk where SQLite has rolled back already, never hides the first error)."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            if db.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def _insert(self, batch_id: str, provider: str, model: str, base_url: str, keys: list[str], *, state: str,
                digest: str | None) -> None:
        with self._transaction() as db:
            db.execute("INSERT INTO batches (id, provider, model, base_url, state, requests, submitted_at, digest) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                       (batch_id, provider, model, base_url, state, len(keys), _now(), digest))
            db.executemany("INSERT OR IGNORE INTO batch_requests (batch_id, key) VALUES (?, ?)",
                           ((batch_id, key) for key in keys))

    def confirm(self, intent_id: str, batch_id: str) -> None:
        """The intent's batch was created (or found) as ``batch_id``: one transaction turns the one into the other
        (when the ledger already holds ``batch_id``, the intent is merged into it)."""
        with self._transaction() as db:
            if db.execute("SELECT 1 FROM batches WHERE id = ?", (batch_id,)).fetchone():
                db.execute("UPDATE OR IGNORE batch_requests SET batch_id = ? WHERE batch_id = ?", (batch_id, intent_id))
                db.execute("DELETE FROM batch_requests WHERE batch_id = ?", (intent_id,))
                db.execute("DELETE FROM batches WHERE id = ?", (intent_id,))
            else:
                db.execute("UPDATE batches SET id = ?, state = 'submitted', submitted_at = ? WHERE id = ?",
                           (batch_id, _now(), intent_id))
                db.execute("UPDATE batch_requests SET batch_id = ? WHERE batch_id = ?", (batch_id, intent_id))

    def drop(self, intent_id: str) -> None:
        """Remove an intent whose batch was never created (the provider refused it, or lists none)."""
        with self._transaction() as db:
            db.execute("DELETE FROM batch_requests WHERE batch_id = ?", (intent_id,))
            db.execute("DELETE FROM batches WHERE id = ? AND state = ?", (intent_id, CREATING))

    def mark(self, batch_id: str, state: str, *, collected: bool = False) -> None:
        self._db.execute("UPDATE batches SET state = ?, collected = MAX(collected, ?) WHERE id = ?",
                         (state, int(collected), batch_id))

    def forget(self, batch_id: str) -> None:
        """Stop waiting for a batch (the provider no longer knows it, or an intent the user has checked): its
        requests are no longer pending and run as new."""
        self.mark(batch_id, FORGOTTEN, collected=True)

    def batches(self, *, pending_only: bool = False) -> list[BatchRecord]:
        """Every recorded batch, newest first (only those whose results are not yet collected, with ``pending_only``;
        a cancelled batch's answered lines are paid for, so it is collected too)."""
        where = " WHERE collected = 0" if pending_only else ""
        rows = self._db.execute("SELECT id, provider, model, base_url, state, requests, submitted_at, collected, "
                                f"digest FROM batches{where} ORDER BY submitted_at DESC, id").fetchall()
        return [BatchRecord(*row[:7], bool(row[7]), row[8]) for row in rows]

    def get(self, batch_id: str) -> BatchRecord | None:
        return next((b for b in self.batches() if b.id == batch_id), None)

    def collected_ids(self) -> set[str]:
        """The ids of the batches whose results are already in the cache (or forgotten)."""
        return {row[0] for row in self._db.execute("SELECT id FROM batches WHERE collected = 1")}

    def pending_for(self, keys: Iterable[str]) -> dict[str, str]:
        """``{key: batch id}`` of the keys a pending batch (or intent) holds."""
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


def carry_over(damaged: Path, fresh: Path) -> tuple[list[str], str | None]:
    """Copy the pending batches (and intents) recorded in a damaged cache file into the fresh one that replaces
    it; the ids carried, and why the damaged file's ledger could not be read (None when it could)."""
    try:
        source = sqlite3.connect(f"{Path(damaged).resolve().as_uri()}?mode=ro", uri=True, timeout=5)
        try:
            tables = {row[0] for row in source.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "batches" not in tables:
                return [], None
            columns = {row[1] for row in source.execute("PRAGMA table_info(batches)")}
            digest = "digest" if "digest" in columns else "NULL"
            batches = source.execute("SELECT id, provider, model, base_url, state, requests, submitted_at, "
                                     f"{digest} FROM batches WHERE collected = 0").fetchall()
            keys = {b[0]: [row[0] for row in source.execute("SELECT key FROM batch_requests WHERE batch_id = ?",
                                                            (b[0],))] for b in batches}
        finally:
            source.close()
    except sqlite3.DatabaseError as error:
        return [], str(error)
    if not batches:
        return [], None
    ledger = BatchLedger(fresh)
    try:
        for batch_id, provider, model, base_url, state, _count, _submitted, found_digest in batches:
            if ledger.get(batch_id) is None:
                ledger._insert(batch_id, provider, model, base_url, keys[batch_id], state=state, digest=found_digest)
    finally:
        ledger.close()
    return [b[0] for b in batches], None


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


__all__ = ["BatchLedger", "BatchRecord", "carry_over", "request_set_digest"]
