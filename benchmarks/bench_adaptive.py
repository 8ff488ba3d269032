"""Concurrency at the defaults against servers of known capacity, as ratios of wall time.

- **A server with room** (64 slots, latency L): 4N items at the defaults against the ideal ceil(4N/C)*L.
- **A one-slot server** (a local llama.cpp server answers one request at a time; the mock of
  ``tests/mock_openai.py`` with ``slots: 1`` and latency L): N EBS items at the defaults against
  ``--concurrency 1``. Goal: no timeout, and the default's wall time within 1.1x of one call at a time.
  ``--fixed-concurrency`` (16 calls at once) is run beside it, with the same ``--call-timeout``, to show what the
  adaptive limit spares.

Times are of the server's first request to its last answer (its own clock), so start-up is left out.
Run: ``.venv/bin/python benchmarks/bench_adaptive.py [--items 40 --latency 0.25]`` (a minute or two).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import urllib.request
from pathlib import Path

from bench_model_calls import Server, fieldeval_project, measured

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.conftest import TINY_ENUMS, TINY_SELECTOR  # noqa: E402


def reset(server: Server, delay: float, slots: int | None) -> None:
    body = json.dumps({"delay": delay, "slots": slots}).encode()
    urllib.request.urlopen(urllib.request.Request(f"{server.base}/reset", data=body, method="POST")).read()


def session(folder: Path, env: dict, *options: str) -> tuple[dict, dict]:
    """One EBS session against the mock: (the server's counts, the report's EBS entry for mock-ok)."""
    args = [sys.executable, "-m", "pytest", "evals", "--model", "mock-ok", "--ebs-suite", "suite.yaml",
            "--ontology", TINY_SELECTOR, "--enum-dir", str(TINY_ENUMS), "--cache", "off", "--store", "none",
            "-p", "no:cacheprovider", "-q", "-n", "0", *options]
    measured(args, cwd=folder, env=env, done_when=lambda: (folder / "reports" / "report.json").is_file())
    report = json.loads((folder / "reports" / "report.json").read_text())
    return report["evals"]["benchmarks"]["ebs"]["mock-ok"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=40)
    parser.add_argument("--latency", type=float, default=0.25)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-adaptive-"))
    server = Server(folder)
    try:
        n, latency = args.items, args.latency
        # (b) first: the requests that --fixed-concurrency leaves queued at the one-slot server outlive its session
        ideal = math.ceil(n * 4 / 16) * latency
        print(f"(b) {n * 4} EBS items, a 64-slot server at L = {latency} s; ideal ceil(N/16)*L = {ideal:.2f} s")
        wide = folder / "wide"
        env = fieldeval_project(wide, server, n * 4)
        for name, options in (("--fixed-concurrency", ("--fixed-concurrency",)), ("defaults", ())):
            reset(server, latency, 64)
            entry = session(wide, env, *options)
            seen = server.stats()
            span = seen["last_end"] - seen["first_start"]
            print(f"  {name:22s} {span:6.2f} s = {span / ideal:.2f}x ideal, errors {entry['errors']}, most in flight "
                  f"{seen['max_in_flight']}")
        one = folder / "one"
        env = fieldeval_project(one, server, n)
        timeout = f"{max(1.0, 4 * latency):g}"  # four answers' time: 16 queued calls cannot all make it
        print(f"(a) {n} EBS items, a one-slot server at L = {latency} s, --call-timeout {timeout}, --retries 0")
        spans = {}
        for name, options in (("--concurrency 1", ("--concurrency", "1")), ("defaults", ()),
                              ("--fixed-concurrency", ("--fixed-concurrency",))):
            reset(server, latency, 1)
            entry = session(one, env, "--call-timeout", timeout, "--retries", "0", *options)
            seen = server.stats()
            spans[name] = seen["last_end"] - seen["first_start"]
            print(f"  {name:22s} {spans[name]:6.2f} s, errors {entry['errors']}, most in flight "
                  f"{seen['max_in_flight']}, requests {seen['requests']}")
        print(f"  defaults / --concurrency 1 = {spans['defaults'] / spans['--concurrency 1']:.2f}x (goal <= 1.1x)")
    finally:
        server.close()


if __name__ == "__main__":
    main()
