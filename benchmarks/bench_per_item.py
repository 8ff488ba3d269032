"""CPU per added item: fieldeval against its two floors, pytest's own and HTTP's, measured in the same run.

Each figure is a marginal cost, (CPU at LARGE items - CPU at SMALL items) / (LARGE - SMALL), of a whole command
run as a subprocess (CPU: user + system of the process and its children), so start-up, imports and loading the
context cancel out; each command is run ``--runs`` times in turns and the median taken.

- **fieldeval over HTTP**: ``pytest evals -n 0`` on N EBS items asking ``mock-ok`` at a local OpenAI-compatible
  mock (``tests/mock_openai.py``, its own process, not counted) at L = 0, ``--concurrency 64``, ``--cache off
  --store none``: the project of ``bench_model_calls.py``.
- **bare pytest with pytest-json-report**: N parametrised items, each recording one property, into a JSON
  report, with fieldeval's plugin off (``-p no:fieldeval.plugin``).
- **bare urllib3**: N chat completions to the same mock from 64 threads sharing one pool, each response's JSON
  parsed.

Floor = pytest's + urllib3's; the goal is fieldeval at most 1.2 ms per item, and within 1.5x of the floor.
The offline figure (the EBS baseline at 20,000 items, all costs in) is ``bench_scale.py 20000``.

Run: ``.venv/bin/python benchmarks/bench_per_item.py [--small 1000 --large 5000 --runs 3]`` (a few minutes).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_model_calls import Server, fieldeval_project, run_fieldeval

BARE_TEST = '''
import pytest


@pytest.mark.parametrize("case", range({items}))
def test_item(case, record_property):
    record_property("score", case % 2)
'''

URLLIB3_CLIENT = '''
import json
import sys
from concurrent.futures import ThreadPoolExecutor

import urllib3

base, items, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
pool = urllib3.PoolManager(maxsize=threads)


def call(i):
    body = {"model": "mock-ok", "messages": [{"role": "system", "content": "You are an expert."},
             {"role": "user", "content": f"Sample from USA: Iowa-{i:05d}. Predict its env_broad_scale."}]}
    response = pool.request("POST", base + "/v1/chat/completions", body=json.dumps(body).encode(),
                            headers={"Content-Type": "application/json", "Authorization": "Bearer none"})
    return json.loads(response.data)["choices"][0]["message"]["content"]


with ThreadPoolExecutor(threads) as workers:
    answers = list(workers.map(call, range(items)))
assert len(answers) == items and all(answers)
'''


def child_cpu(args: list[str], **kwargs) -> float:
    """CPU seconds (user + system) of one command and its children."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(args, capture_output=True, text=True, **kwargs)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{args[:3]} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def bare_pytest(folder: Path, items: int) -> float:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "test_bare.py").write_text(BARE_TEST.replace("{items}", str(items)))
    (folder / "pytest.ini").write_text("[pytest]\n")
    return child_cpu([sys.executable, "-m", "pytest", "test_bare.py", "-q", "-p", "no:cacheprovider",
                      "-p", "no:fieldeval.plugin", "--json-report", "--json-report-file", "report.json"], cwd=folder)


def bare_urllib3(folder: Path, server: Server, items: int, threads: int) -> float:
    script = folder / "client.py"
    script.write_text(URLLIB3_CLIENT)
    return child_cpu([sys.executable, str(script), server.base, str(items), str(threads)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=1_000)
    parser.add_argument("--large", type=int, default=5_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--runs", type=int, default=3, help="runs of each command, in turns (default: 3)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-per-item-"))
    server = Server(folder)
    sizes = [args.small, args.large]
    try:
        projects = {n: (folder / f"fieldeval-{n}", fieldeval_project(folder / f"fieldeval-{n}", server, n))
                    for n in sizes}
        commands = {}
        for n in sizes:
            commands["fieldeval -n 0 over HTTP", n] = (
                lambda n=n: run_fieldeval(projects[n][0], projects[n][1], "0", args.concurrency)[0])
            commands["bare pytest + json-report", n] = lambda n=n: bare_pytest(folder / f"bare-{n}", n)
            commands[f"bare urllib3, {args.concurrency} threads", n] = (
                lambda n=n: bare_urllib3(folder, server, n, args.concurrency))
        costs: dict[tuple[str, int], list[float]] = {}
        for _ in range(args.runs):
            for key, command in commands.items():
                server.reset(0.0)
                costs.setdefault(key, []).append(command())
    finally:
        server.close()
    marginal = {}
    for name in dict.fromkeys(name for name, _ in commands):
        small, large = (statistics.median(costs[name, n]) for n in sizes)
        marginal[name] = (large - small) / (args.large - args.small) * 1000
        print(f"{name:<32} {small:6.2f} CPU-s at {args.small:,}, {large:6.2f} at {args.large:,}: "
              f"{marginal[name]:5.2f} ms per added item (median of {args.runs})")
    ours, pytest_floor, http_floor = marginal.values()
    floor = pytest_floor + http_floor
    print(f"floor (pytest + HTTP): {floor:.2f} ms per item; fieldeval {ours:.2f} ms = {ours / floor:.2f}x the floor "
          f"(goal: at most 1.2 ms and 1.5x)")


if __name__ == "__main__":
    main()
