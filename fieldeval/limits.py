"""Concurrency slots and rate limits for model calls, shared by a session's processes.

``--concurrency C`` bounds the calls in flight for the whole session: with
pytest-xdist each of W workers holds its share of C (at least one), so the
shares add up to C. ``[tool.fieldeval.models."MODEL"]`` may set a model's own
``concurrency`` and ``rpm``; ``--rpm N`` caps every model's requests per
minute through a pyrate-limiter bucket in a SQLite file all workers share.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_CONCURRENCY = 16


@dataclass(frozen=True)
class ModelLimits:
    """A model's own limits from ``[tool.fieldeval.models."MODEL"]``; None falls back to the session's."""

    concurrency: int | None = None
    rpm: int | None = None


def share(total: int, index: int, count: int) -> int:
    """Worker ``index`` of ``count``'s part of ``total`` slots (the parts add up to ``total``; each is >= 1)."""
    return max(1, total // count + (1 if index < total % count else 0))


@dataclass
class CallLimits:
    """This process's slots and rate limiters.

    Attributes:
        concurrency: the session-wide bound on calls in flight.
        rpm: requests per minute for every model (None: unlimited).
        models: per-model overrides.
        worker: (index, count) of this process among the session's workers.
        rate_dir: folder of the shared rate-limit file (None: this process only).
    """

    concurrency: int = DEFAULT_CONCURRENCY
    rpm: int | None = None
    models: Mapping[str, ModelLimits] = field(default_factory=dict)
    worker: tuple[int, int] = (0, 1)
    rate_dir: Path | None = None
    _slots: dict[str | None, threading.BoundedSemaphore] = field(default_factory=dict, init=False, repr=False)
    _limiters: dict[str, object] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def local_concurrency(self, model: str | None = None) -> int:
        """Calls this process may have in flight (for one model, or in all)."""
        own = self.models.get(model) if model else None
        total = own.concurrency if own and own.concurrency else self.concurrency
        return share(total, *self.worker)

    def rpm_for(self, model: str) -> int | None:
        """The model's requests-per-minute cap, if any."""
        own = self.models.get(model)
        return own.rpm if own and own.rpm else self.rpm

    def _semaphore(self, key: str | None) -> threading.BoundedSemaphore:
        with self._lock:
            if key not in self._slots:
                self._slots[key] = threading.BoundedSemaphore(self.local_concurrency(key))
            return self._slots[key]

    def rate_limiter(self, model: str):
        """The model's pyrate-limiter Limiter, or None when it has no rpm cap."""
        rpm = self.rpm_for(model)
        if rpm is None:
            return None
        with self._lock:
            if model not in self._limiters:
                from pyrate_limiter import Duration, InMemoryBucket, Limiter, Rate, SQLiteBucket

                rates = [Rate(rpm, Duration.MINUTE)]
                if self.rate_dir is None:
                    bucket = InMemoryBucket(rates)
                else:
                    table = "rpm_" + hashlib.sha256(model.encode("utf-8", "surrogatepass")).hexdigest()[:16]
                    bucket = SQLiteBucket.init_from_file(rates, table=table, db_path=str(self.rate_dir / "rates.sqlite"),
                                                         use_file_lock=True)
                self._limiters[model] = Limiter(bucket)
            return self._limiters[model]

    @contextmanager
    def slot(self, model: str) -> Iterator[None]:
        """Wait for the model's rate limit, then hold a session slot and the model's slot."""
        limiter = self.rate_limiter(model)
        if limiter is not None:
            limiter.try_acquire("call", blocking=True)
        with self._semaphore(None), self._semaphore(model):
            yield
