"""How many calls an endpoint can take at once, found from the latency it answers with.

A local model server (llama.cpp, Ollama, vLLM on a small card) often answers one request at a time and queues the
rest: sending it 16 at once makes each wait for the 15 before it, past ``--call-timeout``, and every retry queues
again. :class:`AdaptiveLimit` keeps the calls in flight to one endpoint where its latency says it has room, as TCP
Vegas and Netflix's concurrency-limits do: it compares the latency of the last ``limit`` answers with the lowest
seen (the endpoint's latency with no queue), estimates the calls waiting in the server's queue as
``limit * (1 - lowest / latency)``, and grows while that queue is short, shrinks when it grows. It starts at one
call (or at the cap, for an endpoint that is not on this machine or its network), doubles while the latency holds,
then moves by one; a timeout, an HTTP 429 or a 503 halves it at once, and answers past a third of
``--call-timeout`` lower it by one. ``--concurrency`` (or the model's own ``concurrency``) caps it.

Answers differ in length, and a long answer takes longer with no queue at all: each latency is taken per
``completion_tokens + OVERHEAD_TOKENS`` (the time to read the prompt and start counts as that many tokens), so a
run that mixes short and long answers is not read as a queue. The wait for a call of one's own is not the call's:
``--call-timeout`` starts when the request is sent.
"""

from __future__ import annotations

import ipaddress
import math
import statistics
import threading
from collections import deque
from collections.abc import Callable
from urllib.parse import urlsplit

OVERHEAD_TOKENS = 32
BASELINE_SAMPLES = 256  # the lowest latency is taken over this many recent answers (a machine's load drifts)
WAIT_CHECK_S = 0.5  # how often a caller waiting for a call of its own checks whether the session is stopping


def local_endpoint(base_url: str) -> bool:
    """Whether an endpoint is on this machine or a private network (a server of one's own, which may queue)."""
    host = (urlsplit(base_url).hostname or "").rstrip(".").lower()
    if host == "localhost" or host.endswith(".localhost") or host.endswith(".local"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private


class AdaptiveLimit:
    """The calls one endpoint may have in flight, moved by the latency of its answers.

    Args:
        cap: the most calls in flight (``--concurrency`` or the model's own).
        call_timeout: the session's ``--call-timeout``; a latency past a third of it shrinks the limit.
        initial: the limit before any answer (1 for a local endpoint, else the cap).
    """

    def __init__(self, cap: int, *, call_timeout: float, initial: int = 1) -> None:
        self.cap = max(1, cap)
        self.limit = max(1, min(initial, self.cap))
        self.in_flight = 0
        self.call_timeout = call_timeout
        self._slow_start = self.limit < self.cap
        self._window: list[tuple[float, float]] = []  # (latency, latency per token) since the last change
        self._baseline: deque[float] = deque(maxlen=BASELINE_SAMPLES)
        self._cond = threading.Condition()

    def acquire(self, check: Callable[[], None] | None = None) -> None:
        """Wait for a call of one's own; ``check`` runs every :data:`WAIT_CHECK_S` s meanwhile and may raise (a
        session that is stopping)."""
        with self._cond:
            while self.in_flight >= self.limit:
                self._cond.wait(WAIT_CHECK_S)
                if check is not None and self.in_flight >= self.limit:
                    check()
            self.in_flight += 1

    def release(self, latency: float | None = None, tokens: int | None = None, *, overloaded: bool = False) -> None:
        """A call ended: answered after ``latency`` seconds with ``tokens`` completion tokens (None when unknown),
        ``overloaded`` (timed out, 429, 503), or neither (an error that says nothing of the server's load)."""
        with self._cond:
            self.in_flight -= 1
            if overloaded:
                self._set(self.limit // 2)
            elif latency is not None:
                self._sample(latency, latency / ((tokens or 0) + OVERHEAD_TOKENS))
            self._cond.notify_all()

    def _sample(self, latency: float, per_token: float) -> None:
        self._window.append((latency, per_token))
        self._baseline.append(per_token)
        if len(self._window) < self.limit:
            return
        typical = statistics.median(p for _, p in self._window)
        slowest = max(seconds for seconds, _ in self._window)
        queued = self.limit * (1 - min(self._baseline) / typical) if typical > 0 else 0.0
        grow_below = max(0.5, 2 * math.log10(self.limit))  # Vegas' alpha and beta, as concurrency-limits scales them
        shrink_above = max(1.0, 4 * math.log10(self.limit))
        if slowest > self.call_timeout / 3 or queued > shrink_above:
            self._set(self.limit - 1)
        elif queued < grow_below and self.limit < self.cap:
            self._set(self.limit * 2 if self._slow_start else self.limit + 1, growing=True)
        else:
            self._window.clear()

    def _set(self, limit: int, *, growing: bool = False) -> None:
        self.limit = max(1, min(self.cap, limit))
        self._slow_start = self._slow_start and growing
        self._window.clear()

    def __str__(self) -> str:
        return f"{self.in_flight} in flight of {self.limit} (cap {self.cap})"


__all__ = ["AdaptiveLimit", "local_endpoint"]
