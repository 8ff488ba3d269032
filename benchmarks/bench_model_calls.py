"""Model calls over real HTTP: the latency part of a run measured at the server, and CPU-seconds against peers.

A local OpenAI-compatible server (``tests/mock_openai.py``, its own process, so
its CPU is not counted) answers every chat completion after L seconds and
records, on its own clock, when the first request started and the last
response ended.

(a) Latency: N EBS items at L = 0.5 s, ``--concurrency C``, with ``-n 0``,
    ``-n 2``, ``-n 8`` and ``-n 8 --workers-as-given``. The spread from the first request's start to the last response's
    end at the server, against the ideal ceil(N/C)*L (target <= 1.2x); the most
    calls the server saw in flight; and the shutdown: from the last response to
    the end of the pytest process (target < 2 s).
(b) Cost: N items at L = 0, C in flight, as CPU-seconds of the whole tool
    (its process and every child it waited for): fieldeval ``-n 0`` and
    ``-n 2``, inspect_ai and promptfoo, when installed (``--inspect PYTHON``:
    a Python with inspect-ai; ``--promptfoo DIR``: a folder with
    ``node_modules/.bin/promptfoo``). Targets: fieldeval <= 0.5x inspect_ai and
    <= promptfoo. fieldeval's figure is its whole run: pytest start-up, loading
    the EBS context, scoring each item, the report; the peers score with a
    substring check. A tool that did not send one request per item is not counted.

Peers, outside the project's dependencies: ``python3 -m venv /work/peers/venv &&
/work/peers/venv/bin/pip install inspect-ai openai``; ``npm install promptfoo@0.120.0``
in /work/peers/pf120 (0.120 is the last release for Node 20; its package misses
``drizzle/`` at the top, so link it: ``ln -s dist/drizzle node_modules/promptfoo/drizzle``).

Run: ``.venv/bin/python benchmarks/bench_model_calls.py --items 1000 --concurrency 64
--inspect /work/peers/venv/bin/python --promptfoo /work/peers/pf`` (a few minutes).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.conftest import TINY_ENUMS, TINY_SELECTOR  # noqa: E402
from tests.ebs_project import _case  # noqa: E402
from tests.mock_openai import extra_models_yaml  # noqa: E402


class Server:
    """The mock server in a process of its own."""

    def __init__(self, folder: Path) -> None:
        port_file = folder / "port"
        self.process = subprocess.Popen([sys.executable, str(ROOT / "tests" / "mock_openai.py"), str(port_file)])
        for _ in range(200):
            if port_file.is_file() and port_file.read_text():
                break
            time.sleep(0.05)
        self.port = int(port_file.read_text())
        self.base = f"http://127.0.0.1:{self.port}"

    def reset(self, delay: float) -> None:
        request = urllib.request.Request(f"{self.base}/reset", data=json.dumps({"delay": delay}).encode(), method="POST")
        urllib.request.urlopen(request).read()

    def stats(self) -> dict:
        return json.loads(urllib.request.urlopen(f"{self.base}/stats").read())

    def close(self) -> None:
        self.process.kill()
        self.process.wait()


def measured(args: list[str], *, cwd: Path, env: dict, done_when=None) -> tuple[float, float, float]:
    """(CPU-seconds of the process and its children, wall seconds, monotonic clock at exit) of one command.

    ``done_when``: a check that the work was done, for a tool that exits non-zero after finishing it.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    ended = time.monotonic()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0 and done_when is not None and done_when():
        print(f"  ({Path(args[0]).name} finished its work but exited {done.returncode}: "
              f"{(done.stdout + done.stderr).strip().splitlines()[-1][:120] if (done.stdout + done.stderr).strip() else ''})")
    elif done.returncode != 0:
        raise SystemExit(f"{args[0]} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, ended - start, ended


def fieldeval_project(folder: Path, server: Server, items: int) -> dict:
    """An EBS project asking ``mock-ok`` at the server; returns the environment to run it in."""
    (folder / "evals").mkdir(parents=True)
    (folder / "evals" / "test_ebs.py").write_text((ROOT / "evals" / "test_ebs.py").read_text())
    (folder / "pytest.ini").write_text("[pytest]\n")
    suite = {"name": "bench", "template": "predict_ebs",
             "templates": {"predict_ebs": {"system": "You are an expert.", "prompt": "{input}"}},
             "cases": [_case(f"Iowa-{i:05d}", "soil_data", "cropland biome [ENVO:01000245]") for i in range(items)]}
    (folder / "suite.yaml").write_text(yaml.safe_dump(suite))
    (folder / "llm").mkdir()
    (folder / "llm" / "extra-openai-models.yaml").write_text(extra_models_yaml(server.port, names=("mock-ok",)))
    return {**os.environ, "LLM_USER_PATH": str(folder / "llm")}


def run_fieldeval(folder: Path, env: dict, workers: str, concurrency: int) -> tuple[float, float, float]:
    args = [sys.executable, "-m", "pytest", "evals", "--model", "mock-ok", "--ebs-suite", "suite.yaml",
            "--ontology", TINY_SELECTOR, "--enum-dir", str(TINY_ENUMS), "--cache", "off", "--store", "none",
            "-p", "no:cacheprovider", "-q", "-n", *workers.split(), "--concurrency", str(concurrency)]
    return measured(args, cwd=folder, env=env)


INSPECT_TASK = '''
from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import includes
from inspect_ai.solver import generate, system_message


@task
def bench():
    samples = [Sample(input=f"Sample from USA: Iowa-{i:05d}. Predict its env_broad_scale.",
                      target="cropland biome") for i in range({items})]
    return Task(dataset=samples, solver=[system_message("You are an expert."), generate()], scorer=includes())
'''


def run_inspect(python: str, folder: Path, server: Server, items: int, concurrency: int):
    (folder / "task.py").write_text(INSPECT_TASK.replace("{items}", str(items)))
    # openai-api/<service>/<model>: inspect's OpenAI-compatible provider (chat completions), MOCK_* settings
    env = {**os.environ, "MOCK_API_KEY": "none", "MOCK_BASE_URL": f"{server.base}/v1",
           "INSPECT_LOG_DIR": str(folder / "logs")}
    args = [python, "-m", "inspect_ai", "eval", "task.py", "--model", "openai-api/mock/mock-ok", "--max-connections",
            str(concurrency), "--display", "none", "--max-retries", "0"]
    return measured(args, cwd=folder, env=env)


def run_promptfoo(pf_dir: Path, folder: Path, server: Server, items: int, concurrency: int):
    config = {
        "prompts": [json.dumps([{"role": "system", "content": "You are an expert."},
                                {"role": "user", "content": "Sample from USA: {{place}}. Predict its env_broad_scale."}])],
        "providers": [{"id": "openai:chat:mock-ok", "config": {"apiBaseUrl": f"{server.base}/v1", "apiKey": "none"}}],
        "tests": [{"vars": {"place": f"Iowa-{i:05d}"}, "assert": [{"type": "contains", "value": "cropland biome"}]}
                  for i in range(items)],
    }
    (folder / "promptfooconfig.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, "PROMPTFOO_DISABLE_TELEMETRY": "1", "PROMPTFOO_DISABLE_UPDATE": "1",
           "PROMPTFOO_CONFIG_DIR": str(folder / "pfconfig"), "OPENAI_API_KEY": "none", "NO_COLOR": "1"}
    args = [str(pf_dir / "node_modules" / ".bin" / "promptfoo"), "eval", "-c", "promptfooconfig.yaml",
            "--max-concurrency", str(concurrency), "--no-cache", "--no-progress-bar", "--no-table",
            "-o", str(folder / "out.json")]

    def scored_all() -> bool:  # promptfoo 0.120 on Node 20 may crash in its logger after writing the results
        out = folder / "out.json"
        return out.is_file() and json.loads(out.read_text())["results"]["stats"]["successes"] == items

    return measured(args, cwd=folder, env=env, done_when=scored_all)


def latency(server: Server, items: int, concurrency: int, delay: float) -> None:
    folder = Path(tempfile.mkdtemp(prefix="bench-calls-"))
    env = fieldeval_project(folder, server, items)
    ideal = math.ceil(items / concurrency) * delay
    print(f"(a) {items} EBS items over HTTP, L = {delay} s, --concurrency {concurrency}; "
          f"ideal ceil(N/C)*L = {ideal:.1f} s")
    for workers in ("0", "2", "8", "8 --workers-as-given"):
        server.reset(delay)
        cpu, wall, ended = run_fieldeval(folder, env, workers, concurrency)
        seen = server.stats()
        spread = seen["last_end"] - seen["first_start"]
        # pytest-json-report stamps the report when the session finishes, i.e. after the last item (wall clock)
        finished = json.loads((folder / "reports" / "report.json").read_text())["created"]
        finished_mono = finished - (time.time() - time.monotonic())
        print(f"  -n {workers}: first request to last response {spread:.2f} s = {spread / ideal:.2f}x ideal "
              f"(target <= 1.2x); most in flight {seen['max_in_flight']}; requests {seen['requests']}; "
              f"last item done {finished_mono - seen['last_end']:.2f} s after the last response; "
              f"shutdown after the last item {ended - finished_mono:.2f} s (target < 2 s)")


def cost(server: Server, items: int, concurrency: int, inspect: str | None, promptfoo: str | None) -> None:
    """CPU-seconds per tool; a tool that did not send one request per item is reported as failed, not timed."""
    print(f"(b) CPU-seconds for {items} items over HTTP at L = 0, {concurrency} in flight")
    rows: dict[str, float] = {}
    folder = Path(tempfile.mkdtemp(prefix="bench-calls-"))
    env = fieldeval_project(folder, server, items)
    for workers in ("0", "2"):
        server.reset(0.0)
        cpu, wall, _ = run_fieldeval(folder, env, workers, concurrency)
        rows[f"fieldeval -n {workers}"] = cpu
        print(f"  fieldeval -n {workers}: {cpu:.1f} CPU-s, wall {wall:.1f} s, "
              f"requests {server.stats()['requests']}")
    for name, runner, where in (("inspect_ai", run_inspect, inspect), ("promptfoo", run_promptfoo, promptfoo)):
        if not where:
            print(f"  {name}: not run (pass --{name.split('_')[0]})")
            continue
        server.reset(0.0)
        peer = Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
        cpu, wall, _ = runner(where if name == "inspect_ai" else Path(where), peer, server, items, concurrency)
        requests = server.stats()["requests"]
        if requests != items:
            print(f"  {name}: FAILED: {requests} requests for {items} items; not counted")
            continue
        rows[name] = cpu
        print(f"  {name}: {cpu:.1f} CPU-s, wall {wall:.1f} s, requests {requests}")
    for peer in ("inspect_ai", "promptfoo"):
        if peer in rows:
            ratios = ", ".join(f"{k} {v / rows[peer]:.2f}x" for k, v in rows.items() if k.startswith("fieldeval"))
            print(f"  against {peer}: {ratios}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.5)
    parser.add_argument("--inspect", help="a Python interpreter with inspect-ai installed")
    parser.add_argument("--promptfoo", help="a folder holding node_modules/.bin/promptfoo")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--skip-cost", action="store_true")
    options = parser.parse_args()
    server = Server(Path(tempfile.mkdtemp(prefix="bench-server-")))
    try:
        if not options.skip_latency:
            latency(server, options.items, options.concurrency, options.latency)
        if not options.skip_cost:
            cost(server, options.items, options.concurrency, options.inspect, options.promptfoo)
    finally:
        server.close()


if __name__ == "__main__":
    main()
