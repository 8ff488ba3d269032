"""The service under hostile use: key theft, foreign Host headers, out-of-range input, a ``kill -9``-ed server.

Each test drives a real ``fieldeval serve`` and, where a model is called, a loopback OpenAI-compatible
server that records every request (its headers included), so what leaves the machine is seen from
the outside.
"""

from __future__ import annotations

import json
import secrets
import select
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.service_helpers import Server

IBF = {"corpus_version": "ibf-v1.0"}
DEADLINE_S = 60


class Capture:
    """A loopback chat-completions server that records each request's headers.

    With ``hold``, a request is not answered: it is held until its caller closes the connection (counted in
    ``abandoned``) or the capture closes.
    """

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.hold = False
        self.held = 0  # requests waiting now for their caller to go
        self.abandoned = 0  # held requests whose caller closed the connection without an answer
        self.answered = 0
        self.cond = threading.Condition()
        self.closing = threading.Event()
        capture = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _caller_left(self) -> bool:
                """Wait until the caller closes the connection (True) or the capture closes (False)."""
                while not capture.closing.is_set():
                    if select.select([self.connection], [], [], 0.1)[0]:
                        try:
                            return self.connection.recv(1, socket.MSG_PEEK) == b""
                        except OSError:  # reset by the caller's kernel
                            return True
                return False

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with capture.cond:
                    capture.requests.append({"headers": {k.lower(): v for k, v in self.headers.items()}})
                    capture.held += capture.hold
                    capture.cond.notify_all()
                if capture.hold:
                    left = self._caller_left()
                    with capture.cond:
                        capture.held -= 1
                        capture.abandoned += left
                        capture.cond.notify_all()
                    if left:
                        return
                text = json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": body.get("model"),
                                   "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                                   "choices": [{"index": 0, "finish_reason": "stop",
                                                "message": {"role": "assistant", "content": "no idea"}}]})
                data = text.encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    with capture.cond:
                        capture.answered += 1
                except OSError:  # the caller is gone
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def wait_for(self, condition, what: str, timeout: float = DEADLINE_S) -> None:
        """Wait until ``condition()`` holds, told by each request's change (the deadline only catches a hang)."""
        with self.cond:
            if not self.cond.wait_for(condition, timeout):
                raise AssertionError(f"{what}: not within {timeout} s")

    def close(self) -> None:
        self.closing.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def capture():
    server = Capture()
    yield server
    server.close()


def _wait(condition, what: str, timeout: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout} s")


def test_a_key_named_over_http_never_reaches_a_foreign_endpoint(tmp_path, capture):
    token, other_secret = "tok-" + secrets.token_hex(8), "sk-" + secrets.token_hex(8)
    server = Server(tmp_path / "store.db", token=token, env={"OTHER_SECRET": other_secret},
                    args=["--allow-key-env", "OTHER_SECRET=http://127.0.0.1:9/v1"]).start()
    try:
        for key_env in ("FIELDEVAL_API_TOKEN", "OTHER_SECRET", "openai", "NO_SUCH_VARIABLE"):
            status, answer = server.call("POST", "/api/models", {"name": "thief", "endpoint": capture.url,
                                                                 "key_env": key_env}, token=token)
            assert status == 422 and answer["message"].startswith("key_env:"), answer
        # the same answer whether or not the variable exists: nothing tells what the server's environment holds
        _, real = server.call("POST", "/api/models", {"name": "t", "endpoint": capture.url,
                                                      "key_env": "FIELDEVAL_API_TOKEN"}, token=token)
        _, absent = server.call("POST", "/api/models", {"name": "t", "endpoint": capture.url,
                                                        "key_env": "FIELDEVAL_API_TOKEM"}, token=token)
        assert real["message"].replace("TOKEN", "X") == absent["message"].replace("TOKEM", "X")

        name = "thief-" + secrets.token_hex(3)  # a new name: no cached response stands in for the calls
        status, model = server.call("POST", "/api/models", {"name": name, "endpoint": capture.url}, token=token)
        assert status == 201 and model["model_id"].startswith("mdl_")
        _, started = server.call("POST", "/api/evaluations", {"model_id": name, **IBF}, token=token)
        server.wait_for(started["run_id"], ("completed", "failed"))
        assert capture.requests, "the evaluation called the registered endpoint"
        seen = json.dumps([request["headers"] for request in capture.requests])
        assert token not in seen and other_secret not in seen
        status, listed = server.call("GET", "/api/models")
        assert status == 200 and token not in json.dumps(listed) and other_secret not in json.dumps(listed)
    finally:
        server.stop()


def test_an_allowed_key_goes_only_to_the_endpoint_it_is_bound_to(tmp_path, capture):
    secret = "sk-" + secrets.token_hex(8)
    server = Server(tmp_path / "store.db", env={"BOUND_KEY": secret},
                    args=["--allow-key-env", f"BOUND_KEY={capture.url}"]).start()
    try:
        name = "bound-" + secrets.token_hex(3)
        status, _ = server.call("POST", "/api/models", {"name": name, "endpoint": capture.url, "key_env": "BOUND_KEY"})
        assert status == 201
        status, answer = server.call("POST", "/api/models", {"name": "elsewhere", "endpoint": "http://127.0.0.1:9/v1",
                                                             "key_env": "BOUND_KEY"})
        assert status == 422 and "another endpoint" in answer["message"]
        _, started = server.call("POST", "/api/evaluations", {"model_id": name, **IBF})
        server.wait_for(started["run_id"], ("completed", "failed"))
        assert capture.requests and all(r["headers"].get("authorization") == f"Bearer {secret}"
                                        for r in capture.requests)
    finally:
        server.stop()


def test_a_foreign_host_header_is_refused_and_allowed_hosts_are_answered(tmp_path):
    server = Server(tmp_path / "store.db", args=["--allowed-host", "models.lan"]).start()
    try:
        body = {"name": "m", "endpoint": "http://127.0.0.1:9/v1"}
        assert server.call("GET", "/api/models", host="evil.example")[0] == 400
        assert server.call("GET", "/", host="evil.example:80")[0] == 400
        assert server.call("POST", "/api/models", body, host="evil.example")[0] == 400
        assert server.call("GET", "/api/models", host=f"localhost:{server.port}")[0] == 200
        assert server.call("GET", "/api/models", host=f"[::1]:{server.port}")[0] == 200
        assert server.call("GET", "/api/models", host="models.lan")[0] == 200
    finally:
        server.stop()


@pytest.mark.parametrize(("body", "field"), [
    ({"context_window": 2**63}, "context_window"),
    ({"context_window": 2**31}, "context_window"),
    ({"name": "a\x00b"}, "name"),
    ({"name": "two\nlines"}, "name"),
    ({"name": "--model"}, "name"),
    ({"notes": "nul \x00 here"}, "notes"),
])
def test_out_of_range_registration_input_is_422_naming_the_field(api_server, body, field):
    status, answer = api_server.call("POST", "/api/models", {"name": "m", "endpoint": "http://127.0.0.1:9/v1", **body})
    assert status == 422 and answer["message"].startswith(f"{field}:"), answer


def test_an_infinite_size_is_422_not_stored_as_infinity(api_server):
    raw = b'{"name": "big", "endpoint": "http://127.0.0.1:9/v1", "parameters_billion": 1e400}'
    status, answer = api_server.call("POST", "/api/models", raw=raw)
    assert status == 422 and answer["message"].startswith("parameters_billion:"), answer
    assert "big" not in [m["name"] for m in api_server.call("GET", "/api/models")[1]]


def test_largest_column_values_are_stored(api_server):
    status, model = api_server.call("POST", "/api/models", {"name": "wide", "endpoint": "http://127.0.0.1:9/v1",
                                                            "context_window": 2**31 - 1, "parameters_billion": 1e300})
    assert status == 201 and model["model_id"] is not None
    listed = [m for m in api_server.call("GET", "/api/models")[1] if m["name"] == "wide"]
    assert [(m["context_window"], m["parameters_billion"]) for m in listed] == [(2**31 - 1, 1e300)]


@pytest.fixture(scope="module")
def api_server(tmp_path_factory):
    server = Server(tmp_path_factory.mktemp("hostile") / "store.db").start()
    yield server
    server.stop()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"  # a zombie has stopped running
    except OSError:
        return False


def test_kill_9_of_the_server_kills_its_run_and_its_model_calls(tmp_path, capture):
    capture.hold = True  # no call is answered: the run is mid-way, its calls in flight here, when the server dies
    server = Server(tmp_path / "store.db").start()
    name = "slow-" + secrets.token_hex(3)
    assert server.call("POST", "/api/models", {"name": name, "endpoint": capture.url})[0] == 201
    _, started = server.call("POST", "/api/evaluations", {"model_id": name, **IBF})
    capture.wait_for(lambda: capture.held >= 1, "the run's first model call")
    children = server.children()
    assert children, "the run is a child process of the server"
    server.kill()
    _wait(lambda: not any(_alive(pid) for pid in children), "the run's process ending with the server")
    # its model calls died with it: every call that reached the endpoint (one still on the wire at the kill
    # included) was dropped by its caller, none waits on for an answer and none was answered
    capture.wait_for(lambda: capture.held == 0 and capture.abandoned == len(capture.requests),
                     "every model call of the run dropped by its caller")
    assert capture.answered == 0 and capture.abandoned >= 1
    restarted = Server(tmp_path / "store.db", port=server.port).start()
    try:
        status, view = restarted.call("GET", f"/api/evaluations/{started['run_id']}")
        assert status == 200 and view["status"] == "interrupted"
    finally:
        restarted.stop()


def test_models_add_sends_one_key_to_one_endpoint(tmp_path, capsys):
    from fieldeval.cli import main

    url = str(tmp_path / "s.db")
    assert main(["models", "add", "a", "--endpoint", "http://127.0.0.1:9/v1", "--key-env", "A_KEY", "--store", url]) == 0
    assert main(["models", "add", "b", "--endpoint", "http://127.0.0.1:9/v1/", "--key-env", "A_KEY", "--store", url]) == 0
    capsys.readouterr()
    assert main(["models", "add", "c", "--endpoint", "http://127.0.0.1:10/v1", "--key-env", "A_KEY",
                 "--store", url]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already sends its key to http://127.0.0.1:9/v1" in err


def test_a_bare_allowed_key_serves_only_the_endpoints_the_operator_registered_it_with(tmp_path):
    from fieldeval.cli import main

    store = tmp_path / "store.db"
    assert main(["models", "add", "ops", "--endpoint", "http://127.0.0.1:9/v1", "--key-env", "TEAM_KEY",
                 "--store", str(store)]) == 0
    server = Server(store, args=["--allow-key-env", "TEAM_KEY"]).start()
    try:
        same = {"name": "ops-big", "endpoint": "http://127.0.0.1:9/v1", "key_env": "TEAM_KEY"}
        assert server.call("POST", "/api/models", same)[0] == 201
        status, answer = server.call("POST", "/api/models", {**same, "name": "x", "endpoint": "http://127.0.0.1:10/v1"})
        assert status == 422 and "not configured for this endpoint" in answer["message"]
    finally:
        server.stop()


@pytest.mark.parametrize("entry", ["", "1VAR", "VAR=ftp://x/", "VAR=http://169.254.169.254/v1", "MY KEY"])
def test_bad_key_env_allow_list_entries_are_usage_errors(entry):
    from fieldeval.errors import UsageError
    from fieldeval.service import parse_key_envs

    with pytest.raises(UsageError, match="--allow-key-env"):
        parse_key_envs([entry], "--allow-key-env")


def test_key_envs_come_from_the_command_line_and_pyproject(tmp_path):
    from fieldeval.service import parse_key_envs, serve_settings

    (tmp_path / "pyproject.toml").write_text('[tool.fieldeval.serve]\nkey_envs = ["A", "B=http://127.0.0.1:9/v1"]\n')
    entries = serve_settings(tmp_path)["key_envs"]
    assert parse_key_envs(entries, "key_envs") == {"A": None, "B": "http://127.0.0.1:9/v1"}
