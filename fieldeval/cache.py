"""Content-addressed response cache: one SQLite file, safe with many writers.

The key covers the model id, its resolved options, the system prompt, the
rendered prompt and any output schema; a regenerated suite whose prompt
changed can never hit a stale entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from fieldeval.errors import UsageError

CacheMode = Literal["use", "refresh", "off", "replay"]
CACHE_MODES: tuple[str, ...] = ("use", "refresh", "off", "replay")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    text TEXT NOT NULL,
    response_time_s REAL,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))
)
"""


def cache_key(model_id: str, options: dict[str, Any], system: str | None, prompt: str, schema: dict | None) -> str:
    """The sha256 of everything that determines a response."""
    material = json.dumps(
        {"model": model_id, "options": options, "system": system, "prompt": prompt, "schema": schema},
        sort_keys=True, ensure_ascii=False, default=str,
    )
    return hashlib.sha256(material.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class CachedResponse:
    """A stored response with the cost figures of its original call."""

    text: str
    response_time_s: float | None
    prompt_tokens: int | None
    completion_tokens: int | None


def _check_length(path: Path) -> None:
    """A SQLite file shorter than its header says is truncated (SQLite itself notices only when it reads there)."""
    try:
        with open(path, "rb") as handle:
            header = handle.read(100)
    except FileNotFoundError:
        return
    if len(header) < 100 or not header.startswith(b"SQLite format 3\x00"):
        return  # empty (a new cache) or not SQLite at all: SQLite says which
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages, counter, valid_for = (int.from_bytes(header[i:i + 4], "big") for i in (28, 24, 92))
    if pages and counter == valid_for and path.stat().st_size < pages * page_size:
        raise sqlite3.DatabaseError(f"truncated: {path.stat().st_size} of {pages * page_size} bytes")


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
    """The cache file; each call opens a short-lived connection so forked workers never share one.

    A damaged file (truncated, or not SQLite at all) is moved aside as
    ``<name>.corrupt-<UTC timestamp>`` with one warning line, and a fresh cache
    takes its place; a path that cannot hold a file is a usage error.
    """

    def __init__(self, path: Path, *, warn: Callable[[str], None] = _warn) -> None:
        self.path = Path(path)
        if self.path.is_dir():
            raise UsageError(f"response cache {self.path}: is a folder; pass a file to --cache-path, such as "
                             f"{self.path / 'responses.sqlite'}")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._create()
        except sqlite3.DatabaseError as error:
            if isinstance(error, sqlite3.OperationalError) and "unable to open" in str(error) or not self.path.is_file():
                raise UsageError(f"response cache {self.path}: cannot open it ({error}); "
                                 "pass a writable file to --cache-path, or --cache off") from None
            aside = self._move_aside()
            warn(f"fieldeval: response cache {self.path} is damaged ({error}); moved it to {aside.name} "
                 "and started a fresh cache")
            self._create()
        except OSError as error:
            raise UsageError(f"response cache {self.path}: cannot create it ({error.strerror}); "
                             "pass a writable file to --cache-path, or --cache off") from None

    def _create(self) -> None:
        _check_length(self.path)
        with self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(_SCHEMA)
            db.execute("SELECT key FROM responses LIMIT 1").fetchall()

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

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=60)
        db.execute("PRAGMA busy_timeout=60000")
        return db

    def get(self, key: str) -> CachedResponse | None:
        """The stored response for a key, if any."""
        with self._connect() as db:
            row = db.execute(
                "SELECT text, response_time_s, prompt_tokens, completion_tokens FROM responses WHERE key = ?", (key,)
            ).fetchone()
        return CachedResponse(_text_from_db(row[0]), *row[1:]) if row else None

    def put(self, key: str, model: str, response: CachedResponse) -> None:
        """Store (or replace) the response for a key."""
        with self._connect() as db:
            db.execute(
                "INSERT OR REPLACE INTO responses (key, model, text, response_time_s, prompt_tokens, completion_tokens)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (key, model, _text_to_db(response.text), response.response_time_s, response.prompt_tokens,
                 response.completion_tokens),
            )

    def __len__(self) -> int:
        with self._connect() as db:
            return db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
