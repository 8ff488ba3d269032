"""The call engine's connections: each one checked where it goes, proxies honoured, failures named, answers bounded.

Name resolution is a resolver patched here, and every socket connect is recorded (a connect to a
refused address is stood in for by a local server, so no traffic ever leaves loopback).
"""

from __future__ import annotations

import http.client
import json
import socket
import sqlite3
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import llm
import pytest
import yaml

from fieldeval.calls import transport
from fieldeval.calls.client import ModelClient
from fieldeval.calls.endpoints import check_key_binding, register_endpoint, register_endpoints
from fieldeval.calls.failures import AddressRefusedError, AnswerTooLargeError, ModelCallError, PermanentCallError
from fieldeval.errors import UsageError
from fieldeval.store import open_store
from tests.conftest import ROOT, TINY_ENUMS, TINY_SELECTOR
from tests.ebs_project import _case
from tests.mock_openai import STATS, extra_models_yaml, serve

PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")
METADATA = "169.254.169.254"


@pytest.fixture(scope="module")
def server():
    httpd = serve()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(autouse=True)
def no_proxy_environment(monkeypatch):
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    STATS.reset(0.0)


def _models(tmp_path, monkeypatch, bases: dict[str, str]) -> None:
    """llm models named as the mock's behaviours, each at the given base URL."""
    folder = tmp_path / "llm"
    folder.mkdir(exist_ok=True)
    (folder / "extra-openai-models.yaml").write_text(yaml.safe_dump(
        [{"model_id": name, "model_name": name, "api_base": base} for name, base in bases.items()]))
    monkeypatch.setenv("LLM_USER_PATH", str(folder))


def _ask(model: str, **settings) -> str:
    """The text of one call through a fresh client (its own connections), or the failure's detail."""
    try:
        return ModelClient(**{"retries": 0, **settings}).complete(model, "Iowa soil").text
    except ModelCallError as error:
        return error.detail


class Connects:
    """Records every socket connect the client makes; a connect to 169.254.x goes to ``stand_in`` instead."""

    def __init__(self, monkeypatch, stand_in: tuple[str, int] | None = None) -> None:
        self.targets: list[str] = []
        real = transport.open_socket

        def open_socket(family, sockaddr, *args):
            self.targets.append(sockaddr[0])
            if str(sockaddr[0]).startswith("169.254."):
                if stand_in is None:
                    raise ConnectionAbortedError("test: no traffic to 169.254.x")
                return real(socket.AF_INET, stand_in, *args)
            return real(family, sockaddr, *args)

        monkeypatch.setattr(transport, "open_socket", open_socket)


def _resolver(monkeypatch, answers: dict[str, list]) -> list[str]:
    """Resolve each name in ``answers`` to its next address (or raise its exception); returns the names asked."""
    asked: list[str] = []
    real = transport.resolve_host

    def resolve_host(host: str, port: int):
        asked.append(host)
        if host not in answers:
            return real(host, port)
        answer = answers[host].pop(0) if len(answers[host]) > 1 else answers[host][0]
        if isinstance(answer, BaseException):
            raise answer
        return [(socket.AF_INET, (answer, port))]

    monkeypatch.setattr(transport, "resolve_host", resolve_host)
    return asked


class Recorder(BaseHTTPRequestHandler):
    """A stand-in for whatever listens at a refused address: counts requests and the keys they carry."""

    protocol_version = "HTTP/1.1"
    seen: list[str | None] = []

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        Recorder.seen.append(self.headers.get("Authorization"))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")


@pytest.fixture
def stand_in():
    Recorder.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd.server_address
    httpd.shutdown()
    httpd.server_close()


def test_a_name_rebound_to_a_link_local_address_is_refused_at_its_next_connection(server, tmp_path, monkeypatch):
    port = server.server_address[1]
    _models(tmp_path, monkeypatch, {"mock-ok": f"http://rebind.test:{port}/v1"})
    _resolver(monkeypatch, {"rebind.test": ["127.0.0.1", METADATA]})
    connects = Connects(monkeypatch)
    assert _ask("mock-ok") == "cropland biome [ENVO:01000245]"
    detail = _ask("mock-ok")
    assert detail.startswith("AddressRefused: ") and METADATA in detail and "link-local" in detail
    assert connects.targets == ["127.0.0.1"]  # the second connection was never attempted
    assert STATS.as_dict()["requests"] == 1


class EndpointPlugin:
    """The store's endpoints as llm models, for a session whose llm did not load fieldeval's plugin."""

    @llm.hookimpl
    def register_models(self, register) -> None:
        register_endpoints(register)


def test_a_bound_key_is_not_sent_once_its_host_resolves_elsewhere(server, stand_in, tmp_path, monkeypatch):
    # the registration passes the operator's binding (--allow-key-env VAR=URL), then the name moves
    port = server.server_address[1]
    url = f"http://bound.test:{port}/v1"
    _resolver(monkeypatch, {"bound.test": ["127.0.0.1", METADATA]})
    monkeypatch.setattr("fieldeval.calls.endpoints._resolve", lambda host: ["127.0.0.1"])
    monkeypatch.setenv("BOUND_TEST_KEY", "sk-bound")
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    monkeypatch.setenv("FIELDEVAL_STORE", store_url)
    monkeypatch.setenv("LLM_USER_PATH", str(tmp_path))
    with open_store(store_url) as store:
        check_key_binding(store, "BOUND_TEST_KEY", url, {"BOUND_TEST_KEY": url})
        register_endpoint(store, "mock-ok", url, key_env="BOUND_TEST_KEY")
    plugin = None
    if "mock-ok" not in {m.model.model_id for m in llm.get_models_with_aliases()}:
        plugin = llm.plugins.pm.register(EndpointPlugin(), name="fieldeval-test-bound")
    try:
        Connects(monkeypatch, stand_in=stand_in)
        assert _ask("mock-ok") == "cropland biome [ENVO:01000245]"
        assert _ask("mock-ok").startswith("AddressRefused: ")
    finally:
        if plugin is not None:
            llm.plugins.pm.unregister(name="fieldeval-test-bound")
    assert STATS.as_dict()["by_key"] == {"Bearer sk-bound": 1}
    assert Recorder.seen == []  # what listens at the new address never saw a request, let alone the key


class ProxyHandler(BaseHTTPRequestHandler):
    """A logging forward proxy for plain HTTP: counts requests and forwards those for loopback targets only."""

    protocol_version = "HTTP/1.1"
    seen: list[str] = []

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        ProxyHandler.seen.append(self.path)
        target = urlsplit(self.path)
        if target.hostname != "127.0.0.1":
            self.send_response(502)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        upstream = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("proxy-connection", "connection")}
        upstream.request("POST", target.path, body=body, headers=headers)
        answer = upstream.getresponse()
        data = answer.read()
        upstream.close()
        self.send_response(answer.status)
        self.send_header("Content-Type", answer.getheader("Content-Type", "application/json"))
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def proxy():
    ProxyHandler.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), ProxyHandler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_calls_go_through_http_proxy_unless_no_proxy_names_the_host(server, proxy, tmp_path, monkeypatch):
    port = server.server_address[1]
    _models(tmp_path, monkeypatch, {"mock-ok": f"http://127.0.0.1:{port}/v1"})
    monkeypatch.setenv("HTTP_PROXY", proxy)
    assert _ask("mock-ok") == "cropland biome [ENVO:01000245]"
    assert _ask("mock-ok") == "cropland biome [ENVO:01000245]"
    assert ProxyHandler.seen == [f"http://127.0.0.1:{port}/v1/chat/completions"] * 2
    monkeypatch.setenv("NO_PROXY", "example.org,127.0.0.1")
    assert _ask("mock-ok") == "cropland biome [ENVO:01000245]"
    assert len(ProxyHandler.seen) == 2  # the third call went straight to the server
    assert STATS.as_dict()["requests"] == 3


def test_through_a_proxy_the_target_is_checked_not_the_proxy(proxy, tmp_path, monkeypatch):
    # a name only the patched lookup resolves: code that ignored the proxy could reach nothing
    _models(tmp_path, monkeypatch, {"mock-ok": "http://metadata.test/v1"})
    monkeypatch.setattr("fieldeval.calls.endpoints._resolve",
                        lambda host: [METADATA] if host.rstrip(".") == "metadata.test" else [])
    monkeypatch.setenv("all_proxy", proxy)
    assert _ask("mock-ok").startswith("AddressRefused: ")
    assert ProxyHandler.seen == []


def _refused_port() -> int:
    with socket.socket() as sock:  # bound, never listening: a connect to it is refused
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_refused_connection_is_named_and_retried(tmp_path, monkeypatch):
    port = _refused_port()
    _models(tmp_path, monkeypatch, {"mock-ok": f"http://127.0.0.1:{port}/v1"})
    connects = Connects(monkeypatch)
    detail = _ask("mock-ok", retries=1)
    assert detail.startswith(f"no response after 2 request(s): ConnectionRefused: 127.0.0.1:{port} refused")
    assert connects.targets == ["127.0.0.1"] * 2  # transient: retried


def test_a_failed_lookup_is_named_and_retried(tmp_path, monkeypatch):
    _models(tmp_path, monkeypatch, {"mock-ok": "http://nowhere.test:8000/v1"})
    asked = _resolver(monkeypatch, {"nowhere.test": [socket.gaierror(socket.EAI_NONAME, "Name or service not known")]})
    detail = _ask("mock-ok", retries=1)
    assert detail.startswith("no response after 2 request(s): LookupFailed: nowhere.test did not resolve")
    assert asked == ["nowhere.test"] * 2


def test_a_timeout_is_reported_only_for_a_server_that_never_answers(tmp_path, monkeypatch):
    with socket.socket() as silent:  # listening, never accepting: the kernel completes the handshake, nobody reads
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        _models(tmp_path, monkeypatch, {"mock-ok": f"http://127.0.0.1:{silent.getsockname()[1]}/v1",
                                        "mock-500": f"http://127.0.0.1:{_refused_port()}/v1"})
        silent_detail = _ask("mock-ok", call_timeout=0.5)
        refused_detail = _ask("mock-500", call_timeout=0.5)
    assert silent_detail == "no response after 1 request(s): TimeoutError: no answer within --call-timeout 0.5 s"
    assert "TimeoutError" not in refused_detail  # refused at once: not a timeout, whatever the timeout


def test_https_to_a_plain_http_server_is_a_tls_failure(server, tmp_path, monkeypatch):
    _models(tmp_path, monkeypatch, {"mock-ok": f"https://127.0.0.1:{server.server_address[1]}/v1"})
    with pytest.raises(PermanentCallError) as caught:
        ModelClient(retries=3).complete("mock-ok", "x")
    assert caught.value.detail.startswith("TLSError: ")
    assert STATS.as_dict()["requests"] == 0  # no chat request was ever read by the server


def test_an_answer_over_the_limit_is_refused_without_retries(server, tmp_path, monkeypatch):
    _models(tmp_path, monkeypatch, {"mock-ok": f"http://127.0.0.1:{server.server_address[1]}/v1"})
    with pytest.raises(AnswerTooLargeError):
        ModelClient(retries=3, max_answer_bytes=100).complete("mock-ok", "x")
    assert STATS.as_dict()["requests"] == 1
    assert ModelClient(retries=0, max_answer_bytes=1000).complete("mock-ok", "x").text  # the same answer fits 1000


def test_a_refused_address_ends_the_model_without_more_connections(server, tmp_path, monkeypatch):
    _models(tmp_path, monkeypatch, {"mock-ok": f"http://rebind.test:{server.server_address[1]}/v1"})
    _resolver(monkeypatch, {"rebind.test": [METADATA]})
    connects = Connects(monkeypatch)
    client = ModelClient(retries=3)
    with pytest.raises(AddressRefusedError):
        client.complete("mock-ok", "x")
    assert "mock-ok" in client.dead_models() and connects.targets == []


@pytest.fixture
def http_project(pytester: pytest.Pytester, server, monkeypatch) -> pytest.Pytester:
    llm_dir = pytester.path / "llm"
    llm_dir.mkdir()
    (llm_dir / "extra-openai-models.yaml").write_text(extra_models_yaml(server.server_address[1]))
    monkeypatch.setenv("LLM_USER_PATH", str(llm_dir))
    pytester.makeini("[pytest]\n")
    (pytester.path / "evals").mkdir()
    (pytester.path / "evals" / "test_ebs.py").write_text((ROOT / "evals" / "test_ebs.py").read_text())
    suite = {"name": "http", "template": "predict_ebs",
             "templates": {"predict_ebs": {"system": "You are an expert.", "prompt": "{input}"}},
             "cases": [_case(f"Iowa-{i:03d}", "soil_data", "cropland biome [ENVO:01000245]") for i in range(3)]}
    (pytester.path / "suite.yaml").write_text(yaml.safe_dump(suite))
    return pytester


def test_an_oversized_answer_is_an_error_never_scored_cached_or_retried(http_project):
    cache = http_project.path / "cache.sqlite"
    result = http_project.runpytest_subprocess(
        "evals", "--model", "mock-large", "--ebs-suite", "suite.yaml", "--ontology", TINY_SELECTOR,
        "--enum-dir", str(TINY_ENUMS), "--store", "none", "-p", "no:cacheprovider", "--retries", "2",
        "--cache", "use", "--cache-path", str(cache), "-n", "0", timeout=600)
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(["*mock-large: AnswerTooLarge: answer too large (over --max-answer-bytes 1048576)*"])
    assert STATS.as_dict()["requests"] == 3  # one request per item: never retried
    report = json.loads((http_project.path / "reports" / "report.json").read_text())
    assert report["evals"]["benchmarks"]["ebs"]["mock-large"]["errors"] == 3
    with sqlite3.connect(cache) as db:
        assert db.execute("SELECT COUNT(*) FROM responses").fetchone()[0] == 0


class Endless(BaseHTTPRequestHandler):
    """Answers 200 with a body of ``total`` bytes and no Content-Length, counting what it managed to write."""

    total = 64 * 1024 * 1024
    written = 0

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Connection", "close")
        self.end_headers()
        chunk = b"x" * 65536
        try:
            while Endless.written < Endless.total:
                self.wfile.write(chunk)
                Endless.written += len(chunk)
        except OSError:
            pass


def test_a_body_without_length_is_read_only_up_to_the_limit(tmp_path, monkeypatch):
    Endless.written = 0
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Endless)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        _models(tmp_path, monkeypatch, {"mock-ok": f"http://127.0.0.1:{httpd.server_address[1]}/v1"})
        with pytest.raises(AnswerTooLargeError):
            ModelClient(retries=0, max_answer_bytes=65536).complete("mock-ok", "x")
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert Endless.written < Endless.total // 2  # the client stopped reading and closed; the rest was never sent


def test_max_answer_bytes_below_one_is_a_usage_error():
    with pytest.raises(UsageError, match=r"--max-answer-bytes 0: must be a whole number of bytes from 1"):
        ModelClient(max_answer_bytes=0)
