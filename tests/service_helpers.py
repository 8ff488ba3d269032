"""A real ``fieldeval serve`` on a free loopback port, and a small JSON client for it (stdlib only)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import EllipsisType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 60
RUN_TIMEOUT_S = 120


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """``python -m fieldeval.cli serve --port N --store URL`` as a subprocess, started and stopped by the test.

    It runs with ``token`` as ``FIELDEVAL_API_TOKEN`` (default: a new random one) and :meth:`call` sends it.
    """

    def __init__(self, store: Path, *, token: str | None = None, port: int | None = None,
                 args: list[str] | None = None, env: dict[str, str] | None = None,
                 path: tuple[Path, ...] = ()) -> None:
        self.store, self.path = store, path
        self.token = token or "tok-" + secrets.token_hex(8)
        self.args, self.extra_env = list(args or []), dict(env or {})
        self.port = port or free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> Server:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *map(str, self.path),
                                                            os.environ.get("PYTHONPATH", "")])}
        env["FIELDEVAL_API_TOKEN"] = self.token
        env.update(self.extra_env)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fieldeval.cli", "serve", "--port", str(self.port), "--store", str(self.store),
             "--evals-dir", str(ROOT / "evals"), *self.args],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited {self.proc.returncode}: {self.proc.stdout.read().decode()}")
            try:
                if self.call("GET", "/api/models")[0] == 200:
                    return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"server on port {self.port} did not answer in {START_TIMEOUT_S} s")

    def children(self) -> list[int]:
        """The pids of the server's child processes (Linux ``/proc``)."""
        pids: list[int] = []
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            try:
                pids += [int(p) for p in (task / "children").read_text().split()]
            except OSError:
                continue
        return pids

    def kill(self) -> None:
        """SIGKILL: the server gets no chance to clean up (a crash)."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()

    def call(self, method: str, path: str, body: Any = None, *, token: str | EllipsisType | None = ...,
             host: str | None = None, raw: bytes | None = None) -> tuple[int, Any]:
        """``(status, decoded JSON)`` of one request (``raw``: the body bytes as given; ``host``: the Host header;
        ``token``: the bearer token to send, default the server's, None for none)."""
        if token is ...:
            token = self.token
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        request = urllib.request.Request(self.base + path, data=data, method=method)
        if host is not None:
            request.add_header("Host", host)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                status, raw = answer.status, answer.read()
        except urllib.error.HTTPError as error:
            status, raw = error.code, error.read()
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode("utf-8", "replace")

    def wait_for(self, run_id: str, statuses: tuple[str, ...], *, timeout: float = RUN_TIMEOUT_S,
                 interval: float = 0.25) -> tuple[dict, list[str]]:
        """Poll a run until its status is one of ``statuses``; returns the view and every status seen."""
        seen: list[str] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status, view = self.call("GET", f"/api/evaluations/{run_id}")
            assert status == 200, view
            if not seen or seen[-1] != view["status"]:
                seen.append(view["status"])
            if view["status"] in statuses:
                return view, seen
            time.sleep(interval)
        raise AssertionError(f"run {run_id} still {seen[-1:]} after {timeout} s (seen {seen})")
