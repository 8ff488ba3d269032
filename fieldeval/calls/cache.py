"""Content-addressed response cache: one SQLite file (WAL), safe with many writers, written in groups.

The key covers the model id, its resolved options, the system prompt, the
rendered prompt and any output schema; a regenerated suite whose prompt
changed can never hit a stale entry.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from fieldeval.errors import UsageError

CacheMode = Literal["use", "refresh", "off", "replay"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    text TEXT NOT NULL,
    response_time_s REAL,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')),
    batch INTEGER
)
"""


def cache_key(model_id: str, options: dict[str, Any], system: str | None, prompt: str, schema: dict | None,
              endpoint: str | None = None) -> str:
    """The sha256 of everything that determines a response: with ``endpoint`` (an HTTP model's server and model
    name), a name pointed at another server never answers from the first one's entries."""
    fields = {"model": model_id, "options": options, "system": system, "prompt": prompt, "schema": schema}
    if endpoint is not None:
        fields["endpoint"] = endpoint
    material = json.dumps(fields, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(material.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class CachedResponse:
    """A stored response with the cost figures of its original call."""

    text: str
    response_time_s: float | None
    prompt_tokens: int | None
    completion_tokens: int | None
    batch: bool = False  # answered by a provider batch (priced at the batch rate)


def _text_to_db(text: str) -> str | bytes:
    """Text SQLite can hold: as is, or (lone surrogates, which UTF-8 cannot encode) as a BLOB that round-trips."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")
    return text


def _text_from_db(value: str | bytes) -> str:
    return value.decode("utf-8", "surrogatepass") if isinstance(value, bytes) else value


def _warn(line: str) -> None:
    sys.stderr.write(line + "\n")


class ResponseCache:
    """The cache file: one connection per process, writes committed in groups.

    Puts are buffered and committed together every ``FLUSH_ROWS`` rows, and at
    most ``FLUSH_S`` seconds after the first of a group was put (a timer commits
    it when no further put comes), and at :meth:`close` (also run at exit); the file
    stays in WAL mode, so a hard kill loses at most the last ``FLUSH_S`` seconds of
    answers and never damages the file.
    Opening it runs SQLite's own ``PRAGMA quick_check``, which reads the WAL too:
    a damaged file (corrupt, or not SQLite at all) is moved aside as
    ``<name>.corrupt-<UTC timestamp>`` with one warning line and a fresh cache
    takes its place; a path that cannot hold a file is a usage error.
    """

    FLUSH_ROWS = 64
    FLUSH_S = 0.5

    def __init__(self, path: Path, *, warn: Callable[[str], None] = _warn) -> None:
        self.path = Path(path)
        self._db: sqlite3.Connection | None = None
        self._pid = os.getpid()
        self._lock = threading.RLock()
        self._pending: dict[str, tuple] = {}
        self._last_flush = time.monotonic()
        self._timer: threading.Timer | None = None
        if self.path.is_dir():
            raise UsageError(f"response cache {self.path}: is a folder; pass a file to --cache-path, such as "
                             f"{self.path / 'responses.sqlite'}")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._create()
        except sqlite3.DatabaseError as error:
            self._drop()
            if isinstance(error, sqlite3.OperationalError) and "unable to open" in str(error) or not self.path.is_file():
                raise UsageError(f"response cache {self.path}: cannot open it ({error}); "
                                 "pass a writable file to --cache-path, or --cache off") from None
            aside = self._move_aside()
            self._create()
            warn(f"fieldeval: response cache {self.path} is damaged ({error}); moved it to {aside.name} "
                 f"and started a fresh cache{self._carry_batches(aside)}")
        except OSError as error:
            raise UsageError(f"response cache {self.path}: cannot create it ({error.strerror}); "
                             "pass a writable file to --cache-path, or --cache off") from None
        self._opened = os.stat(self.path)
        self._last_key: str | None = None
        self.broken: str | None = None  # why writes stopped: the file was damaged under the session
        atexit.register(self._close_at_exit)

    def damage(self) -> str | None:
        """Why the file can no longer hold this session's answers (removed, replaced or shrunk since it was opened,
        or its last committed answer unreadable), in a few words; None when it can."""
        if self.broken is not None:
            return self.broken
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            return "it was removed during the session"
        if (now.st_dev, now.st_ino) != (self._opened.st_dev, self._opened.st_ino):
            return "it was replaced during the session"
        if now.st_size < self._opened.st_size:
            return f"it shrank from {self._opened.st_size} to {now.st_size} bytes during the session"
        if self._last_key is None:
            return None
        try:
            with self._lock:
                found = self._connection().execute("SELECT 1 FROM responses WHERE key = ?",
                                                   (self._last_key,)).fetchone()
        except sqlite3.DatabaseError as error:
            return f"it cannot be read ({error})"
        return None if found else "the answers written this session are not in it"

    def _create(self) -> None:
        db = self._connection()
        db.execute("PRAGMA journal_mode=WAL")
        verdict = [row[0] for row in db.execute("PRAGMA quick_check").fetchall()]
        if verdict != ["ok"]:
            raise sqlite3.DatabaseError("; ".join(str(v) for v in verdict[:3]))
        db.execute(_SCHEMA)
        if "batch" not in {row[1] for row in db.execute("PRAGMA table_info(responses)")}:  # a cache from before --batch
            db.execute("ALTER TABLE responses ADD COLUMN batch INTEGER")
        db.execute("SELECT key FROM responses LIMIT 1").fetchall()

    def _carry_batches(self, aside: Path) -> str:
        """Carry the damaged file's pending batches over to the fresh one (their requests must not be submitted
        again); what the warning adds about them."""
        from fieldeval.calls.batches.ledger import carry_over

        carried, unreadable = carry_over(aside, self.path)
        if unreadable is not None:
            return (f"; its batch ledger could not be read ({unreadable}): a batch it recorded may still be "
                    f"pending, so check `fieldeval batches list --cache-path {aside}` or the provider's console "
                    "before a --batch session")
        if carried:
            return (f"; its {len(carried)} pending batch(es) ({', '.join(carried[:3])}"
                    f"{', ...' if len(carried) > 3 else ''}) were carried over and are collected, not submitted again")
        return ""

    def _drop(self) -> None:
        if self._db is not None:
            try:
                self._db.close()
            except sqlite3.Error:
                pass
        self._db = None

    def _move_aside(self) -> Path:
        """Rename the damaged file (and its WAL files) to ``.corrupt-<timestamp>``; returns the new path."""
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        aside = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        for suffix in ("", "-wal", "-shm"):
            try:
                os.replace(f"{self.path}{suffix}", f"{aside}{suffix}")
            except FileNotFoundError:  # no WAL file, or a concurrent session moved it first
                pass
        return aside

    def _connection(self) -> sqlite3.Connection:
        """This process's connection (a forked child opens its own)."""
        if self._db is None or self._pid != os.getpid():
            self._pid = os.getpid()
            self._pending = {}
            self._db = sqlite3.connect(self.path, timeout=60, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA busy_timeout=60000")
            self._db.execute("PRAGMA synchronous=NORMAL")
        return self._db

    def get(self, key: str) -> CachedResponse | None:
        """The stored response for a key, if any (including one not yet committed); None once the file is broken."""
        with self._lock:
            pending = self._pending.get(key)
            if pending is not None:
                return CachedResponse(_text_from_db(pending[2]), *pending[3:6], bool(pending[6]))
            if self.broken is not None:
                return None
            try:
                row = self._connection().execute(
                    "SELECT text, response_time_s, prompt_tokens, completion_tokens, batch FROM responses WHERE key = ?",
                    (key,)).fetchone()
            except sqlite3.DatabaseError as error:
                self._break(error)
                return None
        return CachedResponse(_text_from_db(row[0]), *row[1:4], bool(row[4])) if row else None

    def _break(self, error: sqlite3.DatabaseError) -> None:
        """The file was damaged under the session: stop reading and writing it (a full disk is raised instead)."""
        from fieldeval.run.writable import out_of_space

        if out_of_space(error) or "locked" in str(error).lower():
            raise error
        self.broken = f"{type(error).__name__}: {error}"
        self._pending.clear()

    def put(self, key: str, model: str, response: CachedResponse) -> None:
        """Store (or replace) the response for a key; committed with its group."""
        with self._lock:
            self._pending[key] = (key, model, _text_to_db(response.text), response.response_time_s,
                                  response.prompt_tokens, response.completion_tokens, int(response.batch) or None)
            if len(self._pending) >= self.FLUSH_ROWS or time.monotonic() - self._last_flush >= self.FLUSH_S:
                self.flush()
            elif self._timer is None or not self._timer.is_alive() or self._timer_pid != os.getpid():
                self._timer_pid = os.getpid()
                self._timer = threading.Timer(self.FLUSH_S, self._flush_later)
                self._timer.daemon = True
                self._timer.start()

    def _flush_later(self) -> None:
        """The timer's commit of a group no further put completed (errors are the next flush's to report)."""
        try:
            self.flush()
        except (sqlite3.Error, OSError):
            pass

    def flush(self) -> None:
        """Commit the buffered responses in one transaction."""
        with self._lock:
            self._last_flush = time.monotonic()
            if not self._pending or self._pid != os.getpid():
                return
            if self.broken is not None:
                self._pending.clear()
                return
            rows = list(self._pending.values())
            try:
                db = self._connection()
                db.execute("BEGIN IMMEDIATE")
                try:
                    db.executemany(
                        "INSERT OR REPLACE INTO responses (key, model, text, response_time_s, prompt_tokens, "
                        "completion_tokens, batch) VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
                    db.execute("COMMIT")
                    self._last_key = rows[-1][0]
                except BaseException:
                    if db.in_transaction:  # SQLite may have rolled back already (a full disk, say)
                        db.execute("ROLLBACK")
                    raise
            except sqlite3.DatabaseError as error:
                self._break(error)
                return
            self._pending.clear()

    def close(self) -> None:
        """Commit what is buffered and close this process's connection."""
        with self._lock:
            if self._db is None or self._pid != os.getpid():
                return
            try:
                self.flush()
            finally:
                self._drop()

    def _close_at_exit(self) -> None:
        try:
            self.close()
        except sqlite3.Error as error:  # the file went away or was replaced under us: nothing left to keep
            _warn(f"fieldeval: response cache {self.path}: last responses not kept ({error})")

    def __len__(self) -> int:
        with self._lock:
            self.flush()
            return self._connection().execute("SELECT COUNT(*) FROM responses").fetchone()[0]
