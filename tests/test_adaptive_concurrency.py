"""The adaptive limit against simulated servers whose capacity is known: one slot, 64 slots, answers of mixed length.

Each simulation runs in simulated time (no threads, no clock): a server with ``slots`` that answers each request
after ``service(tokens)`` seconds of its own, first come first served, and callers that send as many requests as
the limit lets them.
"""

from __future__ import annotations

import heapq
import math
import random

import pytest

from fieldeval.calls.adaptive import AdaptiveLimit, local_endpoint


def simulate(gate: AdaptiveLimit, *, requests: int, slots: int, service, tokens_of=lambda i: 20):
    """Send ``requests`` through ``gate`` to a server of ``slots``; (wall time, latencies, limits seen)."""
    now, sent, latencies, limits = 0.0, 0, [], []
    free = [0.0] * slots  # when each server slot is next free
    ends: list[tuple[float, float, int]] = []  # (answer time, send time, tokens)
    while sent < requests or ends:
        while sent < requests and gate.in_flight < gate.limit:
            gate.acquire()
            tokens = tokens_of(sent)
            start = max(now, heapq.heappop(free))
            heapq.heappush(free, start + service(tokens))
            heapq.heappush(ends, (start + service(tokens), now, tokens))
            sent += 1
        now, sent_at, tokens = heapq.heappop(ends)
        latencies.append(now - sent_at)
        gate.release(now - sent_at, tokens)
        limits.append(gate.limit)
    return now, latencies, limits


def test_against_a_one_slot_server_the_calls_queue_no_longer_than_two_answers_and_lose_no_time():
    # a local llama.cpp server answers one request at a time: 30 s per EBS prompt, --call-timeout 120 s
    gate = AdaptiveLimit(16, call_timeout=120.0)
    wall, latencies, limits = simulate(gate, requests=100, slots=1, service=lambda tokens: 30.0)
    assert max(limits) <= 2 and max(latencies) <= 60.0  # never near the timeout
    assert wall <= 1.1 * 100 * 30.0  # within 1.1x of one call at a time, which keeps the server as busy


def test_against_a_server_with_room_the_limit_reaches_the_cap_and_the_time_is_about_ceil_n_over_c():
    gate = AdaptiveLimit(16, call_timeout=120.0)
    wall, latencies, limits = simulate(gate, requests=640, slots=64, service=lambda tokens: 1.0)
    assert limits[-1] == 16 and max(latencies) == 1.0
    assert wall <= 1.15 * math.ceil(640 / 16) * 1.0  # the climb from one call costs a few latencies at the start


def test_answers_of_mixed_length_are_not_taken_for_a_queue():
    # a hosted model: 0.3 s to start, 10 ms a token, answers of 20 to 512 tokens, all sent at once with room
    lengths = random.Random(7)
    gate = AdaptiveLimit(16, call_timeout=120.0)
    _, _, limits = simulate(gate, requests=400, slots=64, service=lambda tokens: 0.3 + 0.01 * tokens,
                            tokens_of=lambda i: lengths.randint(20, 512))
    assert sum(limit == 16 for limit in limits[100:]) >= 0.9 * len(limits[100:])


def test_a_timeout_or_an_overloaded_answer_halves_the_limit_at_once():
    gate = AdaptiveLimit(16, call_timeout=120.0, initial=16)
    gate.acquire()
    gate.release(overloaded=True)
    assert gate.limit == 8
    gate.acquire()
    gate.release()  # an error that says nothing of the server's load leaves it
    assert gate.limit == 8 and gate.in_flight == 0


def test_answers_past_a_third_of_the_call_timeout_shrink_the_limit_whatever_the_queue():
    gate = AdaptiveLimit(4, call_timeout=60.0, initial=4)
    for _ in range(4):
        gate.acquire()
    for _ in range(4):
        gate.release(25.0, 20)  # no queue to see (every answer as slow), but each near half the timeout
    assert gate.limit == 3


def test_a_caller_waiting_for_a_call_checks_whether_the_session_is_stopping(monkeypatch):
    import fieldeval.calls.adaptive as adaptive

    monkeypatch.setattr(adaptive, "WAIT_CHECK_S", 0.01)
    gate = AdaptiveLimit(1, call_timeout=120.0)
    gate.acquire()

    def stopping():
        raise RuntimeError("stopping")

    with pytest.raises(RuntimeError, match="stopping"):
        gate.acquire(stopping)
    assert gate.in_flight == 1  # the waiter took nothing


@pytest.mark.parametrize(("url", "local"), [
    ("http://127.0.0.1:8080/v1", True), ("http://localhost:11434/v1", True), ("http://[::1]:8000/v1", True),
    ("http://192.168.1.20:8000/v1", True), ("http://gpu-box.local:8000/v1", True),
    ("https://api.openai.com/v1", False), ("http://8.8.8.8/v1", False),
])
def test_an_endpoint_on_this_machine_or_its_network_starts_at_one_call(url, local):
    assert local_endpoint(url) is local
