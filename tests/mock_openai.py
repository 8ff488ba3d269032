"""A local OpenAI-compatible chat server for tests and benchmarks: ``python -m tests.mock_openai PORT_FILE``.

The model name in each request picks the behaviour:

- ``mock-ok``: a normal reply (``forest biome [ENVO:01000174]``, or ``cropland biome [ENVO:01000245]``
  when the prompt mentions Iowa), after the server's delay;
- ``mock-500``: HTTP 500;
- ``mock-invalid``: HTTP 200 whose body is not JSON;
- ``mock-nochoices``: HTTP 200 JSON without ``choices``;
- ``mock-hang``: sleeps an hour before answering;
- ``mock-401``: HTTP 401;
- ``mock-large``: a normal reply whose text is ``LARGE_ANSWER_BYTES`` long (over the default
  ``--max-answer-bytes``).

``STATS.messages`` keeps each request's messages as received (for a server run in the test's process).
``GET /stats`` returns the requests seen (count, per model, per Authorization header), the most in flight at once,
and the server's clock at the first request's start and the last response's end;
``POST /reset`` clears them and takes ``{"delay": seconds, "slots": n}``: with ``slots``, the server answers that
many requests at a time and queues the rest, as a llama.cpp server with one slot does (default: no queue).

A request is in flight from when it is read until just before its answer is written: a caller can start its next
request only after it has the answer, so the count in flight never includes two requests that did not overlap.

A test in the server's process can also hold the answers (``STATS.reset(hold=True)``, then ``STATS.release()``),
or hold each one until the session's callers are all at the server or held back at a call slot
(``STATS.reset(callers=..., processes=..., total=...)``, with the callers' slot waits reported to ``POST /slots``),
and wait on the counts with ``STATS.wait_for(condition, timeout)``. A hold that outlasts ``GATE_DEADLINE_S``
opens the gate for good and is counted in ``gate_timeouts``: a test fails on it instead of hanging.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from collections.abc import Callable
from pathlib import Path

LARGE_ANSWER_BYTES = 2 * 1024 * 1024
GATE_DEADLINE_S = 90.0  # only a broken gate or engine reaches it (a call times out at 120 s by default)


class Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.reset(0.0)

    def reset(self, delay: float, *, hold: bool = False, callers: int | None = None, processes: int = 1,
              total: int | None = None, slots: int | None = None) -> None:
        """Clear the counts; ``delay``: seconds before each answer; ``slots``: requests served at once (the rest
        wait their turn, and their wait counts in their latency), None: all at once.

        Args:
            hold: hold every answer until :meth:`release`.
            callers: hold each answer until this many of the session's callers are in flight here or waiting
                for a call slot, every one of the session's ``processes`` has a caller holding or waiting for a
                slot, and every slot holder's request has arrived here; or until the requests here and the
                callers waiting for a slot make ``total`` (the last requests of the session).
        """
        with self.lock:
            self.delay = delay
            self.serving = threading.Semaphore(slots) if slots else None
            self.requests = 0
            self.by_model: dict[str, int] = {}
            self.by_key: dict[str, int] = {}
            self.in_flight = 0
            self.max_in_flight = 0
            self.first_start: float | None = None
            self.last_end: float | None = None
            self.messages: list[list[dict]] = []  # each request's messages, as received (the first 1,000)
            self.hold = hold
            self.callers, self.processes, self.total = callers, processes, total
            self.slots: dict[int, dict[str, int]] = {}  # pid -> {"waiting": n, "holding": n}, as reported
            self.released = False
            self.held = 0
            self.gate_timeouts = 0
            self.cond.notify_all()

    def received(self, messages: list[dict]) -> None:
        with self.lock:
            if len(self.messages) < 1000:
                self.messages.append(messages)

    def begin(self, model: str, key: str | None = None) -> None:
        with self.lock:
            self.requests += 1
            self.by_model[model] = self.by_model.get(model, 0) + 1
            if key is not None:
                self.by_key[key] = self.by_key.get(key, 0) + 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            if self.first_start is None:
                self.first_start = time.monotonic()
            self.cond.notify_all()

    def end(self) -> None:
        with self.lock:
            self.in_flight -= 1
            self.last_end = time.monotonic()
            self.cond.notify_all()

    def slot_report(self, pid: int, waiting: int = 0, holding: int = 0) -> None:
        """A caller of process ``pid`` began (+1) or ended (-1) waiting for a call slot, or holding one."""
        with self.lock:
            mine = self.slots.setdefault(pid, {"waiting": 0, "holding": 0})
            mine["waiting"] += waiting
            mine["holding"] += holding
            self.cond.notify_all()

    def _open(self) -> bool:
        if self.released:
            return True
        if self.hold:
            return False
        if self.callers is None:
            return True
        waiting = sum(slot["waiting"] for slot in self.slots.values())
        if self.total is not None and self.requests + waiting >= self.total:
            return True
        holding = sum(slot["holding"] for slot in self.slots.values())
        present = sum(1 for slot in self.slots.values() if slot["waiting"] + slot["holding"] > 0)
        return (self.in_flight + waiting >= self.callers and present >= self.processes
                and self.in_flight >= holding)

    def gate(self) -> None:
        """Hold the request just begun while the gate is shut (see :meth:`reset`)."""
        deadline = time.monotonic() + GATE_DEADLINE_S
        with self.lock:
            self.held += 1
            self.cond.notify_all()
            try:
                while not self._open():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        self.gate_timeouts += 1
                        self.released = True  # open for good: the test fails on the count, the session ends
                        self.cond.notify_all()
                        break
                    self.cond.wait(left)
            finally:
                self.held -= 1
                self.cond.notify_all()

    def release(self) -> None:
        """Answer every held request, and every later one at once."""
        with self.lock:
            self.released = True
            self.cond.notify_all()

    def wait_for(self, condition: Callable[[Stats], bool], timeout: float) -> bool:
        """Wait (at most ``timeout`` s, a deadline for a hang only) until ``condition(self)`` holds."""
        with self.cond:
            return self.cond.wait_for(lambda: condition(self), timeout)

    def as_dict(self) -> dict:
        with self.lock:
            return {"requests": self.requests, "by_model": dict(self.by_model), "by_key": dict(self.by_key),
                    "in_flight": self.in_flight,
                    "max_in_flight": self.max_in_flight, "first_start": self.first_start, "last_end": self.last_end,
                    "held": self.held, "gate_timeouts": self.gate_timeouts}


STATS = Stats()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    counted = False  # a chat request is counted in flight (until just before its answer is written)

    def log_message(self, *args) -> None:  # quiet
        pass

    def _ended(self) -> None:
        if self.counted:
            self.counted = False
            STATS.end()

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self._ended()  # before the caller can have the answer: its next request never overlaps this one here
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._send(200, json.dumps(STATS.as_dict()).encode())

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path.rstrip("/").endswith("/reset"):
            settings = json.loads(raw or b"{}")
            STATS.reset(float(settings.get("delay", 0.0)), slots=settings.get("slots"))
            self._send(200, b"{}")
            return
        if self.path.rstrip("/").endswith("/slots"):
            report = json.loads(raw or b"{}")
            STATS.slot_report(int(report["pid"]), int(report.get("waiting", 0)), int(report.get("holding", 0)))
            self._send(200, b"{}")
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self._send(400, b'{"error": {"message": "body is not JSON", "type": "invalid_request_error"}}')
            return
        model = body.get("model", "")
        STATS.received(body.get("messages", []))
        STATS.begin(model, self.headers.get("Authorization"))
        self.counted = True
        try:
            STATS.gate()
            serving = STATS.serving
            if serving is not None:
                serving.acquire()  # queued behind the requests being served
            try:
                if STATS.delay:
                    time.sleep(STATS.delay)
            finally:
                if serving is not None:
                    serving.release()
            if model == "mock-hang":
                time.sleep(3600)
            if model == "mock-500":
                self._send(500, b'{"error": {"message": "server exploded", "type": "server_error"}}')
            elif model == "mock-401":
                self._send(401, b'{"error": {"message": "bad key", "type": "invalid_request_error"}}')
            elif model == "mock-invalid":
                self._send(200, b"<html>not json", "text/html")
            elif model == "mock-nochoices":
                self._send(200, json.dumps({"id": "x", "object": "chat.completion"}).encode())
            else:
                prompt = json.dumps(body.get("messages", []))
                text = "cropland biome [ENVO:01000245]" if "Iowa" in prompt else "forest biome [ENVO:01000174]"
                if model == "mock-large":
                    text = "x" * LARGE_ANSWER_BYTES
                reply = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": model,
                         "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": text}}],
                         "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}}
                self._send(200, json.dumps(reply).encode())
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            self._ended()


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512


def serve(port: int = 0) -> Server:
    """Start the server in a daemon thread; returns it (``server.server_address[1]`` is the port)."""
    server = Server(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True, name="mock-openai").start()
    return server


def extra_models_yaml(port: int, names=("mock-ok", "mock-500", "mock-invalid", "mock-nochoices", "mock-hang",
                                        "mock-401", "mock-large")) -> str:
    """llm's ``extra-openai-models.yaml`` registering each behaviour as a model at this server."""
    return "".join(f"- model_id: {name}\n  model_name: {name}\n  api_base: http://127.0.0.1:{port}/v1\n"
                   for name in names)


if __name__ == "__main__":
    server = Server(("127.0.0.1", 0), Handler)
    Path(sys.argv[1]).write_text(str(server.server_address[1]))
    server.serve_forever()
