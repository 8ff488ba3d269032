"""The two batch APIs over HTTP: OpenAI's Batch API and Anthropic's Message Batches.

Each provider turns resolved requests (:class:`fieldeval.calls.records.Request`) into one batch's lines, each
line's ``custom_id`` the request's cache key; submits them; reads a batch's state and counts; reads its results
as ``(key, outcome)`` pairs, an outcome being the answer's text and tokens or the classified error
(:mod:`fieldeval.calls.failures`); and cancels a batch. Connections are the call engine's checked ones
(:mod:`fieldeval.calls.transport`: the endpoint rules, the proxy environment, a timeout).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from fieldeval.calls.failures import (InvalidReplyError, ModelCallError, PermanentCallError, TransientCallError,
                                      classify)
from fieldeval.calls.transport import HTTPStatusError, _pool_manager, parse_chat_reply

OPENAI_BASE = "https://api.openai.com/v1"
ANTHROPIC_BASE = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
HTTP_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class BatchState:
    """A batch as the provider reports it: ``ended`` once no line will change; counts of its lines."""

    state: str
    ended: bool
    total: int
    succeeded: int
    failed: int


@dataclass(frozen=True)
class Answer:
    """One line's answer."""

    text: str
    prompt_tokens: int | None
    completion_tokens: int | None


Outcome = Answer | ModelCallError
METADATA_KEY = "fieldeval_request_set"  # the batch metadata that holds its request set's digest
LOOKUP_PAGES = 10  # pages of 100 of the provider's latest batches searched for a digest
GONE = ("failed", "expired", "cancelled", "cancelling")  # states of a batch that will answer nothing more


class NotKnown(PermanentCallError):
    """The provider does not know the batch (or file) asked for: HTTP 404."""


class CreationUnknown(Exception):
    """The create request was sent and its answer lost (a dropped connection, a timeout, a 5xx): the batch may
    exist at the provider. ``error`` is the classified failure."""

    def __init__(self, error: ModelCallError) -> None:
        super().__init__(error.detail)
        self.error = error


class BatchHTTP:
    """JSON over one checked connection pool to a provider's base URL, with the provider's headers."""

    def __init__(self, base: str, headers: dict[str, str]) -> None:
        self.base = base.rstrip("/")
        self.headers = headers
        self._pool, self.proxy = _pool_manager(self.base, 4, HTTP_TIMEOUT_S)

    def send(self, method: str, path: str, *, body: bytes | None = None, content_type: str = "application/json",
             model: str = "-") -> bytes:
        """The body of a 2xx answer; a classified :class:`ModelCallError` otherwise (connection errors too)."""
        url = path if path.startswith(("http://", "https://")) else self.base + path
        headers = {**self.headers, **({"Content-Type": content_type} if body is not None else {})}
        try:
            reply = self._pool.request(method, url, body=body, headers=headers)
        except Exception as error:  # noqa: BLE001 - connection failures are classified like a live call's
            raise classify(model, error) from None
        if not 200 <= reply.status < 300:
            message = _error_message(reply.data)
            if reply.status == 404:
                raise NotKnown(model, "HTTP 404", message)
            raise classify(model, HTTPStatusError(reply.status, dict(reply.headers), message))
        return reply.data

    def json(self, method: str, path: str, payload: Any = None, *, model: str = "-") -> Any:
        body = None if payload is None else json.dumps(payload, ensure_ascii=False).encode("utf-8", "surrogatepass")
        data = self.send(method, path, body=body, model=model)
        try:
            return json.loads(data)
        except ValueError:
            raise InvalidReplyError(model, f"the batch API answered {path} with a body that is not JSON") from None


def _error_message(data: bytes) -> str:
    try:
        error = json.loads(data).get("error")
        return str(error.get("message") if isinstance(error, dict) else error)[:300]
    except (ValueError, AttributeError):
        return " ".join(data[:300].decode("utf-8", "replace").split()) or "no body"


def _jsonl(data: bytes) -> Iterator[dict]:
    for line in data.splitlines():
        if line.strip():
            try:
                yield json.loads(line)
            except ValueError:
                continue  # a line that is not JSON holds no custom_id: its request stays unanswered


class OpenAIBatches:
    """OpenAI's Batch API (and OpenAI-compatible endpoints registered with ``--batch``).

    Limits: 50,000 requests and 200 MB per input file.
    """

    name = "openai"
    max_requests = 50_000
    max_bytes = 200 * 1024 * 1024

    def __init__(self, base: str, key: str | None) -> None:
        self.base = base
        self.http = BatchHTTP(base, {"Authorization": f"Bearer {key}"} if key else {})

    @staticmethod
    def line(request: Any, body: dict) -> bytes:
        """One input line: the live call's body, under the request's cache key."""
        return json.dumps({"custom_id": request.key, "method": "POST", "url": "/v1/chat/completions", "body": body},
                          ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n"

    searchable = True  # a batch can be found by its metadata (:meth:`find`)

    def submit(self, lines: list[bytes], model: str, digest: str | None = None) -> str:
        """Upload the lines as a ``batch`` file and create the batch, its metadata holding ``digest``; its id.
        A create whose answer was lost raises :class:`CreationUnknown`."""
        boundary = uuid.uuid4().hex
        payload = b"".join([
            f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'.encode(),
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="fieldeval.jsonl"\r\n'
            "Content-Type: application/jsonl\r\n\r\n".encode(), *lines, f"\r\n--{boundary}--\r\n".encode()])
        uploaded = json.loads(self.http.send("POST", "/files", body=payload, model=model,
                                             content_type=f"multipart/form-data; boundary={boundary}"))
        body = {"input_file_id": uploaded["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"}
        if digest is not None:
            body["metadata"] = {METADATA_KEY: digest}
        try:
            created = self.http.json("POST", "/batches", body, model=model)
        except ModelCallError as error:
            if isinstance(error, PermanentCallError):
                raise  # refused: nothing was created
            raise CreationUnknown(error) from None
        return _created_id(created, model)

    def find(self, digest: str, model: str) -> list[tuple[str, str]]:
        """``(id, status)`` of the provider's latest batches whose metadata holds ``digest``, newest first."""
        found, after = [], None
        for _ in range(LOOKUP_PAGES):
            page = self.http.json("GET", "/batches?limit=100" + (f"&after={after}" if after else ""), model=model)
            for batch in page.get("data") or []:
                if ((batch.get("metadata") or {}).get(METADATA_KEY)) == digest:
                    found.append((str(batch.get("id")), str(batch.get("status"))))
            data = page.get("data") or []
            if not page.get("has_more") or not data:
                break
            after = data[-1].get("id")
        return found

    def state(self, batch_id: str, model: str) -> BatchState:
        found = self.http.json("GET", f"/batches/{batch_id}", model=model)
        counts = found.get("request_counts") or {}
        status = str(found.get("status"))
        return BatchState(status, status in ("completed", "failed", "expired", "cancelled"), int(counts.get("total", 0)),
                          int(counts.get("completed", 0)), int(counts.get("failed", 0)))

    def results(self, batch_id: str, model: str) -> Iterator[tuple[str, Outcome]]:
        """Every answered or failed line of an ended batch (lines it never reached are not listed)."""
        found = self.http.json("GET", f"/batches/{batch_id}", model=model)
        if found.get("status") == "failed":  # the input was refused as a whole (validation)
            errors = (found.get("errors") or {}).get("data") or [{}]
            reason = "; ".join(str(e.get("message", "refused")) for e in errors[:3])
            yield "*", PermanentCallError(model, "BatchFailed", reason)
            return
        for file_id in (found.get("output_file_id"), found.get("error_file_id")):
            if file_id:
                for line in _jsonl(self.http.send("GET", f"/files/{file_id}/content", model=model)):
                    yield str(line.get("custom_id")), self._outcome(line, model)

    @staticmethod
    def _outcome(line: dict, model: str) -> Outcome:
        response, error = line.get("response") or {}, line.get("error")
        status = response.get("status_code")
        if status == 200:
            try:
                text, prompt_tokens, completion_tokens = parse_chat_reply(model, json.dumps(response.get("body")).encode())
            except ModelCallError as invalid:
                return invalid
            return Answer(text, prompt_tokens, completion_tokens)
        if status is not None:
            body = response.get("body") or {}
            message = (body.get("error") or {}).get("message", "no message") if isinstance(body, dict) else str(body)
            return classify(model, HTTPStatusError(int(status), {}, str(message)[:300]))
        what = error if isinstance(error, dict) else {"code": "unanswered", "message": str(error)}
        return TransientCallError(model, str(what.get("code") or "BatchLineError"), str(what.get("message"))[:300])

    def cancel(self, batch_id: str, model: str) -> None:
        self.http.json("POST", f"/batches/{batch_id}/cancel", {}, model=model)


class AnthropicBatches:
    """Anthropic's Message Batches, for Claude models (llm-anthropic's).

    Limits: 100,000 requests and 256 MB per batch.
    """

    name = "anthropic"
    max_requests = 100_000
    max_bytes = 256 * 1024 * 1024

    def __init__(self, base: str, key: str | None) -> None:
        self.base = base
        self.http = BatchHTTP(base, {"x-api-key": key or "", "anthropic-version": ANTHROPIC_VERSION})

    @staticmethod
    def line(request: Any, body: dict) -> bytes:
        return json.dumps({"custom_id": request.key, "params": body}, ensure_ascii=False).encode(
            "utf-8", "surrogatepass")

    searchable = False  # Message Batches keep no metadata: a batch cannot be found by its requests until it ends

    def submit(self, lines: list[bytes], model: str, digest: str | None = None) -> str:
        """Create the batch; its id. A create whose answer was lost raises :class:`CreationUnknown`."""
        payload = b'{"requests": [' + b", ".join(lines) + b"]}"
        try:
            data = self.http.send("POST", "/v1/messages/batches", body=payload, model=model)
        except ModelCallError as error:
            if isinstance(error, PermanentCallError):
                raise
            raise CreationUnknown(error) from None
        try:
            created = json.loads(data)
        except ValueError:
            created = None
        return _created_id(created, model)

    def find(self, digest: str, model: str) -> list[tuple[str, str]]:
        raise NotImplementedError("Anthropic's Message Batches cannot be searched by their requests")

    def state(self, batch_id: str, model: str) -> BatchState:
        found = self.http.json("GET", f"/v1/messages/batches/{batch_id}", model=model)
        counts = found.get("request_counts") or {}
        failed = sum(int(counts.get(k, 0)) for k in ("errored", "canceled", "expired"))
        total = failed + sum(int(counts.get(k, 0)) for k in ("processing", "succeeded"))
        status = str(found.get("processing_status"))
        return BatchState(status, status == "ended", total, int(counts.get("succeeded", 0)), failed)

    def results(self, batch_id: str, model: str) -> Iterator[tuple[str, Outcome]]:
        found = self.http.json("GET", f"/v1/messages/batches/{batch_id}", model=model)
        url = found.get("results_url")
        if not url:
            return
        for line in _jsonl(self.http.send("GET", _same_origin(self.base, str(url)), model=model)):
            yield str(line.get("custom_id")), self._outcome(line.get("result") or {}, model)

    @staticmethod
    def _outcome(result: dict, model: str) -> Outcome:
        kind = result.get("type")
        if kind == "succeeded":
            message = result.get("message") or {}
            text = "".join(block.get("text", "") for block in message.get("content") or []
                           if isinstance(block, dict) and block.get("type") == "text")
            usage = message.get("usage") or {}
            if not text and message.get("stop_reason") not in ("end_turn", "max_tokens", "stop_sequence"):
                return InvalidReplyError(model, "the batch line holds no text")
            return Answer(text, usage.get("input_tokens"), usage.get("output_tokens"))
        if kind == "errored":
            error = (result.get("error") or {}).get("error") or result.get("error") or {}
            name, message = str(error.get("type", "api_error")), str(error.get("message", "no message"))[:300]
            if name in ("invalid_request_error", "authentication_error", "permission_error", "not_found_error"):
                return PermanentCallError(model, name, message)
            return TransientCallError(model, name, message)
        return TransientCallError(model, f"Batch{str(kind).capitalize()}", f"the batch line was {kind}")

    def cancel(self, batch_id: str, model: str) -> None:
        self.http.json("POST", f"/v1/messages/batches/{batch_id}/cancel", {}, model=model)


def _created_id(created: Any, model: str) -> str:
    """The id in a create's answer; an answer without one may still have created the batch."""
    batch_id = created.get("id") if isinstance(created, dict) else None
    if not batch_id:
        raise CreationUnknown(InvalidReplyError(model, "the batch API answered the create without a batch id"))
    return str(batch_id)


def _same_origin(base: str, url: str) -> str:
    """A results URL on the provider's own host only: the key is never sent elsewhere."""
    ours, theirs = urlsplit(base), urlsplit(url)
    if (theirs.scheme, theirs.netloc) != (ours.scheme, ours.netloc):
        raise PermanentCallError("-", "BatchResultsElsewhere", f"results at {theirs.netloc}, not {ours.netloc}")
    return url


def provider_for(model: Any) -> OpenAIBatches | AnthropicBatches | None:
    """The batch API that serves an llm model, or None (it has none: its calls run live).

    OpenAI's own chat models and endpoints registered with ``--batch``: OpenAI's Batch API. Claude models
    (llm-anthropic's, which need the ``anthropic`` key): Message Batches.
    """
    from fieldeval.calls.models import openai_compatible

    key = model.get_key() if getattr(model, "needs_key", None) and hasattr(model, "get_key") else None
    if getattr(model, "needs_key", None) == "anthropic" and getattr(model, "claude_model_id", None):
        base = getattr(model, "base_url", None) or os.environ.get("ANTHROPIC_BASE_URL") or ANTHROPIC_BASE
        return AnthropicBatches(base, key)
    if not openai_compatible(model):
        return None
    if getattr(model, "fieldeval_endpoint", False):
        return OpenAIBatches(model.api_base, key) if getattr(model, "fieldeval_batch", False) else None
    base = getattr(model, "api_base", None) or OPENAI_BASE
    return OpenAIBatches(base, key) if base.rstrip("/") == OPENAI_BASE else None


def request_body(provider: Any, model: Any, request: Any) -> dict | None:
    """The body of one request as the provider's batch line holds it; None when the batch API cannot take it
    (a schema for Claude)."""
    messages = [{"role": "user", "content": request.prompt}]
    if isinstance(provider, AnthropicBatches):
        if request.schema is not None:
            return None
        body = {"model": model.claude_model_id, "messages": messages,
                "max_tokens": request.options.get("max_tokens") or getattr(model, "default_max_tokens", None) or 4096}
        if request.system:
            body["system"] = request.system
        body.update({k: v for k, v in request.options.items() if k in ("temperature", "top_p", "top_k")})
        return body
    system = [{"role": "system", "content": request.system}] if request.system else []
    body = {"model": getattr(model, "model_name", None) or model.model_id, "messages": [*system, *messages],
            **request.options}
    if request.schema is not None:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "output", "schema": request.schema}}
    return body


def split(lines: Iterable[bytes], max_requests: int, max_bytes: int) -> Iterator[list[bytes]]:
    """The lines in order, in parts of at most ``max_requests`` lines and ``max_bytes`` bytes."""
    part: list[bytes] = []
    size = 0
    for line in lines:
        if part and (len(part) >= max_requests or size + len(line) > max_bytes):
            yield part
            part, size = [], 0
        part.append(line)
        size += len(line)
    if part:
        yield part


__all__ = ["GONE", "AnthropicBatches", "Answer", "BatchState", "CreationUnknown", "NotKnown", "OpenAIBatches", "Outcome", "provider_for", "request_body",
           "split"]
