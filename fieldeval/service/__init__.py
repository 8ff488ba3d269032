"""The HTTP service and dashboard: ``fieldeval serve`` and ``fieldeval report``.

``serve`` runs the FastAPI app (:func:`create_app`) on uvicorn, bound to
loopback by default and closed by default: it makes a random token (unless
``FIELDEVAL_API_TOKEN`` gives one), prints the dashboard URL with it, keeps it
in a file only the user can read, and every request but the public ones must
send it (``--no-token`` opens a loopback service). It answers only to the
loopback Host names and those ``--allowed-host`` adds, and a registration over
HTTP may name only the keys ``--allow-key-env`` allows. ``report`` writes the
dashboard of some runs as one self-contained HTML file (a CI artifact).
"""

from __future__ import annotations

import argparse
import errno
import ipaddress
import os
import re
import secrets
import signal
import socket
import sys
from pathlib import Path

from fieldeval.errors import UsageError

__all__ = ["TOKEN_ENV", "check_host_patterns", "create_app", "is_loopback", "parse_key_envs", "register_cli",
           "render_report", "serve_settings", "token_file", "write_token_file"]

TOKEN_ENV = "FIELDEVAL_API_TOKEN"
MIN_TOKEN_CHARS = 16  # a shorter token is warned about: it can be guessed
HOST_LABEL = r"[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?"
HOST_PATTERN = re.compile(rf"(?:\*\.)?{HOST_LABEL}(?:\.{HOST_LABEL})*")  # TrustedHostMiddleware's two forms


def create_app(store_url: str, *, evals_dir: Path, token: str | None, no_token: bool = False,
               work_dir: Path | None = None, allowed_hosts: list[str] | None = None,
               key_envs: dict[str, str | None] | None = None):
    """The FastAPI app on one store; see :func:`fieldeval.service.app.create_app`."""
    from fieldeval.service.app import create_app as build

    return build(store_url, evals_dir=evals_dir, token=token, no_token=no_token, work_dir=work_dir,
                 allowed_hosts=allowed_hosts, key_envs=key_envs)


def check_host_patterns(patterns: list[str], origin: str, *, allow_any: bool = False) -> list[str]:
    """The Host patterns, lower-cased; a usage error naming a malformed one, or ``*`` without ``allow_any``.

    Example:
        >>> check_host_patterns(["Models.LAN", "*.lan"], "--allowed-host")
        ['models.lan', '*.lan']
    """
    out = []
    for raw in patterns:
        pattern = str(raw).strip().lower()
        if pattern == "*":
            if not allow_any:
                raise UsageError(f"{origin} '*': answers any Host name, so a DNS-rebinding page can reach the "
                                 "service; name the hosts, or add --allow-any-host")
        elif not (HOST_PATTERN.fullmatch(pattern) or _bracketed_ipv6(pattern)):
            raise UsageError(f"{origin} {str(raw)!r}: not a host pattern; write an exact name (models.lan, "
                             "10.0.0.5, [fd00::1]) or one with a leading wildcard (*.lan), without scheme, port or path")
        out.append(pattern)
    return out


def _bracketed_ipv6(pattern: str) -> bool:
    if not (pattern.startswith("[") and pattern.endswith("]")):
        return False
    try:
        return ipaddress.ip_address(pattern[1:-1]).version == 6
    except ValueError:
        return False


def token_file(port: int) -> Path:
    """Where ``fieldeval serve --port PORT`` keeps the token it made: the user's state folder."""
    import platformdirs

    return Path(platformdirs.user_state_dir("fieldeval")) / f"serve-{port}.token"


def write_token_file(path: Path, token: str) -> Path:
    """Write ``token`` to ``path``, readable and writable by the user alone (mode 0600); returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        os.fchmod(fd, 0o600)  # a file left by an earlier server keeps the mode it had otherwise
        out.write(token + "\n")
    return path


def parse_key_envs(entries: list[str], origin: str) -> dict[str, str | None]:
    """``VAR`` or ``VAR=URL`` entries as {VAR: bound endpoint or None}; a usage error naming a bad entry."""
    from fieldeval.calls.endpoints import check_endpoint
    from fieldeval.store.registration import KEY_ENV_NAME

    out: dict[str, str | None] = {}
    for entry in entries:
        if not isinstance(entry, str):
            raise UsageError(f"{origin} {entry!r}: not a string; write VAR or VAR=URL")
        var, sep, url = entry.partition("=")
        var = var.strip()
        if not KEY_ENV_NAME.fullmatch(var):
            raise UsageError(f"{origin} {entry!r}: {var!r} is not a variable name; write VAR or VAR=URL "
                             "(the variable's name, never the key itself)")
        try:
            out[var] = check_endpoint(url) if sep else None
        except UsageError as error:
            raise UsageError(f"{origin} {entry!r}: {str(error).removeprefix('--endpoint ')}") from None
    return out


def serve_settings(rootpath: Path) -> dict:
    """``[tool.fieldeval.serve]`` of the project's pyproject.toml (``key_envs``, ``allowed_hosts``)."""
    from fieldeval.settings import tool_settings

    table = tool_settings(rootpath).get("serve", {})
    if not isinstance(table, dict):
        raise UsageError("[tool.fieldeval.serve]: not a table; write key_envs = [\"VAR\"] under it")
    for key in ("key_envs", "allowed_hosts"):
        if not isinstance(table.get(key, []), list):
            raise UsageError(f"[tool.fieldeval.serve] {key}: not a list; write {key} = [\"...\"]")
    return table


def render_report(store_url: str | None, run_ids: list[str], *, base: str | None = None) -> str:
    """The dashboard of ``run_ids`` as one HTML document with Plotly and the data inlined; with ``base``,
    each other run's paired differences against it."""
    from fieldeval.service.dashboard import render
    from fieldeval.store import declared_columns, open_store

    with open_store(store_url, columns=declared_columns()) as store:
        return render(store, run_ids=run_ids, base=base)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is ``localhost`` or a loopback address."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _warn(text: str) -> None:
    print(f"fieldeval: warning: {text}", file=sys.stderr, flush=True)


def _serve(args: argparse.Namespace) -> int:
    configured = os.environ.get(TOKEN_ENV) or None
    if args.no_token and configured:
        raise UsageError(f"--no-token: {TOKEN_ENV} is set too; unset it, or drop --no-token to use it")
    if args.no_token and not is_loopback(args.host):
        raise UsageError(f"--no-token --host {args.host}: a service without a token stays on loopback; "
                         "use --host 127.0.0.1, or drop --no-token")
    if not 0 < args.port < 65536:
        raise UsageError(f"--port {args.port}: not a TCP port; pass 1-65535")
    evals_dir = Path(args.evals_dir)
    if not evals_dir.is_dir():
        raise UsageError(f"--evals-dir {evals_dir}: no such folder; run from the project root or pass "
                         "the folder with test_ibf.py, test_ebs.py and test_microbiorel.py")
    settings = serve_settings(Path.cwd())
    key_envs = {**parse_key_envs(settings.get("key_envs", []), "[tool.fieldeval.serve] key_envs"),
                **parse_key_envs(args.allow_key_env, "--allow-key-env")}
    hosts = [*check_host_patterns(settings.get("allowed_hosts", []), "[tool.fieldeval.serve] allowed_hosts",
                                  allow_any=args.allow_any_host),
             *check_host_patterns(args.allowed_host, "--allowed-host", allow_any=args.allow_any_host)]
    if args.host not in ("0.0.0.0", "::"):
        hosts.append(f"[{args.host}]" if ":" in args.host else args.host.lower())
    import uvicorn

    from fieldeval.store import default_store_url

    token = None if args.no_token else configured or secrets.token_urlsafe(32)
    if configured is not None and len(configured) < MIN_TOKEN_CHARS:
        _warn(f"{TOKEN_ENV} is {len(configured)} character(s) long; a token under {MIN_TOKEN_CHARS} can be guessed "
              "(make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))')")
    sock = bind_port(args.host, args.port)  # before the token file: a port in use leaves a running server's alone
    app = create_app(args.store or default_store_url(), evals_dir=evals_dir, token=token, no_token=args.no_token,
                     allowed_hosts=hosts, key_envs=key_envs)
    shown = "127.0.0.1" if args.host in ("0.0.0.0", "::") else f"[{args.host}]" if ":" in args.host else args.host
    base = f"http://{shown}:{args.port}/"
    print(f"fieldeval: serving {base} (API docs at /docs)", flush=True)
    if "*" in hosts:
        _warn("--allow-any-host: answering any Host name; a DNS-rebinding page can reach this service")
    saved = None
    if token is None:
        _warn("--no-token: any local process can register models, start evaluations with this server's keys "
              "and delete runs")
    else:
        if configured is None:
            saved = write_token_file(token_file(args.port), token)
            print(f"fieldeval: the token is in {saved} (mode 0600); clients send 'Authorization: Bearer <token>'",
                  flush=True)
        else:
            print(f"fieldeval: the token is ${TOKEN_ENV}; clients send 'Authorization: Bearer <token>'", flush=True)
        print(f"fieldeval: open the dashboard at {base}?token={token}", flush=True)
    if saved is not None:  # uvicorn re-raises SIGTERM once it has shut down: end through the finally below
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, log_level="warning")).run(sockets=[sock])
    finally:
        if saved is not None and _holds(saved, token):  # never another server's file
            saved.unlink(missing_ok=True)
    return 0


def bind_port(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``; a usage error when the port is taken (another ``fieldeval serve``?)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as error:
        sock.close()
        if error.errno == errno.EADDRINUSE:
            raise UsageError(f"--port {port}: already in use on {host} (another fieldeval serve?); stop it, or "
                             "pass another --port") from None
        raise UsageError(f"--host {host} --port {port}: cannot listen there ({error.strerror}); pass a local "
                         "address and a free port") from None
    sock.set_inheritable(True)
    return sock


def _holds(path: Path, token: str) -> bool:
    try:
        return path.read_text(encoding="utf-8").strip() == token
    except OSError:
        return False


def _report(args: argparse.Namespace) -> int:
    if args.base and args.base not in args.run_ids:
        raise UsageError(f"--base {args.base}: not one of the runs to report ({', '.join(args.run_ids)}); "
                         "pass one of them")
    base = args.base or (args.run_ids[0] if len(args.run_ids) > 1 else None)
    html = render_report(args.store, args.run_ids, base=base)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(html, encoding="utf-8")
    print(f"wrote {out} ({len(args.run_ids)} run(s), {len(html) // 1024} KiB, self-contained)")
    return 0


def register_cli(sub: argparse._SubParsersAction) -> None:
    """Add the ``serve`` and ``report`` subcommands to the ``fieldeval`` parser's subparsers ``sub``."""
    store_help = "sqlite:///PATH or postgresql://... (default: $FIELDEVAL_STORE, else reports/fieldeval.db)"
    serve = sub.add_parser("serve", help="the HTTP API and dashboard (FastAPI on uvicorn)")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="TCP port (default: 8000)")
    serve.add_argument("--store", metavar="URL", default=None, help=store_help)
    serve.add_argument("--evals-dir", metavar="DIR", default="evals",
                       help="folder of the benchmark modules the jobs run (default: evals)")
    serve.add_argument("--allow-key-env", metavar="VAR[=URL]", action="append", default=[],
                       help="let POST /api/models name this key (environment variable or `llm keys` alias); "
                            "=URL binds it to that endpoint, else only endpoints registered with it from the "
                            "command line (repeatable; also [tool.fieldeval.serve] key_envs)")
    serve.add_argument("--allowed-host", metavar="NAME", action="append", default=[],
                       help="answer requests with this Host name too (repeatable; default: loopback names only, "
                            "plus --host when it is one address); an exact name or *.domain")
    serve.add_argument("--allow-any-host", action="store_true",
                       help="let --allowed-host '*' answer any Host name (a DNS-rebinding page can then reach it)")
    serve.add_argument("--no-token", action="store_true",
                       help=f"serve without a token (default: ${TOKEN_ENV}, else a random one, printed in the "
                            "dashboard URL); loopback only")
    serve.set_defaults(func=_serve)
    report = sub.add_parser("report", help="the dashboard of some runs as one self-contained HTML file")
    report.add_argument("run_ids", metavar="RUN", nargs="+")
    report.add_argument("-o", "--output", default="reports/report.html",
                        help="HTML file to write (default: reports/report.html, beside the run's other outputs)")
    report.add_argument("--store", metavar="URL", default=None, help=store_help)
    report.add_argument("--base", metavar="RUN", default=None,
                        help="show the other runs' paired differences against this run (default: the first run)")
    report.set_defaults(func=_report)
