"""Registered endpoints answer as llm models, against an OpenAI-compatible server on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import llm
import pytest

import fieldeval
from fieldeval import store
from fieldeval.calls import endpoints
from fieldeval.calls.endpoints import api_base, register_endpoints, registered_endpoints
from fieldeval.store import open_store
from tests.conftest import ROOT

USAGE = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}


class ChatHandler(BaseHTTPRequestHandler):
    """POST /v1/chat/completions: echoes the model and last user message, streaming or not."""

    requests: list[dict] = []

    def log_message(self, *args) -> None:  # keep the test output clean
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        ChatHandler.requests.append({"path": self.path, "authorization": self.headers.get("Authorization"), **body})
        if self.path != "/v1/chat/completions":
            self.send_error(404)
            return
        text = f"echo from {body['model']}: {body['messages'][-1]['content']}"
        base = {"id": "chatcmpl-1", "created": 0, "model": body["model"]}
        if not body.get("stream"):
            self._send("application/json", json.dumps({
                **base, "object": "chat.completion", "usage": USAGE,
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": text}}]}).encode())
            return
        chunks = [{"role": "assistant", "content": ""}, {"content": text[:5]}, {"content": text[5:]}]
        events = [{**base, "object": "chat.completion.chunk",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": None}]} for delta in chunks]
        events.append({**base, "object": "chat.completion.chunk", "choices": [], "usage": USAGE})
        stream = "".join(f"data: {json.dumps(event)}\n\n" for event in events) + "data: [DONE]\n\n"
        self._send("text/event-stream", stream.encode())

    def _send(self, content_type: str, data: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture(scope="module")
def server():
    """A loopback OpenAI-compatible server; yields its base URL."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), ChatHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


class EndpointPlugin:
    """The line the baselines' register_models hook runs, as a test-only llm plugin."""

    @llm.hookimpl
    def register_models(self, register) -> None:
        register_endpoints(register)


@pytest.fixture
def registered(server, tmp_path, monkeypatch):
    """A store with tiny-echo registered at the server, as the default store, visible to llm."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    monkeypatch.setenv("FIELDEVAL_STORE", url)
    with open_store(url) as opened:
        record = opened.add_model("tiny-echo", f"{server}/v1/chat/completions", provider="local")
    plugin = None
    if "tiny-echo" not in {m.model.model_id for m in llm.get_models_with_aliases()}:
        plugin = llm.plugins.pm.register(EndpointPlugin(), name="fieldeval-test-endpoints")
    ChatHandler.requests.clear()
    yield record
    if plugin is not None:
        llm.plugins.pm.unregister(name="fieldeval-test-endpoints")


def test_complete_gets_text_and_token_usage_from_a_registered_endpoint(registered):
    completion = fieldeval.complete("tiny-echo", "hi", system="be brief")
    assert completion.text == "echo from tiny-echo: hi"
    assert (completion.prompt_tokens, completion.completion_tokens) == (7, 3)
    assert ChatHandler.requests[-1]["path"] == "/v1/chat/completions"
    assert ChatHandler.requests[-1]["stream"] is False  # one JSON reply, usage included: no streaming needed
    assert ChatHandler.requests[-1]["messages"][0] == {"role": "system", "content": "be brief"}


def test_a_non_streaming_prompt_gets_text_and_usage(registered):
    response = llm.get_model("tiny-echo").prompt("hello", stream=False)
    assert response.text() == "echo from tiny-echo: hello"
    assert (response.usage().input, response.usage().output) == (7, 3)
    assert ChatHandler.requests[-1].get("stream") is False


def test_a_registered_endpoint_is_also_reachable_by_its_model_id(registered):
    assert llm.get_model(registered.model_id).prompt("x").text() == "echo from tiny-echo: x"


def test_no_store_registers_nothing_and_does_not_create_one(tmp_path, monkeypatch):
    monkeypatch.setenv("FIELDEVAL_STORE", str(tmp_path / "absent.db"))
    seen = []
    register_endpoints(lambda *args, **kwargs: seen.append(args))
    assert seen == [] and not (tmp_path / "absent.db").exists()


def test_an_unreachable_postgres_store_registers_nothing():
    assert registered_endpoints("postgresql://nobody:x@127.0.0.1:1/none") == []


def test_the_endpoint_path_is_trimmed_to_the_client_base_url():
    assert api_base("http://localhost:11434/v1/chat/completions") == "http://localhost:11434/v1"
    assert api_base("http://localhost:8000/v1/") == "http://localhost:8000/v1"


def test_endpoints_default_store_matches_the_store_module():
    assert (endpoints.DEFAULT_STORE_PATH, endpoints.STORE_ENV) == (store.DEFAULT_STORE_PATH, store.STORE_ENV)


def test_reading_a_sqlite_stores_endpoints_does_not_import_sqlalchemy(registered):
    # llm runs the register_models hook on every model lookup; SQLAlchemy takes a second to import
    code = ("import sys; from fieldeval.calls.endpoints import registered_endpoints; "
            "names = [e[0] for e in registered_endpoints()]; "
            "print(names, 'sqlalchemy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['tiny-echo'] False"


def test_an_endpoint_with_key_env_sends_the_key_read_at_call_time(registered, tmp_path, monkeypatch, capsys):
    from fieldeval.cli import main

    store_url = str(tmp_path / "store.db")
    assert main(["models", "add", "tiny-echo", "--endpoint", f"{registered.endpoint}", "--key-env",
                 "TINY_ECHO_KEY", "--replace", "--store", store_url]) == 0
    monkeypatch.setenv("TINY_ECHO_KEY", "k-set-after-registration")
    assert llm.get_model("tiny-echo").prompt("x", stream=False).text() == "echo from tiny-echo: x"
    assert ChatHandler.requests[-1]["authorization"] == "Bearer k-set-after-registration"
    assert "k-set-after-registration" not in capsys.readouterr().out
    with open_store(store_url) as opened:  # only the variable's name is stored
        assert [(m.name, m.key_env) for m in opened.list_models()] == [("tiny-echo", "TINY_ECHO_KEY")]


def test_models_add_refuses_an_installed_llm_model_name(tmp_path, capsys):
    from fieldeval.cli import main

    assert main(["models", "add", "gpt-4o-mini", "--endpoint", "http://127.0.0.1:9/v1",
                 "--store", str(tmp_path / "s.db")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "an installed llm model already answers to that name" in err


def test_models_add_refuses_a_second_endpoint_unless_replace(tmp_path, capsys):
    from fieldeval.cli import main

    url = str(tmp_path / "s.db")
    assert main(["models", "add", "my-local", "--endpoint", "http://127.0.0.1:9/v1", "--store", url]) == 0
    assert main(["models", "add", "my-local", "--endpoint", "http://127.0.0.1:9/v1", "--store", url]) == 0
    assert main(["models", "add", "my-local", "--endpoint", "http://127.0.0.1:10/v1", "--store", url]) == 2
    assert "pass --replace" in capsys.readouterr().err
    assert main(["models", "add", "my-local", "--endpoint", "http://127.0.0.1:10/v1", "--replace",
                 "--store", url]) == 0
    with open_store(url) as opened:
        assert [m.endpoint for m in opened.list_models()] == ["http://127.0.0.1:10/v1"]


def test_pytest_store_option_finds_the_models_registered_in_that_store(tmp_path):
    # --model looked only in the default store, so a model registered in --store X was unknown (issue 36)
    url = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    with open_store(url) as opened:
        opened.add_model("only-in-x", "http://127.0.0.1:9/v1", provider="local")
    env = {**os.environ, "FIELDEVAL_STORE": str(tmp_path / "default.db")}
    ran = subprocess.run([sys.executable, "-m", "pytest", "evals/test_ibf.py", f"--store={url}", "--model=only-in-x",
                          "--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"],
                         cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    assert "only-in-x" in ran.stdout
    assert not (tmp_path / "default.db").exists()
