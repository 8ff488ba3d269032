"""A local mock of OpenAI's Batch API and Anthropic's Message Batches, for the ``--batch`` tests.

OpenAI: ``POST /v1/files`` (multipart, purpose ``batch``), ``POST /v1/batches``, ``GET /v1/batches/{id}``,
``POST /v1/batches/{id}/cancel``, ``GET /v1/files/{id}/content``. Anthropic: ``POST /v1/messages/batches``,
``GET /v1/messages/batches/{id}``, ``GET /v1/messages/batches/{id}/results``, ``POST .../cancel``.

A batch ends after ``BATCHES.polls`` looks at it. Each line is answered as the chat mock answers
(``cropland biome [ENVO:01000245]`` when the prompt mentions Iowa, else ``forest biome [ENVO:01000174]``),
with 10 input and 3 output tokens; an IBF judge prompt (it holds ``Response to grade:``) is answered with
``JUDGEMENT``, 4 on every dimension. Except: a line whose prompt holds one of ``BATCHES.fail_once`` fails
with HTTP 500 the first time it is seen; one holding ``BATCHES.refuse`` fails with HTTP 400 every time;
with ``BATCHES.expire`` a batch expires with only its first line answered. ``BATCHES.created`` lists
every batch created (its provider and lines), so a test can count submissions. ``GET /v1/batches`` lists
OpenAI batches newest first, 100 a page, with their ``metadata``.

Unlucky networks and providers: ``create_delay`` seconds pass between a create's arrival and the batch's
creation (``BATCHES.creating`` is set meanwhile); with ``drop_create`` the batch is created and the connection
closed without an answer; :meth:`Batches.forget` makes the provider forget every batch (404 from then on).
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


JUDGEMENT = json.dumps({"hazard_recognition": 4, "impact_reasoning": 4, "uncertainty_handling": 4,
                        "action_relevance": 4, "geographic_specificity": 4, "rationale": "covers every note"})


class Batches:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self, *, polls: int = 1, fail_once: tuple[str, ...] = (), refuse: tuple[str, ...] = (),
              expire: bool = False, create_delay: float = 0.0, drop_create: bool = False) -> None:
        with self.lock:
            self.polls, self.fail_once, self.refuse, self.expire = polls, fail_once, refuse, expire
            self.create_delay, self.drop_create = create_delay, drop_create
            self.creating = threading.Event()
            self.files: dict[str, bytes] = {}
            self.batches: dict[str, dict] = {}
            self.created: list[dict] = []
            self.failed_once: set[str] = set()
            self.cancelled: list[str] = []

    def forget(self) -> None:
        """The provider deletes every batch it holds: looks at them answer 404."""
        with self.lock:
            self.batches.clear()

    def answer(self, prompt: str) -> tuple[int, str]:
        """(status, text) of one line."""
        if any(word in prompt for word in self.refuse):
            return 400, "the prompt is refused"
        for word in self.fail_once:
            if word in prompt and prompt not in self.failed_once:
                self.failed_once.add(prompt)
                return 500, "overloaded"
        if "Response to grade:" in prompt:
            return 200, JUDGEMENT
        return 200, "cropland biome [ENVO:01000245]" if "Iowa" in prompt else "forest biome [ENVO:01000174]"


BATCHES = Batches()


def _prompt(params: dict) -> str:
    return " ".join(str(m.get("content")) for m in params.get("messages", []) if m.get("role") == "user")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(self, status: int, body: bytes | dict, content_type: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client was killed while the mock worked: what it asked for is done all the same
            self.close_connection = True

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length", "0")))

    def do_POST(self) -> None:
        body = self._body()
        if self.path in ("/v1/batches", "/v1/messages/batches") and BATCHES.create_delay:
            BATCHES.creating.set()
            time.sleep(BATCHES.create_delay)
        with BATCHES.lock:
            if self.path == "/v1/files":
                content = body.split(b"\r\n\r\n", 2)[-1].rsplit(b"\r\n--", 1)[0]
                file_id = f"file-{len(BATCHES.files)}"
                BATCHES.files[file_id] = content
                return self._send(200, {"id": file_id, "purpose": "batch"})
            if self.path == "/v1/batches":
                asked = json.loads(body)
                lines = [json.loads(line) for line in BATCHES.files[asked["input_file_id"]].splitlines()]
                return self._answer_create(self._create("openai", [(x["custom_id"], _prompt(x["body"]))
                                                                   for x in lines], asked.get("metadata")))
            if self.path == "/v1/messages/batches":
                requests = json.loads(body)["requests"]
                return self._answer_create(self._create("anthropic", [(r["custom_id"], _prompt(r["params"]))
                                                                      for r in requests]))
            found = re.fullmatch(r"/v1(?:/messages)?/batches/([\w-]+)/cancel", self.path)
            if found and found.group(1) in BATCHES.batches:
                BATCHES.cancelled.append(found.group(1))
                BATCHES.batches[found.group(1)]["cancelled"] = True
                return self._send(200, {"id": found.group(1)})
        self._send(404, {"error": {"message": f"no route {self.path}"}})

    def _answer_create(self, view: dict) -> None:
        if BATCHES.drop_create:  # created, and the answer lost on the way
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self._send(200, view)

    def _create(self, provider: str, lines: list[tuple[str, str]], metadata: dict | None = None) -> dict:
        batch_id = f"batch_{provider}_{len(BATCHES.created)}"
        batch = {"id": batch_id, "provider": provider, "lines": lines, "looks": 0, "cancelled": False,
                 "metadata": metadata or {}}
        BATCHES.batches[batch_id] = batch
        BATCHES.created.append(batch)
        return self._view(batch)

    def _ended(self, batch: dict) -> bool:
        return batch["cancelled"] or batch["looks"] > BATCHES.polls

    def _results(self, batch: dict) -> list[tuple[str, int, str | None]]:
        """(custom_id, status, text) of each answered line; expired or cancelled lines are left out (or marked)."""
        if "results" not in batch:
            lines = batch["lines"][:1] if BATCHES.expire or batch["cancelled"] else batch["lines"]
            batch["results"] = [(key, *BATCHES.answer(prompt)) for key, prompt in lines]
        return batch["results"]

    def _view(self, batch: dict) -> dict:
        ended = self._ended(batch)
        results = self._results(batch) if ended else []
        good = sum(1 for _, status, _ in results if status == 200)
        if batch["provider"] == "anthropic":
            expired = len(batch["lines"]) - len(results) if ended else 0
            return {"id": batch["id"], "type": "message_batch", "processing_status": "ended" if ended else "in_progress",
                    "request_counts": {"processing": 0 if ended else len(batch["lines"]), "succeeded": good,
                                       "errored": len(results) - good, "canceled": 0, "expired": expired},
                    "results_url": f"http://{self.headers['Host']}/v1/messages/batches/{batch['id']}/results"
                    if ended else None}
        status = "in_progress"
        if ended:
            status = "cancelled" if batch["cancelled"] else "expired" if BATCHES.expire else "completed"
        return {"id": batch["id"], "object": "batch", "status": status, "metadata": batch["metadata"],
                "request_counts": {"total": len(batch["lines"]), "completed": good, "failed": len(results) - good},
                "output_file_id": f"out-{batch['id']}" if ended else None,
                "error_file_id": f"err-{batch['id']}" if ended else None}

    def do_GET(self) -> None:
        with BATCHES.lock:
            listing = re.fullmatch(r"/v1/batches\?limit=(\d+)(?:&after=([\w-]+))?", self.path)
            if listing:
                newest = [b for b in reversed(list(BATCHES.batches.values())) if b["provider"] == "openai"]
                ids = [b["id"] for b in newest]
                start = ids.index(listing.group(2)) + 1 if listing.group(2) in ids else 0
                page = newest[start:start + int(listing.group(1))]
                return self._send(200, {"object": "list", "data": [self._view(b) for b in page],
                                        "has_more": start + len(page) < len(newest)})
            found = re.fullmatch(r"/v1(?:/messages)?/batches/([\w-]+)", self.path)
            if found and found.group(1) in BATCHES.batches:
                batch = BATCHES.batches[found.group(1)]
                batch["looks"] += 1
                return self._send(200, self._view(batch))
            found = re.fullmatch(r"/v1/files/(out|err)-([\w-]+)/content", self.path)
            if found and found.group(2) in BATCHES.batches:
                return self._send(200, self._openai_file(BATCHES.batches[found.group(2)], found.group(1)),
                                  "application/jsonl")
            found = re.fullmatch(r"/v1/messages/batches/([\w-]+)/results", self.path)
            if found and found.group(1) in BATCHES.batches:
                return self._send(200, self._anthropic_results(BATCHES.batches[found.group(1)]), "application/jsonl")
        self._send(404, {"error": {"message": f"no route {self.path}"}})

    def _openai_file(self, batch: dict, which: str) -> bytes:
        results = self._results(batch)
        out = []
        for key, status, text in results:
            if (status == 200) != (which == "out"):
                continue
            body = ({"choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                     "usage": {"prompt_tokens": 10, "completion_tokens": 3}} if status == 200
                    else {"error": {"message": text}})
            out.append({"custom_id": key, "response": {"status_code": status, "body": body}, "error": None})
        if which == "err":
            answered = {key for key, _, _ in results}
            out += [{"custom_id": key, "response": None, "error": {"code": "batch_expired", "message": "expired"}}
                    for key, _ in batch["lines"] if key not in answered]
        return b"".join(json.dumps(line).encode() + b"\n" for line in out)

    def _anthropic_results(self, batch: dict) -> bytes:
        results = self._results(batch)
        out = []
        for key, status, text in results:
            if status == 200:
                result = {"type": "succeeded", "message": {"content": [{"type": "text", "text": text}],
                                                           "stop_reason": "end_turn",
                                                           "usage": {"input_tokens": 10, "output_tokens": 3}}}
            else:
                kind = "invalid_request_error" if status == 400 else "overloaded_error"
                result = {"type": "errored", "error": {"type": "error", "error": {"type": kind, "message": text}}}
            out.append({"custom_id": key, "result": result})
        answered = {key for key, _, _ in results}
        out += [{"custom_id": key, "result": {"type": "expired"}} for key, _ in batch["lines"] if key not in answered]
        return b"".join(json.dumps(line).encode() + b"\n" for line in out)


class Server(ThreadingHTTPServer):
    daemon_threads = True


def serve() -> Server:
    """Start the mock in a daemon thread; ``server.server_address[1]`` is its port."""
    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True, name="mock-batches").start()
    return server
