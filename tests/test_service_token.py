"""``fieldeval serve`` is closed by default: a token guards every route that writes, starts a job or reads runs."""

from __future__ import annotations

import http.cookies
import os
import queue
import re
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from starlette.routing import Mount

from fieldeval.service.app import create_app
from tests.service_helpers import ROOT, Server, free_port

TOKEN = "tok-route-walk"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
# the routes anyone may read: the benchmark list, the API schema and its pages, the dashboard's script
PUBLIC = {"/api/benchmarks", "/assets/plotly.min.js", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc",
          *(f"/assets/docs/{name}" for name in ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js",
                                                 "favicon.png"))}
DEADLINE_S = 120


@pytest.fixture
def store_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


@pytest.fixture
def client(store_url, tmp_path):
    app = create_app(store_url, evals_dir=ROOT / "evals", token=TOKEN, work_dir=tmp_path)
    with TestClient(app, base_url="http://127.0.0.1") as test_client:
        yield test_client


def _requests(app) -> list[tuple[str, str]]:
    """(method, path) for every method of every route, path parameters filled in."""
    out = []
    for route in app.routes:
        if isinstance(route, Mount):  # static files: the public ones, and any other name under the mount
            out += [("GET", path) for path in sorted(PUBLIC) if path.startswith(route.path + "/")]
            out.append(("GET", f"{route.path}/run_00000000"))
            continue
        assert hasattr(route, "methods"), f"{route!r}: a route kind this test cannot walk; teach it"
        path = re.sub(r"\{[^}]+\}", "run_00000000", route.path)
        out += [(method, path) for method in sorted(route.methods)]
    return out


def test_every_route_but_the_public_ones_needs_the_token(client):
    requests = _requests(client.app)
    closed = [(m, p) for m, p in requests if p not in PUBLIC]
    assert {p for _, p in closed} >= {"/", "/api/models", "/api/evaluations", "/api/evaluations/compare",
                                      "/api/evaluations/run_00000000"}
    for method, path in closed:
        body = {} if method == "POST" else None
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
            answer = client.request(method, path, headers=headers, json=body)
            assert answer.status_code == 401, (method, path, headers, answer.text)
            if method != "HEAD" and path != "/":
                assert answer.json()["message"].count("\n") == 0
        answer = client.request(method, path, headers=BEARER, json=body)
        assert answer.status_code != 401, (method, path)  # the token, not the route, was what was missing
    for method, path in requests:
        if path in PUBLIC and method == "GET":
            assert client.get(path).status_code == 200, path


def test_the_dashboard_without_the_token_says_how_to_get_in_and_shows_no_runs(client, store_url):
    from fieldeval.store import open_store
    from tests.test_store_api import ebs_run

    with open_store(store_url) as store:
        store.save_run(*ebs_run("run_0000beef", {"m": 0.5}), {})
    page = client.get("/")
    assert page.status_code == 401 and "text/html" in page.headers["content-type"]
    assert "?token=" in page.text and "run_0000beef" not in page.text
    assert client.get("/?token=wrong").status_code == 401
    assert "run_0000beef" in client.get("/", headers=BEARER).text


def test_a_cookie_write_from_another_origin_is_refused(client):
    client.get(f"/?token={TOKEN}", follow_redirects=False)  # the cookie, as the dashboard has it
    body = {"name": "m", "endpoint": "http://127.0.0.1:9/v1"}
    # same site (another port on this host) but not this service: SameSite alone would let it through
    assert client.post("/api/models", json=body, headers={"Origin": "http://127.0.0.1:9999"}).status_code == 403
    assert client.post("/api/models", json=body, headers={"Origin": "http://127.0.0.1"}).status_code == 201


def _lines(proc: subprocess.Popen) -> queue.Queue:
    """The process's output lines, read in a thread (so a wait has a deadline)."""
    lines: queue.Queue = queue.Queue()

    def read() -> None:
        for line in proc.stdout:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    return lines


def _line_with(lines: queue.Queue, pattern: str, seen: list[str]) -> re.Match:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            continue
        seen.append(line)
        if found := re.search(pattern, line):
            return found
    raise AssertionError(f"no line matching {pattern!r} in {seen}")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def _get(url: str, cookie: str | None = None) -> tuple[int, dict, str]:
    """(status, headers, body) of a GET that follows no redirect."""
    request = urllib.request.Request(url, headers={"Cookie": cookie} if cookie else {})
    try:
        with urllib.request.build_opener(_NoRedirect).open(request, timeout=30) as answer:
            return answer.status, dict(answer.headers), answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read().decode()


def _until_listening(url: str) -> tuple[int, dict, str]:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            return _get(url)
        except urllib.error.URLError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_the_printed_url_opens_the_dashboard_and_its_cookie_lets_the_api_through(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "FIELDEVAL_API_TOKEN"}
    env.update(XDG_STATE_HOME=str(tmp_path / "state"), PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "fieldeval.cli", "serve", "--port", str(port),
                             "--store", str(tmp_path / "store.db"), "--evals-dir", str(ROOT / "evals")],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines, seen = _lines(proc), []
        saved = Path(_line_with(lines, r"token is in (\S+) ", seen)[1])
        url = _line_with(lines, r"http://127\.0\.0\.1:\d+/\?token=\S+", seen)[0]
        token = url.split("?token=")[1]
        assert saved.is_relative_to(tmp_path / "state") and saved.read_text().strip() == token
        assert stat.S_IMODE(saved.stat().st_mode) == 0o600

        base = f"http://127.0.0.1:{port}"
        assert _until_listening(base + "/api/evaluations")[0] == 401
        status, headers, _ = _get(url)
        assert status == 303
        [morsel] = http.cookies.SimpleCookie(headers["set-cookie"]).values()
        assert morsel.value == token and morsel["httponly"] and morsel["samesite"].lower() == "strict"
        cookie = f"{morsel.key}={morsel.value}"
        status, _, body = _get(base + headers["location"], cookie)
        assert status == 200 and 'id="fieldeval-data"' in body
        status, _, body = _get(base + "/api/evaluations", cookie)
        assert (status, body) == (200, "[]")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert not saved.exists()  # a stopped server leaves no token behind


def test_the_token_file_is_0600_even_over_an_older_readable_one(tmp_path):
    from fieldeval.service import write_token_file

    path = tmp_path / "state" / "serve-8000.token"
    path.parent.mkdir()
    path.write_text("old\n")
    path.chmod(0o644)
    write_token_file(path, "new-token")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.read_text() == "new-token\n"


@pytest.mark.parametrize(("args", "named", "fix"), [
    (["--no-token", "--host", "0.0.0.0"], "0.0.0.0", "127.0.0.1"),
    (["--allowed-host", "*"], "'*'", "--allow-any-host"),
    (["--allowed-host", "a*b"], "'a*b'", "*.lan"),
    (["--allowed-host", "models.lan:8000"], "'models.lan:8000'", "without scheme, port or path"),
    (["--allowed-host", "http://models.lan"], "'http://models.lan'", "without scheme, port or path"),
])
def test_a_risky_or_malformed_serve_option_is_one_line_and_exit_2(tmp_path, args, named, fix):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "XDG_STATE_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "fieldeval.cli", "serve", "--port", str(free_port()),
                           "--store", str(tmp_path / "store.db"), "--evals-dir", str(ROOT / "evals"), *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and named in done.stderr and fix in done.stderr


def test_no_token_opens_a_loopback_service_with_a_warning(tmp_path):
    server = Server(tmp_path / "store.db", args=["--no-token"], env={"FIELDEVAL_API_TOKEN": ""}).start()
    try:
        assert server.call("GET", "/api/evaluations", token=None) == (200, [])
    finally:
        server.stop()
    assert "warning: --no-token" in server.proc.stdout.read().decode()


def test_any_host_is_answered_only_with_allow_any_host(tmp_path):
    server = Server(tmp_path / "store.db", args=["--allowed-host", "*", "--allow-any-host"]).start()
    try:
        assert server.call("GET", "/api/evaluations", host="anything.example")[0] == 200
        assert server.call("GET", "/api/evaluations", host="anything.example", token=None)[0] == 401
    finally:
        server.stop()
    assert "warning: --allow-any-host" in server.proc.stdout.read().decode()


def test_a_label_that_looks_like_an_option_reaches_the_job_as_its_value(client, store_url):
    answer = client.post("/api/evaluations", headers=BEARER,
                         json={"model_id": "ibf-floor", "corpus_version": "ibf-v1.0", "label": "-x"})
    assert answer.status_code == 202, answer.text
    run_id = answer.json()["run_id"]
    deadline = time.monotonic() + DEADLINE_S
    while (view := client.get(f"/api/evaluations/{run_id}", headers=BEARER).json())["status"] in ("queued", "running"):
        assert time.monotonic() < deadline, view
        time.sleep(0.2)
    assert view["status"] == "completed", view
    assert view["label"] == "-x"  # pytest took it as --run-label's value, not as its own -x
    from fieldeval.service.jobs import JobTable
    from fieldeval.store import open_store

    with open_store(store_url) as store:
        command = JobTable(store.engine).get(run_id).command
    assert "--run-label=-x" in command and "-x" not in command


def test_a_second_serve_on_a_port_in_use_is_one_line_and_leaves_the_running_servers_token(tmp_path):
    # the second server failed to bind only after writing its token file, then deleted it on the way out
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "FIELDEVAL_API_TOKEN"}
    env.update(XDG_STATE_HOME=str(tmp_path / "state"), PYTHONPATH=str(ROOT))
    command = [sys.executable, "-m", "fieldeval.cli", "serve", "--port", str(port), "--store",
               str(tmp_path / "store.db"), "--evals-dir", str(ROOT / "evals")]
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines, seen = _lines(proc), []
        saved = Path(_line_with(lines, r"token is in (\S+) ", seen)[1])
        token = saved.read_text()
        _until_listening(f"http://127.0.0.1:{port}/api/evaluations")
        second = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        assert second.returncode == 2 and second.stderr.count("\n") == 1, second.stdout + second.stderr
        assert f"--port {port}: already in use" in second.stderr
        assert saved.read_text() == token  # the running server's token is untouched
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_short_token_is_warned_about(tmp_path):
    # a one-character FIELDEVAL_API_TOKEN was accepted without a word
    server = Server(tmp_path / "store.db", token="s3cret").start()
    try:
        assert server.call("GET", "/api/evaluations")[0] == 200
    finally:
        server.proc.terminate()
        output = server.proc.communicate(timeout=30)[0].decode()
    assert "FIELDEVAL_API_TOKEN is 6 character(s) long; a token under 16 can be guessed" in output
