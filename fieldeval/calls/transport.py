"""The guarded HTTP transport to OpenAI-compatible endpoints: one urllib3 connection pool per endpoint and key.

No streaming and no retries of its own; the pool's timeout (``call_timeout``)
ends a hung request. Each new connection resolves the endpoint's host, refuses
it when any address breaks the registration rules
(:func:`fieldeval.calls.endpoints.forbidden_kind`) and connects to the address
it checked; the proxy environment (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY,
NO_PROXY) is honoured as requests and httpx honour it, the checks then
applying to the target; an answer is read up to ``max_answer_bytes`` and
refused past it.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import urllib.request
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

import urllib3

from fieldeval.calls.endpoints import forbidden_kind, refused_address
from fieldeval.calls.failures import (AddressRefusedError, AnswerTooLargeError, CallTimeoutError,
                                      ConnectionRefusedCallError, InvalidReplyError, LookupFailedError,
                                      TLSFailedError, TransientCallError)
from fieldeval.defaults import DEFAULT_MAX_ANSWER_BYTES
from fieldeval.errors import UsageError

READ_CHUNK_BYTES = 65_536


class HTTPStatusError(Exception):
    """A non-200 answer from an OpenAI-compatible endpoint (classified by its status and Retry-After)."""

    def __init__(self, status: int, headers: Mapping[str, str], message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status_code = status
        self.headers = headers



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



__all__ = ["Endpoint", "HTTPStatusError", "RefusedAddress", "open_socket", "parse_chat_reply", "proxy_for",
           "resolve_host"]
