"""Every model call goes through a :class:`ModelClient`: cache, limits, timeouts, classified retries, cost.

The pytest plugin builds one client per process and hands it to the
benchmarks' solvers (:mod:`fieldeval.calls.pool`); :func:`fieldeval.complete` uses
a plain client for scripts. A call is:

    stop or dead-model check -> response cache -> session slot (shared by every process)
    -> rate limit -> one request -> checked reply -> Completion (cached only when valid)

An OpenAI-compatible model (llm's OpenAI chat models, endpoints registered with
``fieldeval models add``) is called directly over HTTP: one urllib3 connection
pool per endpoint and key, no streaming, no retries of its own, and the
pool's own timeout (``call_timeout``) ends a hung request. Each new connection
resolves the endpoint's host, refuses it when any address breaks the registration
rules (:func:`fieldeval.calls.endpoints.forbidden_kind`) and connects to the address
it checked; the proxy environment (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, NO_PROXY) is
honoured as requests and httpx honour it, the checks then applying to the target;
an answer is read up to ``max_answer_bytes`` and refused past it. Any other llm
model runs in a thread; a call past ``call_timeout`` fails at once but keeps
its slot until the thread ends, so the bound stays true.

Retries happen here and nowhere else: ``retries`` N means at most N+1 requests.
Failures are classified (:mod:`fieldeval.calls.failures`): transient ones (and
invalid replies) are retried with exponential backoff and jitter (tenacity),
honouring Retry-After; a permanent one is never retried, and ends that
model's remaining calls at once.
"""

from __future__ import annotations

import ipaddress
import json
import queue
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import unquote, urlsplit

import urllib3
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential_jitter

from fieldeval.calls.cache import CachedResponse, CacheMode, ResponseCache, cache_key
from fieldeval.errors import UsageError
from fieldeval.calls.endpoints import forbidden_kind, refused_address
from fieldeval.calls.failures import (AddressRefusedError, AnswerTooLargeError, CallTimeoutError,
                                      ConnectionRefusedCallError, InvalidReplyError, LookupFailedError, ModelCallError,
                                      PermanentCallError, TLSFailedError, TransientCallError, classify)
from fieldeval.calls.limits import CallLimits
from fieldeval.defaults import DEFAULT_CALL_TIMEOUT_S, DEFAULT_MAX_ANSWER_BYTES, DEFAULT_RETRIES

BACKOFF_INITIAL_S = 0.5
BACKOFF_MAX_S = 30.0
BACKOFF_JITTER_S = 0.5
RETRY_AFTER_CAP_S = 60.0
READ_CHUNK_BYTES = 65_536


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
        system: the system prompt exactly as sent (None: none).
        prompt: the user prompt exactly as sent (None when not known, e.g. a completion made by hand).
    """

    model: str
    text: str
    response_time_s: float
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached: bool = False
    est_cost_usd: float | None = None
    system: str | None = None
    prompt: str | None = None


def completion_fields(*completions: Completion) -> dict[str, Any]:
    """The cost columns of an item, summed over the model calls it made (e.g. summary then answer), and what
    was sent: ``system`` and ``prompt`` of the last call (the answer), ``earlier_calls`` for the calls before it.

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
        **_sent(completions),
    }


def _sent(completions: tuple[Completion, ...]) -> dict[str, Any]:
    """What the item's calls sent: the answer's ``system`` and ``prompt``; ``earlier_calls`` when there were more."""
    if not completions:
        return {}
    *earlier, last = completions
    out: dict[str, Any] = {"system": last.system, "prompt": last.prompt}
    if earlier:
        out["earlier_calls"] = [{"system": c.system, "prompt": c.prompt, "response_text": c.text} for c in earlier]
    return out


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


def model_ids(names: Iterable[str]) -> dict[str, str]:
    """The model id each name that is an llm alias names (``4o-mini``: ``gpt-4o-mini``); ids and unknown names
    are left out."""
    import llm

    found = {}
    for name in names:
        try:
            model_id = llm.get_model(name).model_id
        except llm.UnknownModelError:
            continue
        if model_id != name:
            found[name] = model_id
    return found


def model_options(model, **wanted: Any) -> dict[str, Any]:
    """The subset of ``wanted`` options this model accepts, dropping None values."""
    fields = getattr(model.Options, "model_fields", {})
    return {name: value for name, value in wanted.items() if value is not None and name in fields}


@dataclass(frozen=True)
class Request:
    """One model call, fully resolved: what the cache keys on."""

    model_id: str
    resolved_id: str
    prompt: str
    system: str | None
    options: dict[str, Any]
    schema: dict | None
    epoch: int | None = None  # the repeat of an item (``--epochs``); 2 and up are keyed apart

    @property
    def key(self) -> str:
        """The sha256 of model, options, system prompt, prompt and schema (and the epoch, from the second on:
        the first epoch is the plain call, so a single-answer run's cache serves it)."""
        if self.epoch is not None and self.epoch > 1:
            return cache_key(self.resolved_id, {**self.options, "epoch": self.epoch}, self.system, self.prompt,
                             self.schema)
        return cache_key(self.resolved_id, self.options, self.system, self.prompt, self.schema)


def _wait_for(retry_state: RetryCallState) -> float:
    """Exponential backoff with jitter, or the provider's Retry-After when it gave one (capped)."""
    error = retry_state.outcome.exception() if retry_state.outcome else None
    after = getattr(error, "retry_after", None)
    if after is not None:
        return min(max(after, 0.0), RETRY_AFTER_CAP_S)
    return wait_exponential_jitter(initial=BACKOFF_INITIAL_S, max=BACKOFF_MAX_S, jitter=BACKOFF_JITTER_S)(retry_state)


class HTTPStatusError(Exception):
    """A non-200 answer from an OpenAI-compatible endpoint (classified by its status and Retry-After)."""

    def __init__(self, status: int, headers: Mapping[str, str], message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status_code = status
        self.headers = headers


def openai_compatible(model) -> bool:
    """Whether ``model`` is an llm OpenAI chat model fieldeval may call over HTTP itself (no Azure, no extras)."""
    try:
        from llm.default_plugins.openai_models import Chat
    except ImportError:  # pragma: no cover - llm always ships it
        return False
    return (isinstance(model, Chat) and not getattr(model, "api_type", None)
            and not getattr(model, "api_version", None) and not getattr(model, "api_engine", None))


def without_sdk_retries(model):
    """The model, its OpenAI SDK client (llm's OpenAI models not called over HTTP here) built with ``max_retries=0``.

    Retries belong to :class:`ModelClient` alone; other plugins' SDK clients are left as they come.
    """
    original = getattr(model, "get_client", None)
    if original is None or getattr(original, "_fieldeval_no_retries", False):
        return model

    def get_client(*args, **kwargs):
        client = original(*args, **kwargs)
        with_options = getattr(client, "with_options", None)
        return with_options(max_retries=0) if with_options is not None else client

    get_client._fieldeval_no_retries = True
    try:
        model.get_client = get_client
    except (AttributeError, TypeError):  # a model that refuses new attributes keeps its own client
        pass
    return model


class RefusedAddress(Exception):
    """A connection not made: the host resolved to an address the endpoint rules refuse."""

    def __init__(self, host: str, address: str, kind: str) -> None:
        super().__init__(f"{host} resolves to {address}, a {kind} address")
        self.host, self.address, self.kind = host, address, kind


def resolve_host(host: str, port: int) -> list[tuple[int, tuple]]:
    """``(family, sockaddr)`` of every address ``getaddrinfo`` gives ``host`` (``socket.gaierror`` when none)."""
    return [(info[0], info[4]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]


def open_socket(family: int, sockaddr: tuple, timeout: Any, source_address: tuple | None,
                socket_options: Any) -> socket.socket:
    """A TCP socket connected to ``sockaddr``, an address already resolved and checked (no lookup here)."""
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        for each in socket_options or ():
            sock.setsockopt(*each)
        if timeout is None or isinstance(timeout, (int, float)):  # else urllib3's "default" token: leave it
            sock.settimeout(timeout)
        if source_address:
            sock.bind(source_address)
        sock.connect(sockaddr)
    except BaseException:
        sock.close()
        raise
    return sock


class _CheckedConnection:
    """Each new connection resolves its host once, refuses a forbidden address, and connects to the checked one.

    Mixed into urllib3's HTTPConnection and HTTPSConnection, whose ``_new_conn`` it replaces: the Host
    header, TLS SNI and certificate check keep the host name.
    """

    host: str
    port: int
    timeout: Any
    source_address: tuple | None
    socket_options: Any
    _dns_host: str

    def _new_conn(self) -> socket.socket:
        exceptions = urllib3.exceptions
        try:
            addresses = resolve_host(self._dns_host, self.port)
        except socket.gaierror as error:
            raise exceptions.NameResolutionError(self.host, self, error) from error
        for _, sockaddr in addresses:
            address = str(sockaddr[0]).split("%")[0]
            kind = forbidden_kind(ipaddress.ip_address(address))
            if kind is not None:
                raise RefusedAddress(self.host, address, kind)
        last: OSError = OSError(f"{self.host} resolved to no address")
        for family, sockaddr in addresses:
            try:
                return open_socket(family, sockaddr, self.timeout, self.source_address, self.socket_options)
            except OSError as error:
                last = error
        if isinstance(last, socket.timeout):
            raise exceptions.ConnectTimeoutError(
                self, f"Connection to {self.host} timed out. (connect timeout={self.timeout})") from last
        raise exceptions.NewConnectionError(self, f"Failed to establish a new connection: {last}") from last


class _CheckedHTTPConnection(_CheckedConnection, urllib3.connection.HTTPConnection):
    pass


class _CheckedHTTPSConnection(_CheckedConnection, urllib3.connection.HTTPSConnection):
    pass


class _CheckedHTTPPool(urllib3.HTTPConnectionPool):
    ConnectionCls = _CheckedHTTPConnection


class _CheckedHTTPSPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _CheckedHTTPSConnection


def proxy_for(url: str) -> str | None:
    """The proxy requests and httpx would use for ``url``: ``<scheme>_proxy`` else ``all_proxy``, unless ``no_proxy``
    names the host (``urllib.request.getproxies`` and ``proxy_bypass``; lower case before upper case)."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or not parts.hostname:
        return None
    host = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
    if urllib.request.proxy_bypass(host) or urllib.request.proxy_bypass(parts.hostname):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"


def _pool_manager(url: str, connections: int, timeout: float) -> tuple[urllib3.PoolManager, str | None]:
    """The connection pools for ``url`` (checked direct connections, or its proxy's) and the proxy URL, if any."""
    settings = {"num_pools": 4, "maxsize": max(connections, 1), "block": False, "retries": False,
                "timeout": urllib3.Timeout(total=timeout)}
    proxy = proxy_for(url)
    if proxy is None:
        manager = urllib3.PoolManager(**settings)
        manager.pool_classes_by_scheme = {"http": _CheckedHTTPPool, "https": _CheckedHTTPSPool}
        return manager, None
    parts = urlsplit(proxy)
    if parts.scheme.startswith("socks"):
        try:
            from urllib3.contrib.socks import SOCKSProxyManager
        except ImportError:
            raise UsageError(f"proxy {parts.scheme}://{parts.hostname}:{parts.port}: a SOCKS proxy needs PySocks; "
                             "pip install pysocks, or set NO_PROXY for this endpoint") from None
        return SOCKSProxyManager(proxy, **settings), proxy
    headers = None
    if parts.username is not None:
        headers = urllib3.make_headers(proxy_basic_auth=f"{unquote(parts.username)}:{unquote(parts.password or '')}")
    return urllib3.ProxyManager(proxy, proxy_headers=headers, **settings), proxy


def _read_bounded(reply: Any, limit: int) -> bytes | None:
    """The reply's body, or None as soon as it is known to be longer than ``limit`` bytes."""
    length = reply.headers.get("Content-Length", "")
    if length.strip().isdigit() and int(length) > limit:
        return None
    chunks, size = [], 0
    for chunk in reply.stream(READ_CHUNK_BYTES):
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


class Endpoint:
    """One OpenAI-compatible endpoint and key: a urllib3 connection pool reused by every call to it."""

    def __init__(self, base_url: str, headers: dict[str, str], connections: int, timeout: float,
                 max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        parts = urlsplit(self.url)
        self.host = parts.hostname or ""
        self.where = f"{self.host}:{parts.port or (443 if parts.scheme == 'https' else 80)}"
        self.headers = {"Content-Type": "application/json", **headers}
        self.timeout = timeout
        self.max_answer_bytes = max_answer_bytes
        self._pool, self.proxy = _pool_manager(self.url, connections, timeout)

    def chat(self, model_id: str, body: dict) -> tuple[str, int | None, int | None]:
        """POST one chat completion; the text and token counts, or a classified error.

        Raises:
            TransientCallError: timeout, refused connection, failed lookup or other connection failure
                (the request has ended).
            PermanentCallError: a failed TLS handshake, or a host that resolves to a refused address.
            AnswerTooLargeError: a body longer than ``max_answer_bytes``.
            InvalidReplyError: an HTTP 200 without a usable answer.
            HTTPStatusError: any other status (classified by the caller).
        """
        exceptions = urllib3.exceptions
        if self.proxy is not None:  # the proxy resolves the name: check what this host can tell of the target
            refused = refused_address(self.host)
            if refused is not None:
                raise AddressRefusedError(model_id, self.host, *refused)
        try:
            reply = self._pool.request("POST", self.url, body=json.dumps(body).encode("utf-8", "surrogatepass"),
                                       headers=self.headers, preload_content=False)
            data = None
            try:
                data = _read_bounded(reply, self.max_answer_bytes)
            finally:
                if data is None:  # an unread rest: the connection cannot be reused
                    reply.close()
                reply.release_conn()
        except RefusedAddress as error:
            raise AddressRefusedError(model_id, error.host, error.address, error.kind) from None
        except exceptions.ProxyError as error:
            raise TransientCallError(model_id, "ProxyError",
                                     f"the proxy {_safe_url(self.proxy)} failed: {_one_line(error)}") from None
        except exceptions.NameResolutionError as error:
            raise LookupFailedError(model_id, self.host, _one_line(error.__cause__ or error)) from None
        except exceptions.NewConnectionError as error:
            if isinstance(error.__cause__, ConnectionRefusedError):
                raise ConnectionRefusedCallError(model_id, self.where) from None
            raise TransientCallError(model_id, "ConnectionError", _one_line(error)) from None
        except exceptions.TimeoutError:
            raise CallTimeoutError(model_id, self.timeout) from None
        except exceptions.SSLError as error:
            raise TLSFailedError(model_id, self.where, _one_line(error.__cause__ or error)) from None
        except exceptions.ProtocolError as error:  # reset, or a body cut short of its Content-Length
            raise TransientCallError(model_id, "ConnectionError", _one_line(error)) from None
        except exceptions.HTTPError as error:
            raise TransientCallError(model_id, type(error).__name__, _one_line(error)) from None
        if reply.status != 200:
            headers = {name.lower(): value for name, value in reply.headers.items()}
            raise HTTPStatusError(reply.status, headers,
                                  "a body larger than --max-answer-bytes" if data is None else _error_message(data))
        if data is None:
            raise AnswerTooLargeError(model_id, self.max_answer_bytes)
        return parse_chat_reply(model_id, data)


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())[:300] or type(error).__name__


def _safe_url(url: str | None) -> str:
    """A proxy URL without its credentials."""
    parts = urlsplit(url or "")
    return f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")


def _error_message(data: bytes) -> str:
    try:
        return str(json.loads(data)["error"]["message"])[:300]
    except (ValueError, KeyError, TypeError):
        return " ".join(data[:300].decode("utf-8", "replace").split()) or "no body"


def parse_chat_reply(model_id: str, data: bytes) -> tuple[str, int | None, int | None]:
    """The answer text and token counts of a chat completion body; :class:`InvalidReplyError` when it has none."""
    if not data.strip():
        raise InvalidReplyError(model_id, "empty body")
    try:
        body = json.loads(data)
    except ValueError as error:
        raise InvalidReplyError(model_id, f"body is not JSON ({error.msg} at byte {error.pos})") from None
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise InvalidReplyError(model_id, "no choices in the reply")
    message = choices[0].get("message")
    text = message.get("content") if isinstance(message, dict) else None
    if not isinstance(text, str):
        raise InvalidReplyError(model_id, "the first choice holds no text")
    if choices[0].get("finish_reason") not in (None, "stop", "length", "tool_calls", "content_filter", "eos"):
        raise InvalidReplyError(model_id, f"truncated reply (finish_reason {choices[0].get('finish_reason')!r})")
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
    tokens = [usage.get(k) if isinstance(usage.get(k), int) else None for k in ("prompt_tokens", "completion_tokens")]
    return text, tokens[0], tokens[1]


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
    """

    retries: int = DEFAULT_RETRIES
    call_timeout: float = DEFAULT_CALL_TIMEOUT_S
    cache_mode: CacheMode = "off"
    cache: ResponseCache | None = None
    prices: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    limits: CallLimits = field(default_factory=CallLimits)
    board: Any = None
    max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES
    _dead: dict[str, str] = field(default_factory=dict, init=False, repr=False)
    _models: dict[str, Any] = field(default_factory=dict, init=False, repr=False)
    _endpoints: dict[tuple, Endpoint] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _stopped: str | None = field(default=None, init=False, repr=False)
    _board_checked: dict[str, float] = field(default_factory=dict, init=False, repr=False)

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

        A matrix cell (:class:`fieldeval.run.matrix.Combination`) in place of a model id sets the model, its
        temperature and other options, and the epoch.
        """
        extra: dict[str, Any] = {}
        epoch = None
        if hasattr(model_id, "params") and hasattr(model_id, "epoch"):  # a matrix cell
            params = dict(model_id.params)
            temperature = params.pop("temperature", temperature)
            extra, epoch, model_id = params, model_id.epoch, model_id.model
        model = self.model(model_id)
        options = model_options(model, temperature=temperature, max_tokens=max_tokens)
        fields = getattr(model.Options, "model_fields", {})
        options.update({name: value for name, value in extra.items() if name in fields})
        use_schema = schema if schema is not None and getattr(model, "supports_schema", False) else None
        return Request(model_id, model.model_id, prompt, system, options, use_schema, epoch)

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

    def stop(self, reason: str) -> None:
        """Start no new request from this client (requests in flight end on their own timeout)."""
        self._stopped = self._stopped or reason

    def _call_with_retries(self, request: Request) -> Completion:
        sent = 0

        def attempt() -> Completion:
            nonlocal sent
            self._raise_if_stopped(request.model_id)
            lease = self.limits.acquire(_configured(request, self.limits.models), self.slot_wait)
            self._raise_if_stopped(request.model_id, lease)
            sent += 1
            return self._attempt(request, lease)

        retrying = Retrying(stop=stop_after_attempt(self.retries + 1), wait=_wait_for,
                            retry=retry_if_exception_type(TransientCallError), reraise=True)
        try:
            return retrying(attempt)
        except PermanentCallError as error:
            with self._lock:
                self._dead.setdefault(request.model_id, str(error))
            if self.board is not None:
                self.board.mark_dead(request.model_id, str(error))
            raise
        except TransientCallError as error:
            what = "valid reply" if isinstance(error, InvalidReplyError) else "response"
            raise ModelCallError(request.model_id, f"no {what} after {sent} request(s): {error.detail}",
                                 kind="transient") from None

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
        base = getattr(model, "api_base", None) or "https://api.openai.com/v1"
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
    def _call(model, request: Request, outcome: queue.Queue, done: Callable[[], None]) -> None:
        """Run the llm call (in its own thread, without streaming) and hand back the text and usage, or the error."""
        try:
            response = model.prompt(request.prompt, system=request.system, schema=request.schema,
                                    options=request.options, stream=False)
            text = response.text()
            if not isinstance(text, str):
                raise InvalidReplyError(request.model_id, "the model returned no text")
            outcome.put((True, (text, response.usage())))
        except BaseException as error:  # noqa: BLE001 - every provider error is classified by the caller
            outcome.put((False, error))
        finally:
            done()

    def _completion(self, request: Request, text: str, seconds: float, prompt_tokens: int | None,
                    completion_tokens: int | None, *, cached: bool = False) -> Completion:
        return Completion(request.model_id, text, seconds, prompt_tokens, completion_tokens, cached,
                          self.estimate_cost(_configured(request, self.prices), prompt_tokens, completion_tokens),
                          system=request.system, prompt=request.prompt)

    def estimate_cost(self, model_id: str, prompt_tokens: int | None, completion_tokens: int | None) -> float | None:
        """USD cost from the price table; None when the model is not priced or tokens are unknown."""
        price = self.prices.get(model_id)
        if price is None or prompt_tokens is None or completion_tokens is None:
            return None
        return round((prompt_tokens * price.get("input_per_mtok", 0.0)
                      + completion_tokens * price.get("output_per_mtok", 0.0)) / 1e6, 8)

    def with_board(self, board: Any) -> ModelClient:
        """The same client sharing stop flag and dead models through ``board``."""
        return replace(self, board=board)


def _configured(request: Request, table: Mapping[str, Any]) -> str:
    """The name ``table`` (prices, limits) knows the request's model by: the name it was asked for, else the model
    id that name is an alias of (``4o-mini`` is priced as ``gpt-4o-mini``)."""
    if request.model_id in table or request.resolved_id not in table:
        return request.model_id
    return request.resolved_id


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


__all__ = ["Completion", "ModelClient", "complete", "completion_fields", "resolve_model"]
