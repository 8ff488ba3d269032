"""Content-addressed response cache: one SQLite file, safe with many writers.

The key covers the model id, its resolved options, the system prompt, the
rendered prompt and any output schema; a regenerated suite whose prompt
changed can never hit a stale entry.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

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
    return hashlib.sha256(material.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CachedResponse:
    """A stored response with the cost figures of its original call."""

    text: str
    response_time_s: float | None
    prompt_tokens: int | None
    completion_tokens: int | None


class ResponseCache:
    """The cache file; each call opens a short-lived connection so forked workers never share one."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(_SCHEMA)

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
        return CachedResponse(*row) if row else None

    def put(self, key: str, model: str, response: CachedResponse) -> None:
        """Store (or replace) the response for a key."""
        with self._connect() as db:
            db.execute(
                "INSERT OR REPLACE INTO responses (key, model, text, response_time_s, prompt_tokens, completion_tokens)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (key, model, response.text, response.response_time_s, response.prompt_tokens,
                 response.completion_tokens),
            )

    def __len__(self) -> int:
        with self._connect() as db:
            return db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
