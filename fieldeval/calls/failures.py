"""What went wrong with a model call, and whether trying again can help.

The classes every part of the engine raises and catches:

- :class:`TransientCallError`: timeouts (:class:`CallTimeoutError`), connections refused
  (:class:`ConnectionRefusedCallError`), names that did not resolve (:class:`LookupFailedError`),
  other connection errors, HTTP 408/409/425/429, 5xx, provider overload; retried with backoff,
  honouring Retry-After.
- :class:`InvalidReplyError` (a transient error): an HTTP 200 whose body is empty or
  not JSON, a truncated stream, no ``choices``, no text; retried, then errored,
  never scored and never cached.
- :class:`ContextExceededError`: a prompt longer than the model's context window; that item fails alone
  (error class ``context_exceeded``, with the prompt's tokens, the window and the fix), never retried, and the
  model's other items go on (the client ends the model only when each of its first few calls failed so).
- :class:`PermanentCallError`: a missing key, authentication, an unknown model, a bad
  request, a failed TLS handshake (:class:`TLSFailedError`), an endpoint
  whose name resolves to a refused address (:class:`AddressRefusedError`); never retried, and
  it ends the model's remaining calls.
- :class:`AnswerTooLargeError`: an answer past ``--max-answer-bytes``; not retried, never
  scored or cached, and the model's other calls go on.
- :class:`ModelCallError`: their base, and what an item finally raises (``kind`` says which).

An error nobody recognises is treated as transient.
"""

from __future__ import annotations

import email.utils
import json
import re
import time
from typing import Any

PERMANENT_STATUS = frozenset({400, 401, 402, 403, 404, 405, 413, 422})
PERMANENT_NAMES = frozenset({"NeedsKeyException", "UnknownModelError", "AuthenticationError",
                             "PermissionDeniedError", "NotFoundError", "BadRequestError",
                             "UnprocessableEntityError"})
CONTEXT_PHRASES = ("context length", "context window", "maximum context", "too many tokens", "prompt is too long",
                   "context_length_exceeded")
# the window and the prompt's tokens as llama.cpp (in process and its server), OpenAI and Anthropic word them
WINDOW_PATTERNS = (re.compile(r"context (?:length|window) (?:is |of )(\d+)", re.I), re.compile(r"> (\d+) maximum"))
PROMPT_PATTERNS = (re.compile(r"Requested tokens \((\d+)\)"), re.compile(r"\((\d+) in the messages"),
                   re.compile(r"resulted in (\d+) tokens"), re.compile(r"too long: (\d+) tokens"))
KEY_FIXES = {"openai": "llm keys set openai", "anthropic": "llm keys set anthropic", "gemini": "llm keys set gemini"}


class ModelCallError(RuntimeError):
    """A model call that produced no response.

    Attributes:
        model: the model id asked.
        detail: one line: error class and message.
        kind: ``transient`` (retries ran out), ``permanent``, ``context_exceeded`` (that item's prompt is longer
            than the model's window), ``skipped`` (the model failed
            permanently earlier, or the session is stopping), ``replay`` (no recorded response),
            ``too_large`` (an answer past ``--max-answer-bytes``), or ``refused`` (a batch line the provider
            refused: that item fails, the model's other calls go on).
    """

    def __init__(self, model: str, detail: str, *, kind: str = "transient") -> None:
        super().__init__(f"{model}: {detail}")
        self.model = model
        self.detail = detail
        self.kind = kind


class PermanentCallError(ModelCallError):
    """A failure retrying cannot mend: the model's remaining calls end at once."""

    def __init__(self, model: str, error_class: str, message: str) -> None:
        super().__init__(model, f"{error_class}: {message}{_fix(model, error_class, message)}", kind="permanent")


class ContextExceededError(ModelCallError):
    """A prompt longer than the model's context window: its item fails alone, not retried.

    Attributes:
        prompt_tokens: the prompt's tokens as the model counted them (None: not said).
        window: the model's context window in tokens (None: not said).
    """

    def __init__(self, model: str, prompt_tokens: int | None, window: int | None, fix: str) -> None:
        tokens = f"the prompt's {prompt_tokens} tokens" if prompt_tokens else "the prompt"
        where = f"the context window of {window} tokens" if window else "the model's context window"
        super().__init__(model, f"context_exceeded: {tokens} (with the answer's budget) exceed {where}; fix: {fix}",
                         kind="context_exceeded")
        self.prompt_tokens, self.window, self.fix = prompt_tokens, window, fix

    @classmethod
    def from_message(cls, model: str, message: str, fix: str = "use a model with a larger context window, or a "
                     "shorter prompt") -> ContextExceededError:
        """The error for a provider's own words, with the prompt's tokens and the window read from them."""
        return cls(model, _first_number(PROMPT_PATTERNS, message), _first_number(WINDOW_PATTERNS, message), fix)

    def with_fix(self, fix: str) -> ContextExceededError:
        """The same error naming another fix."""
        return ContextExceededError(self.model, self.prompt_tokens, self.window, fix)


def _first_number(patterns: tuple[re.Pattern, ...], text: str) -> int | None:
    for pattern in patterns:
        found = pattern.search(text)
        if found:
            return int(found.group(1))
    return None


class TransientCallError(ModelCallError):
    """A failure worth another try, perhaps after the provider's Retry-After."""

    def __init__(self, model: str, error_class: str, message: str, *, retry_after: float | None = None,
                 status: int | None = None) -> None:
        super().__init__(model, f"{error_class}: {message}", kind="transient")
        self.retry_after = retry_after
        self.status = status  # the HTTP status, when there was one

    @property
    def overloaded(self) -> bool:
        """Whether the failure says the server has too much to do (HTTP 429 or 503)."""
        return self.status in (429, 503)


class InvalidReplyError(TransientCallError):
    """A reply that came back but holds no answer: empty or undecodable body, truncated, no ``choices``."""

    def __init__(self, model: str, message: str) -> None:
        super().__init__(model, "InvalidReply", message)


class CallTimeoutError(TransientCallError):
    """No answer within the call timeout."""

    def __init__(self, model: str, timeout: float) -> None:
        super().__init__(model, "TimeoutError", f"no answer within --call-timeout {timeout:g} s")


class ConnectionRefusedCallError(TransientCallError):
    """Nothing listens at the endpoint's address and port (the server is down or the port is wrong)."""

    def __init__(self, model: str, where: str) -> None:
        super().__init__(model, "ConnectionRefused",
                         f"{where} refused the connection; start the model server or fix the endpoint's port")


class LookupFailedError(TransientCallError):
    """The endpoint's host name did not resolve."""

    def __init__(self, model: str, host: str, reason: str) -> None:
        super().__init__(model, "LookupFailed", f"{host} did not resolve ({reason}); check the endpoint's host name")


class TLSFailedError(PermanentCallError):
    """The TLS handshake failed: a plain-HTTP server spoken to over https, or a certificate that does not verify."""

    def __init__(self, model: str, where: str, reason: str) -> None:
        super().__init__(model, "TLSError", f"TLS with {where} failed ({reason}); check the endpoint's scheme "
                                            "(http or https) and the server's certificate")


class AddressRefusedError(PermanentCallError):
    """An endpoint whose name resolves, at connection time, to a link-local, multicast or unspecified address."""

    def __init__(self, model: str, host: str, address: str, kind: str) -> None:
        super().__init__(model, "AddressRefused",
                         f"{host} now resolves to {address}, a {kind} address, and no connection is made "
                         "(cloud metadata services live at link-local ones); point the name back at the model server")


class AnswerTooLargeError(ModelCallError):
    """An answer larger than ``--max-answer-bytes``: never scored or cached, and not retried."""

    def __init__(self, model: str, limit: int) -> None:
        super().__init__(model, f"AnswerTooLarge: answer too large (over --max-answer-bytes {limit}); raise "
                                "--max-answer-bytes or lower the model's max_tokens", kind="too_large")


def _fix(model: str, error_class: str, message: str) -> str:
    if error_class != "NeedsKeyException" or "llm keys set" in message:
        return ""
    provider = model.split("/")[0] if "/" in model else "openai"
    return f"; fix: {KEY_FIXES.get(provider, 'llm keys set ' + provider)}"


def status_code(error: BaseException) -> int | None:
    """The HTTP status an exception carries (``status_code``, ``status`` or its ``response``), if any."""
    for holder in (error, getattr(error, "response", None)):
        for attr in ("status_code", "status", "http_status"):
            value = getattr(holder, attr, None)
            if isinstance(value, int) and 100 <= value < 600:
                return value
    return None


def retry_after(error: BaseException) -> float | None:
    """Seconds the provider asked to wait (Retry-After in seconds or as a date, or retry-after-ms)."""
    explicit = getattr(error, "retry_after", None)
    if isinstance(explicit, (int, float)):
        return float(explicit)
    headers = getattr(getattr(error, "response", None), "headers", None) or getattr(error, "headers", None)
    if not headers:
        return None
    try:
        millis = headers.get("retry-after-ms")
        if millis is not None:
            return float(millis) / 1000
        value = headers.get("retry-after")
    except AttributeError:
        return None
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(str(value))
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def classify(model: str, error: BaseException) -> ModelCallError:
    """The error to raise for ``error``: permanent (never retried) or transient (retried)."""
    if isinstance(error, ModelCallError):
        return error
    names = {cls.__name__ for cls in type(error).__mro__}
    error_class = type(error).__name__
    message = " ".join(str(error).split())[:500] or error_class
    status = status_code(error)
    if "ContextWindowExceededError" in names or any(p in message.lower() for p in CONTEXT_PHRASES):
        return ContextExceededError.from_message(model, message)
    if names & PERMANENT_NAMES:
        return PermanentCallError(model, error_class, message)
    if status in PERMANENT_STATUS:
        return PermanentCallError(model, error_class, message)
    return TransientCallError(model, error_class, message, retry_after=retry_after(error), status=status)


def failure_class(report: Any, model_error: str | None) -> dict[str, str]:
    """``error_class`` and ``message`` of a failed item: the model call's, else the exception's first line."""
    if model_error is not None:
        error = json.loads(model_error)
        parts = error["detail"].split(": ")
        for number, part in enumerate(parts[:-1]):
            if part.isidentifier():
                return {"error_class": part, "message": ": ".join(parts[:number] + parts[number + 1:])}
        return {"error_class": error["kind"], "message": error["detail"]}
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr or report.when)
    first = next((line.strip() for line in text.splitlines() if line.strip()), report.when)
    name, _, message = first.partition(": ")
    if name.replace(".", "").isidentifier() and message:
        return {"error_class": name.rsplit(".", 1)[-1], "message": message}
    return {"error_class": "Failed", "message": first}
