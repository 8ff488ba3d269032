"""Every model call goes through a :class:`ModelClient`: cache, limits, timeouts, classified retries, cost.

The pytest plugin builds one client per session and hands it to eval items
through the ``client`` fixture; :func:`fieldeval.complete` uses a plain
client for scripts. A call is:

    memo (another item or worker already asked) -> response cache -> concurrency slot
    -> rate limit -> the llm call in a thread, ended after ``call_timeout`` -> Completion

Failures are classified (:mod:`fieldeval.failures`): transient ones are
retried with exponential backoff and jitter (tenacity), honouring
Retry-After; a permanent one is never retried, and ends that model's
remaining calls at once.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential_jitter

from fieldeval.cache import CachedResponse, CacheMode, ResponseCache, cache_key
from fieldeval.errors import UsageError
from fieldeval.failures import ModelCallError, PermanentCallError, TransientCallError, classify
from fieldeval.limits import CallLimits

BACKOFF_INITIAL_S = 0.5
BACKOFF_MAX_S = 30.0
BACKOFF_JITTER_S = 0.5
RETRY_AFTER_CAP_S = 60.0
DEFAULT_RETRIES = 4
DEFAULT_CALL_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Completion:
    """One model response with what it cost.

    Attributes:
        model: the llm model id that answered.
        text: the response text.
        response_time_s: wall-clock seconds of the call (of the original call when cached).
        prompt_tokens: input tokens reported by the provider (None when unknown).
        completion_tokens: output tokens reported by the provider (None when unknown).
        cached: True when the response came from the response cache.
        est_cost_usd: cost from the price table (None when the model is not priced or tokens are unknown).
    """

    model: str
    text: str
    response_time_s: float
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached: bool = False
    est_cost_usd: float | None = None


def completion_fields(*completions: Completion) -> dict[str, Any]:
    """The cost columns of an item, summed over the model calls it made (e.g. summary then answer).

    A cached completion keeps the timing and tokens of its original call; the
    item counts as cached only when every call came from the cache.
    """

    def total(values: list) -> Any:
        return None if any(v is None for v in values) else sum(values)

    cost = total([c.est_cost_usd for c in completions])
    return {
        "response_time_s": round(sum(c.response_time_s for c in completions), 6),
        "prompt_tokens": total([c.prompt_tokens for c in completions]),
        "completion_tokens": total([c.completion_tokens for c in completions]),
        "est_cost_usd": None if cost is None else round(cost, 8),
        "cached": all(c.cached for c in completions),
    }


def resolve_model(model_id: str, *, flag: str = "--model"):
    """The llm model for an id or alias; a usage error naming ``flag`` when there is none."""
    import llm

    try:
        return llm.get_model(model_id)
    except llm.UnknownModelError:
        raise UsageError(
            f"{flag} {model_id!r} is not a known llm model; run `llm models` to list them "
            "or install the llm plugin that provides it"
        ) from None


def model_options(model, **wanted: Any) -> dict[str, Any]:
    """The subset of ``wanted`` options this model accepts, dropping None values."""
    fields = getattr(model.Options, "model_fields", {})
    return {name: value for name, value in wanted.items() if value is not None and name in fields}


@dataclass(frozen=True)
class Request:
    """One model call, fully resolved: what the cache and the memo key on."""

    model_id: str
    resolved_id: str
    prompt: str
    system: str | None
    options: dict[str, Any]
    schema: dict | None

    @property
    def key(self) -> str:
        """The sha256 of model, options, system prompt, prompt and schema."""
        return cache_key(self.resolved_id, self.options, self.system, self.prompt, self.schema)


def _wait_for(retry_state: RetryCallState) -> float:
    """Exponential backoff with jitter, or the provider's Retry-After when it gave one (capped)."""
    error = retry_state.outcome.exception() if retry_state.outcome else None
    after = getattr(error, "retry_after", None)
    if after is not None:
        return min(max(after, 0.0), RETRY_AFTER_CAP_S)
    return wait_exponential_jitter(initial=BACKOFF_INITIAL_S, max=BACKOFF_MAX_S, jitter=BACKOFF_JITTER_S)(retry_state)


@dataclass
class ModelClient:
    """A session's access to models.

    Attributes:
        retries: retries of a transiently failed call.
        call_timeout: seconds after which a call counts as a transient failure.
        cache_mode: use (read and write), refresh (write only), off, or replay (read only; a miss fails).
        cache: the response cache, or None.
        prices: model id -> {"input_per_mtok": USD, "output_per_mtok": USD}.
        limits: concurrency slots and rate limits, shared with the session's other processes.
        memo: the session's shared record of calls made or in flight (see :mod:`fieldeval.prefetch`).
    """

    retries: int = DEFAULT_RETRIES
    call_timeout: float = DEFAULT_CALL_TIMEOUT_S
    cache_mode: CacheMode = "off"
    cache: ResponseCache | None = None
    prices: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    limits: CallLimits = field(default_factory=CallLimits)
    memo: Any = None
    _dead: dict[str, str] = field(default_factory=dict, init=False, repr=False)
    _models: dict[str, Any] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def model(self, model_id: str):
        """The llm model for an id, resolved once per client (llm's plugin loading is not thread-safe)."""
        with self._lock:
            if model_id not in self._models:
                self._models[model_id] = resolve_model(model_id)
            return self._models[model_id]

    def request(self, model_id: str, prompt: str, *, system: str | None = None, temperature: float | None = 0.0,
                max_tokens: int | None = None, schema: dict | None = None) -> Request:
        """Resolve a call: the llm model, the options it accepts, the schema when it supports one."""
        model = self.model(model_id)
        options = model_options(model, temperature=temperature, max_tokens=max_tokens)
        use_schema = schema if schema is not None and getattr(model, "supports_schema", False) else None
        return Request(model_id, model.model_id, prompt, system, options, use_schema)

    def complete(self, model_id: str, prompt: str, *, system: str | None = None, temperature: float | None = 0.0,
                 max_tokens: int | None = None, schema: dict | None = None) -> Completion:
        """Ask a model and return its response with timing, tokens and cost.

        Args:
            model_id: an llm model id or alias, e.g. ``gpt-4o-mini`` or ``ebs-baseline``.
            prompt: the rendered user prompt.
            system: the system prompt.
            temperature: sampling temperature, passed when the model supports it.
            max_tokens: generation budget, passed when the model supports it.
            schema: a JSON schema for structured output, used when the model supports schemas.

        Returns:
            The response text and its cost figures.

        Raises:
            UsageError: the model id is unknown.
            ModelCallError: no response could be had (after retries, or at once for a permanent failure).

        Example:
            >>> ModelClient().complete("ebs-baseline", prompt, system=system).text  # doctest: +SKIP
            'forest biome [ENVO:01000174]'
        """
        request = self.request(model_id, prompt, system=system, temperature=temperature, max_tokens=max_tokens,
                               schema=schema)
        if self.memo is None:
            return self._complete(request)
        return self.memo.run(request.key, lambda: self._complete(request))

    def _complete(self, request: Request) -> Completion:
        """The call behind the memo: cache, then the model with limits and retries."""
        cache = self.cache if self.cache_mode != "off" else None
        if cache is not None and self.cache_mode in ("use", "replay"):
            hit = cache.get(request.key)
            if hit is not None:
                return self._completion(request, hit.text, hit.response_time_s or 0.0, hit.prompt_tokens,
                                        hit.completion_tokens, cached=True)
            if self.cache_mode == "replay":
                raise ModelCallError(request.model_id, "no cached response for this prompt (--cache replay); "
                                     "record it first with --cache use", kind="replay")
        completion = self._call_with_retries(request)
        if cache is not None:
            cache.put(request.key, request.resolved_id, CachedResponse(
                completion.text, completion.response_time_s, completion.prompt_tokens, completion.completion_tokens))
        return completion

    def dead_models(self) -> dict[str, str]:
        """Models that failed permanently in this process, with the first failure's message."""
        with self._lock:
            return dict(self._dead)

    def _call_with_retries(self, request: Request) -> Completion:
        self._raise_if_dead(request.model_id)
        retrying = Retrying(stop=stop_after_attempt(self.retries + 1), wait=_wait_for,
                            retry=retry_if_exception_type(TransientCallError), reraise=True)
        try:
            for attempt in retrying:
                with attempt:
                    self._raise_if_dead(request.model_id)
                    return self._attempt(request)
        except PermanentCallError as error:
            with self._lock:
                self._dead.setdefault(request.model_id, str(error))
            if self.memo is not None:
                self.memo.mark_dead(request.model_id, str(error))
            raise
        except TransientCallError as error:
            raise ModelCallError(request.model_id, f"no response after {self.retries + 1} attempt(s): "
                                 f"{error.detail}", kind="transient") from None
        raise AssertionError("unreachable: tenacity either returns or raises")

    def _raise_if_dead(self, model_id: str) -> None:
        with self._lock:
            message = self._dead.get(model_id)
        if message is None and self.memo is not None:
            message = self.memo.dead(model_id)
        if message is not None:
            raise ModelCallError(model_id, f"skipped: the model failed permanently earlier in this run ({message})",
                                 kind="skipped")

    def _attempt(self, request: Request) -> Completion:
        """One call, in a slot and under the rate limit, ended after ``call_timeout``."""
        with self.limits.slot(request.model_id):
            start = time.perf_counter()
            outcome: queue.Queue = queue.Queue(maxsize=1)
            worker = threading.Thread(target=self._call, args=(self.model(request.model_id), request, outcome),
                                      daemon=True,
                                      name=f"fieldeval-call-{request.model_id}")
            worker.start()
            try:
                ok, value = outcome.get(timeout=self.call_timeout)
            except queue.Empty:
                raise TransientCallError(request.model_id, "TimeoutError",
                                         f"no answer within --call-timeout {self.call_timeout:g} s") from None
        if not ok:
            raise classify(request.model_id, value)
        text, usage = value
        return self._completion(request, text, round(time.perf_counter() - start, 6),
                                getattr(usage, "input", None), getattr(usage, "output", None))

    @staticmethod
    def _call(model, request: Request, outcome: queue.Queue) -> None:
        """Run the llm call (in its own thread) and hand back the text and usage, or the exception."""
        try:
            response = model.prompt(request.prompt, system=request.system, schema=request.schema,
                                    options=request.options)
            outcome.put((True, (response.text(), response.usage())))
        except BaseException as error:  # noqa: BLE001 - every provider error is classified by the caller
            outcome.put((False, error))

    def _completion(self, request: Request, text: str, seconds: float, prompt_tokens: int | None,
                    completion_tokens: int | None, *, cached: bool = False) -> Completion:
        return Completion(request.model_id, text, seconds, prompt_tokens, completion_tokens, cached,
                          self.estimate_cost(request.model_id, prompt_tokens, completion_tokens))

    def estimate_cost(self, model_id: str, prompt_tokens: int | None, completion_tokens: int | None) -> float | None:
        """USD cost from the price table; None when the model is not priced or tokens are unknown."""
        price = self.prices.get(model_id)
        if price is None or prompt_tokens is None or completion_tokens is None:
            return None
        return round((prompt_tokens * price.get("input_per_mtok", 0.0)
                      + completion_tokens * price.get("output_per_mtok", 0.0)) / 1e6, 8)

    def with_memo(self, memo: Any) -> ModelClient:
        """The same client recording its calls in ``memo``."""
        return replace(self, memo=memo)


def complete(model_id: str, prompt: str, *, system: str | None = None, temperature: float | None = 0.0,
             max_tokens: int | None = None, schema: dict | None = None) -> Completion:
    """Ask a model once through a default :class:`ModelClient` (no cache); for scripts and notebooks.

    Example:
        >>> complete("ebs-baseline", prompt, system=system).text  # doctest: +SKIP
        'forest biome [ENVO:01000174]'
    """
    return ModelClient().complete(model_id, prompt, system=system, temperature=temperature,
                                  max_tokens=max_tokens, schema=schema)


__all__ = ["Completion", "ModelClient", "complete", "completion_fields", "resolve_model"]
