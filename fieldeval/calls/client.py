"""Every model call goes through a :class:`ModelClient`: cache, limits, timeouts, classified retries, cost.

The pytest plugin builds one client per process and hands it to the
benchmarks' solvers (:mod:`fieldeval.calls.pool`); :func:`fieldeval.complete` uses
a plain client for scripts. A call is:

    stop or dead-model check -> response cache -> session slot (shared by every process)
    -> rate limit -> one request -> checked reply -> Completion (cached only when valid)

An OpenAI-compatible model (llm's OpenAI chat models, endpoints registered with
``fieldeval models add``) is called directly over HTTP, through the checked
connections of :mod:`fieldeval.calls.transport`. Any other llm model runs in a
thread; a call past ``call_timeout`` fails at once but keeps its slot until the
thread ends, so the bound stays true. The project's offline baselines
(:class:`fieldeval.baselines.BaselineModel`, ``in_process``) only compute: they
answer in the calling thread, sparing a thread per call (about 0.1 ms of CPU).

Retries happen here and nowhere else: ``retries`` N means at most N+1 requests.
Failures are classified (:mod:`fieldeval.calls.failures`): transient ones (and
invalid replies) are retried with exponential backoff and jitter (tenacity),
honouring Retry-After; a permanent one is never retried, and ends that
model's remaining calls at once.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential_jitter

from fieldeval.calls.adaptive import AdaptiveLimit, local_endpoint
from fieldeval.calls.cells import Combination, model_of
from fieldeval.calls.cache import CachedResponse, CacheMode, ResponseCache
from fieldeval.calls.failures import (AnswerTooLargeError, CallTimeoutError, ContextExceededError, InvalidReplyError,
                                      ModelCallError, PermanentCallError, TransientCallError, classify)
from fieldeval.calls.limits import CallLimits
from fieldeval.calls.models import (model_ids, model_options, openai_compatible, option_names, resolve_model,
                                    serial_by_default, without_sdk_retries)
from fieldeval.calls.records import Completion, Request, completion_fields
from fieldeval.calls.transport import Endpoint
from fieldeval.defaults import DEFAULT_CALL_TIMEOUT_S, DEFAULT_MAX_ANSWER_BYTES, DEFAULT_RETRIES
from fieldeval.errors import UsageError

BACKOFF_INITIAL_S = 0.5
BACKOFF_MAX_S = 30.0
BACKOFF_JITTER_S = 0.5
RETRY_AFTER_CAP_S = 60.0
BATCH_DISCOUNT = 0.5  # a batch call's price off the live one, where the price table names no batch rate
CONTEXT_STOP_AFTER = 3  # a model whose first this many calls all overflowed its window is ended, with that one line


def _wait_for(retry_state: RetryCallState) -> float:
    """Exponential backoff with jitter, or the provider's Retry-After when it gave one (capped)."""
    error = retry_state.outcome.exception() if retry_state.outcome else None
    after = getattr(error, "retry_after", None)
    if after is not None:
        return min(max(after, 0.0), RETRY_AFTER_CAP_S)
    return wait_exponential_jitter(initial=BACKOFF_INITIAL_S, max=BACKOFF_MAX_S, jitter=BACKOFF_JITTER_S)(retry_state)



@dataclass
class ModelClient:
    """A session's access to models (one per process).

    Attributes:
        retries: retries of a transiently failed call (``retries + 1`` requests at most).
        call_timeout: seconds after which a request counts as a transient failure.
        cache_mode: use (read and write), refresh (write only), off, or replay (read only; a miss fails).
        cache: the response cache, or None.
        prices: model id -> {"input_per_mtok": USD, "output_per_mtok": USD}.
        limits: concurrency slots and rate limits, shared with the session's other processes.
        board: the session's shared board (:class:`fieldeval.calls.pool.Board`): stop flag and dead models.
        max_answer_bytes: the largest answer read; a larger one is an :class:`AnswerTooLargeError`.
        seed: the sampling seed sent to every model that takes one (a session's ``--seed``; None: none).
        adaptive: an HTTP endpoint's calls in flight follow its latency (:mod:`fieldeval.calls.adaptive`), up to
            the concurrency bound; False: the bound alone.
    """

    retries: int = DEFAULT_RETRIES
    call_timeout: float = DEFAULT_CALL_TIMEOUT_S
    cache_mode: CacheMode = "off"
    cache: ResponseCache | None = None
    prices: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    limits: CallLimits = field(default_factory=CallLimits)
    board: Any = None
    max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES
    seed: int | None = None
    adaptive: bool = True
    batch_answers: Any = None  # --batch: the rounds' answers (fieldeval.calls.batches.rounds.BatchAnswers)
    _dead: dict[str, str] = field(default_factory=dict, init=False, repr=False)
    _models: dict[str, Any] = field(default_factory=dict, init=False, repr=False)
    _endpoints: dict[tuple, Endpoint] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _stopped: str | None = field(default=None, init=False, repr=False)
    _board_checked: dict[str, float] = field(default_factory=dict, init=False, repr=False)
    _answered: set[str] = field(default_factory=set, init=False, repr=False)  # models that answered a call
    _overflows: dict[str, int] = field(default_factory=dict, init=False, repr=False)  # context errors before one
    _gates: dict[str, AdaptiveLimit] = field(default_factory=dict, init=False, repr=False)
    _gate_of: dict[str, AdaptiveLimit | None] = field(default_factory=dict, init=False, repr=False)  # by model id
    _kinds: dict[str, tuple[bool, str | None]] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.max_answer_bytes, int) or self.max_answer_bytes < 1:
            raise UsageError(f"--max-answer-bytes {self.max_answer_bytes}: must be a whole number of bytes from 1, "
                             f"e.g. {DEFAULT_MAX_ANSWER_BYTES}")

    def model(self, model_id: str):
        """The llm model for an id, resolved once per client (llm's plugin loading is not thread-safe)."""
        with self._lock:
            if model_id not in self._models:
                self._models[model_id] = without_sdk_retries(resolve_model(model_id))
            return self._models[model_id]

    def request(self, model_id: str, prompt: str, *, system: str | None = None, temperature: float | None = 0.0,
                max_tokens: int | None = None, schema: dict | None = None) -> Request:
        """Resolve a call: the llm model, the options it accepts, the schema when it supports one.

        A matrix cell (:class:`fieldeval.calls.cells.Combination`) in place of a model id sets the model, its
        temperature and other options, and the epoch.
        """
        extra: dict[str, Any] = {}
        epoch = None
        if isinstance(model_id, Combination):  # a matrix cell
            params = dict(model_id.params)
            temperature = params.pop("temperature", temperature)
            extra, epoch, model_id = params, model_id.epoch, model_id.model
        model = self.model(model_id)
        options = model_options(model, temperature=temperature, max_tokens=max_tokens, seed=self.seed)
        fields = option_names(model)
        options.update({name: value for name, value in extra.items() if name in fields})
        use_schema = schema if schema is not None and getattr(model, "supports_schema", False) else None
        serial, endpoint = self._kind(model_id, model)
        return Request(model_id, model.model_id, prompt, system, options, use_schema, epoch, serial, endpoint)

    def _kind(self, model_id: str, model: Any) -> tuple[bool, str | None]:
        """Whether a model is called one call at a time, and its endpoint (an HTTP model's), found once."""
        try:
            return self._kinds[model_id]
        except KeyError:
            endpoint = f"{_api_base(model)} {model.model_name or model.model_id}" if openai_compatible(model) else None
            found = self._kinds[model_id] = (serial_by_default(model), endpoint)
            return found

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
            ModelCallError: no response could be had (after retries, at once for a permanent failure,
                or without a request when the session is stopping).

        Example:
            >>> ModelClient().complete("ebs-baseline", prompt, system=system).text  # doctest: +SKIP
            'forest biome [ENVO:01000174]'
        """
        request = self.request(model_id, prompt, system=system, temperature=temperature, max_tokens=max_tokens,
                               schema=schema)
        if self.batch_answers is not None:  # answered by this session's batches (or failed there, or still pending)
            answered = self.batch_answers.answer(request.key, request.model_id)
            if answered is not None:
                return self._completion(request, answered.text, 0.0, answered.prompt_tokens,
                                        answered.completion_tokens, batch=True)
        cache = self.cache if self.cache_mode != "off" else None
        if cache is not None and self.cache_mode in ("use", "replay"):
            hit = cache.get(request.key)
            if hit is not None:
                return self._completion(request, hit.text, hit.response_time_s or 0.0, hit.prompt_tokens,
                                        hit.completion_tokens, cached=True, batch=hit.batch)
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

    def stop(self, reason: str) -> None:
        """Start no new request from this client (requests in flight end on their own timeout)."""
        self._stopped = self._stopped or reason

    def stopped(self) -> str | None:
        """Why this client starts no new request, or None."""
        return self._stopped

    def _call_with_retries(self, request: Request) -> Completion:
        sent = 0

        def attempt() -> Completion:
            nonlocal sent
            self._raise_if_stopped(request.model_id)
            gate = self._gate(request)  # an HTTP endpoint's adaptive limit: its wait is not in --call-timeout
            if gate is not None:
                gate.acquire(lambda: self._raise_if_stopped(request.model_id))
            ended: dict[str, Any] = {}  # what the call's end tells the adaptive limit
            try:
                lease = self.limits.acquire(_configured(request, self.limits.models), self.slot_wait,
                                            serial=request.serial)
                self._raise_if_stopped(request.model_id, lease)
                sent += 1
                completion = self._attempt(request, lease)
                ended = {"latency": completion.response_time_s, "tokens": completion.completion_tokens}
                return completion
            except TransientCallError as error:
                ended = {"overloaded": isinstance(error, CallTimeoutError) or error.overloaded}
                raise
            finally:
                if gate is not None:
                    gate.release(**ended)

        failed: list[TransientCallError] = []

        def again() -> Completion:  # tenacity's first attempt is the first request's failure: its wait and count
            if failed:
                raise failed.pop()
            return attempt()

        try:
            try:  # the first request outside tenacity's loop (some 10 us a call, and most calls need no retry)
                completion = attempt()
            except TransientCallError as error:
                if not self.retries:
                    raise
                failed.append(error)
                retrying = Retrying(stop=stop_after_attempt(self.retries + 1), wait=_wait_for,
                                    retry=retry_if_exception_type(TransientCallError), reraise=True)
                completion = retrying(again)
            self._answered.add(request.model_id)
            return completion
        except ContextExceededError as error:
            raise self._overflowed(request, error) from None
        except PermanentCallError as error:
            self._end_model(request.model_id, str(error))
            raise
        except TransientCallError as error:
            what = "valid reply" if isinstance(error, InvalidReplyError) else "response"
            raise ModelCallError(request.model_id, f"no {what} after {sent} request(s): {error.detail}",
                                 kind="transient") from None

    def _gate(self, request: Request) -> AdaptiveLimit | None:
        """The adaptive limit of the request's endpoint (an OpenAI-compatible model's server and model name), or
        None (not an HTTP model, or ``adaptive`` off)."""
        try:
            return self._gate_of[request.model_id]
        except KeyError:
            pass
        gate = None
        if self.adaptive and request.endpoint is not None:
            cap = self.limits.bound(_configured(request, self.limits.models))
            with self._lock:
                gate = self._gates.get(request.endpoint)
                if gate is None:
                    initial = 1 if local_endpoint(request.endpoint.split(" ", 1)[0]) else cap
                    gate = self._gates[request.endpoint] = AdaptiveLimit(cap, call_timeout=self.call_timeout,
                                                                         initial=initial)
        self._gate_of[request.model_id] = gate
        return gate

    def concurrency(self, model: str) -> str | None:
        """The calls in flight of a model's endpoint and its adaptive limit, as the progress line shows them."""
        gate = self._gate_of.get(model_of(model))
        return None if gate is None else str(gate)

    def _end_model(self, model_id: str, message: str) -> None:
        """No more calls to this model, in any process of the session."""
        with self._lock:
            self._dead.setdefault(model_id, message)
        if self.board is not None:
            self.board.mark_dead(model_id, message)

    def _overflowed(self, request: Request, error: ContextExceededError) -> ContextExceededError:
        """The item's context error with the fix for its model; a model whose first calls all overflowed ends."""
        error = error.with_fix(self._context_fix(request))
        with self._lock:
            first = request.model_id not in self._answered
            count = self._overflows[request.model_id] = self._overflows.get(request.model_id, 0) + 1
        if first and count >= CONTEXT_STOP_AFTER:
            self._end_model(request.model_id, f"each of its first {count} calls exceeded its context window "
                                              f"({error.detail.removeprefix('context_exceeded: ')})")
        return error

    def _context_fix(self, request: Request) -> str:
        """What lets a prompt fit: a server started with a larger window, or a model that has one."""
        model = self.model(request.model_id)
        budget = request.options.get("max_tokens")
        lower = f", or a smaller answer budget than max_tokens {budget}" if budget else ""
        if getattr(model, "fieldeval_endpoint", False):
            return f"start the model's server with a larger window (llama.cpp: --n_ctx 4096; Ollama: num_ctx){lower}"
        if request.serial:
            path = str(getattr(model, "model_path", "") or "")
            serve = (f"python -m llama_cpp.server --model {path} --n_ctx 4096" if path.endswith(".gguf")
                     else "a server that loads it with a larger window")
            return (f"this plugin loads the model with a window of its own choosing; serve it with a larger one "
                    f"({serve}), register it with `fieldeval models add NAME --endpoint http://127.0.0.1:PORT/v1` "
                    "and pass --model NAME")
        return f"use a model with a larger context window, or shorter prompts{lower}"

    @property
    def slot_wait(self) -> float:
        """How long a call waits for a slot: every holder's request ends within ``call_timeout``."""
        return max(60.0, 10 * self.call_timeout)

    def _raise_if_stopped(self, model_id: str, lease=None) -> None:
        message, kind = None, "skipped"
        with self._lock:
            message = self._dead.get(model_id)
        if message is None and self.board is not None:
            now = time.monotonic()
            if now - self._board_checked.get(model_id, 0.0) >= 0.1:  # the board is read at most 10 times a second
                self._board_checked[model_id] = now
                message = self.board.dead(model_id)
                if message is not None:
                    with self._lock:
                        self._dead.setdefault(model_id, message)
                stop = self.board.stopped()
                if stop:
                    self.stop(stop)
        if message is not None:
            message = f"skipped: the model failed permanently earlier in this run ({message})"
        elif self._stopped is not None:
            message = f"not called: the session is stopping ({self._stopped})"
        if message is not None:
            if lease is not None:
                lease.release()
            raise ModelCallError(model_id, message, kind=kind)

    def _endpoint(self, model) -> Endpoint:
        """The connection pool for the model's endpoint and key (one per client)."""
        key = model.get_key() if getattr(model, "needs_key", None) else None
        base = _api_base(model)
        headers = dict(getattr(model, "headers", None) or {})
        if key:
            headers["Authorization"] = f"Bearer {key}"
        ident = (base, key, tuple(sorted(headers.items())))
        with self._lock:
            if ident not in self._endpoints:
                self._endpoints[ident] = Endpoint(base, headers, self.limits.concurrency, self.call_timeout,
                                                  self.max_answer_bytes)
            return self._endpoints[ident]

    def _attempt(self, request: Request, lease) -> Completion:
        """One request, holding ``lease`` until the request has really ended."""
        model = self.model(request.model_id)
        start = time.perf_counter()
        if openai_compatible(model):
            try:
                body = {"model": model.model_name or model.model_id, "messages": _messages(request),
                        "stream": False, **request.options}
                if request.schema is not None:
                    body["response_format"] = {"type": "json_schema",
                                               "json_schema": {"name": "output", "schema": request.schema}}
                text, prompt_tokens, completion_tokens = self._endpoint(model).chat(request.model_id, body)
            except ModelCallError:
                raise
            except Exception as error:  # noqa: BLE001 - HTTP statuses, a missing key: classified
                raise classify(request.model_id, error) from None
            finally:
                lease.release()
            return self._completion(request, text, round(time.perf_counter() - start, 6), prompt_tokens,
                                    completion_tokens)
        if getattr(model, "in_process", False):  # an offline baseline: nothing to time out, no thread of its own
            try:
                ok, value = True, self._answer_of(model, request)
            except Exception as error:  # noqa: BLE001 - classified below as a thread's error is; Ctrl-C goes on
                ok, value = False, error
            finally:
                lease.release()
        else:
            outcome: queue.Queue = queue.Queue(maxsize=1)
            worker = threading.Thread(target=self._call, args=(model, request, outcome, lease.release), daemon=True,
                                      name=f"fieldeval-call-{request.model_id}")
            worker.start()
            try:
                ok, value = outcome.get(timeout=self.call_timeout)
            except queue.Empty:  # the thread keeps its slot until its call ends
                raise CallTimeoutError(request.model_id, self.call_timeout) from None
        if not ok:
            raise classify(request.model_id, value)
        text, usage = value
        if len(text.encode("utf-8", "surrogatepass")) > self.max_answer_bytes:
            raise AnswerTooLargeError(request.model_id, self.max_answer_bytes)
        return self._completion(request, text, round(time.perf_counter() - start, 6),
                                getattr(usage, "input", None), getattr(usage, "output", None))

    @staticmethod
    def _answer_of(model, request: Request) -> tuple[str, Any]:
        """The llm call, without streaming: the text and usage."""
        response = model.prompt(request.prompt, system=request.system, schema=request.schema,
                                options=request.options, stream=False)
        text = response.text()
        if not isinstance(text, str):
            raise InvalidReplyError(request.model_id, "the model returned no text")
        return text, response.usage()

    @staticmethod
    def _call(model, request: Request, outcome: queue.Queue, done: Callable[[], None]) -> None:
        """Run the llm call (in its own thread) and hand back the text and usage, or the error."""
        try:
            outcome.put((True, ModelClient._answer_of(model, request)))
        except BaseException as error:  # noqa: BLE001 - every provider error is classified by the caller
            outcome.put((False, error))
        finally:
            done()

    def _completion(self, request: Request, text: str, seconds: float, prompt_tokens: int | None,
                    completion_tokens: int | None, *, cached: bool = False, batch: bool = False) -> Completion:
        cost = self.estimate_cost(_configured(request, self.prices), prompt_tokens, completion_tokens, batch=batch)
        return Completion(request.model_id, text, seconds, prompt_tokens, completion_tokens, cached, cost,
                          system=request.system, prompt=request.prompt, options=request.options)

    def estimate_cost(self, model_id: str, prompt_tokens: int | None, completion_tokens: int | None, *,
                      batch: bool = False) -> float | None:
        """USD cost from the price table; None when the model is not priced or tokens are unknown.

        ``batch``: the price of a batch call, ``batch_input_per_mtok`` / ``batch_output_per_mtok`` when the table
        has them, else the live price less :data:`BATCH_DISCOUNT` (OpenAI's and Anthropic's batch APIs: half).
        """
        price = self.prices.get(model_id)
        if price is None or prompt_tokens is None or completion_tokens is None:
            return None
        rate_in, rate_out = price.get("input_per_mtok", 0.0), price.get("output_per_mtok", 0.0)
        if batch:
            rate_in = price.get("batch_input_per_mtok", rate_in * (1 - BATCH_DISCOUNT))
            rate_out = price.get("batch_output_per_mtok", rate_out * (1 - BATCH_DISCOUNT))
        return round((prompt_tokens * rate_in + completion_tokens * rate_out) / 1e6, 8)

    def with_board(self, board: Any) -> ModelClient:
        """The same client sharing stop flag and dead models through ``board``."""
        return replace(self, board=board)


def _configured(request: Request, table: Mapping[str, Any]) -> str:
    """The name ``table`` (prices, limits) knows the request's model by: the name it was asked for, else the model
    id that name is an alias of (``4o-mini`` is priced as ``gpt-4o-mini``)."""
    if request.model_id in table or request.resolved_id not in table:
        return request.model_id
    return request.resolved_id


def _api_base(model: Any) -> str:
    """The base URL an OpenAI-compatible model is called at."""
    return getattr(model, "api_base", None) or "https://api.openai.com/v1"


def _messages(request: Request) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": request.system}] if request.system else []
    return [*messages, {"role": "user", "content": request.prompt}]


def complete(model_id: str, prompt: str, *, system: str | None = None, temperature: float | None = 0.0,
             max_tokens: int | None = None, schema: dict | None = None) -> Completion:
    """Ask a model once through a default :class:`ModelClient` (no cache); for scripts and notebooks.

    Example:
        >>> complete("ebs-baseline", prompt, system=system).text  # doctest: +SKIP
        'forest biome [ENVO:01000174]'
    """
    return ModelClient().complete(model_id, prompt, system=system, temperature=temperature,
                                  max_tokens=max_tokens, schema=schema)



__all__ = ["Completion", "ModelClient", "complete", "completion_fields", "model_ids", "resolve_model"]
