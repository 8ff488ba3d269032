"""The design card's ``pytest evals -n 8`` against one process: the offline baselines' 540 items.

Each kind is a ``python -m pytest evals ... --store none --cache off`` subprocess of the project, run in turns;
cost is the wall time and the CPU time (user + system) of the whole process tree (controller and workers), the
median of the runs. The figures are printed as ratios to ``-n 0`` beside the goals (``-n 8``: at most 1.25x the
wall and 2x the CPU; ``-n 2``: no slower). ``--workers-as-given`` kinds start the workers ``-n`` asks for, so the
cost of a worker, with one solving process and the others only scoring, shows apart. The floor is pytest's own:
540 trivial parametrised items recording one property, with pytest-json-report, at ``-n 0`` and ``-n 8``.
Every kind's report must hold the same numbers as ``-n 0``'s (timings aside), or the benchmark fails.

Run: ``nice -n 10 .venv/bin/python benchmarks/bench_workers.py [--runs 3]`` (needs ``FIELDEVAL_DATA_DIR``)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KINDS = {
    "-n 0": ["-n", "0"],
    "-n 2": ["-n", "2"],
    "-n 8": ["-n", "8"],
    "-n 2 --workers-as-given": ["-n", "2", "--workers-as-given"],
    "-n 8 --workers-as-given": ["-n", "8", "--workers-as-given"],
}
GOALS = {"-n 2": "wall at most 1.0x", "-n 8": "wall at most 1.25x, CPU at most 2x"}
TIMING = re.compile(r"time|latency|seconds|duration|(^|_)s$|elapsed|started_at|completed_at|digest")
FLOOR = """
import pytest


@pytest.mark.parametrize("i", range(540))
def test_item(i, record_property):
    record_property("value", i)
"""


def one_run(cwd: Path, args: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process and its children) of one pytest session."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=cwd,
                          capture_output=True, text=True, check=False, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"pytest {' '.join(args)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _numbers(value):
    """A report's evals without its timings (wall times and dates differ from run to run)."""
    if isinstance(value, dict):
        return {key: _numbers(item) for key, item in value.items() if not TIMING.search(key)}
    if isinstance(value, list):
        return [_numbers(item) for item in value]
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="sessions of each kind, in turns (default: 3)")
    args = parser.parse_args()
    if not os.environ.get("FIELDEVAL_DATA_DIR"):
        raise SystemExit("set FIELDEVAL_DATA_DIR to the folder holding the pinned datasets")
    with tempfile.TemporaryDirectory() as tmp:
        out, floor = Path(tmp), Path(tmp) / "floor"
        floor.mkdir()
        (floor / "test_floor.py").write_text(FLOOR)
        (floor / "pytest.ini").write_text("[pytest]\n")

        def evals(kind: str, n: int) -> list[str]:
            folder = out / f"{kind.replace(' ', '_')}-{n}"
            return ["evals", *KINDS[kind], "--store", "none", "--cache", "off", "--run-id", "run_bench_workers",
                    "--reports-dir", str(folder),
                    "--eval-report", str(folder / "report.json")]

        def floor_args(n: str) -> list[str]:
            return ["-n", n, "-p", "no:fieldeval.plugin", "--json-report", "--json-report-file",
                    str(out / f"floor-{n}.json")]

        one_run(ROOT, evals("-n 0", -1))  # warm the file cache and the bytecode
        times: dict[str, list[tuple[float, float]]] = {kind: [] for kind in [*KINDS, "floor -n 0", "floor -n 8"]}
        for n in range(args.runs):
            for kind in KINDS:
                times[kind].append(one_run(ROOT, evals(kind, n)))
            for workers in ("0", "8"):
                times[f"floor -n {workers}"].append(one_run(floor, floor_args(workers)))
        reference = _numbers(json.loads((out / "-n_0-0" / "report.json").read_text())["evals"])
        same = {kind: all(_numbers(json.loads((out / f"{kind.replace(' ', '_')}-{n}" / "report.json").read_text())
                                   ["evals"]) == reference for n in range(args.runs)) for kind in KINDS}
    medians = {kind: (statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs))
               for kind, runs in times.items()}
    wall0, cpu0 = medians["-n 0"]
    print(f"pytest evals, the offline baselines' 540 items, {args.runs} runs of each kind in turns (medians)")
    print(f"  {'kind':<26} {'wall':>7} {'CPU':>7}   {'/ -n 0':>13}   numbers as -n 0   goal")
    for kind in KINDS:
        wall, cpu = medians[kind]
        print(f"  {kind:<26} {wall:6.2f}s {cpu:6.2f}s   {wall / wall0:4.2f}x {cpu / cpu0:4.2f}x   "
              f"{'yes' if same[kind] else 'NO':<16}  {GOALS.get(kind, '')}")
    for kind in ("floor -n 0", "floor -n 8"):
        wall, cpu = medians[kind]
        print(f"  {'pytest ' + kind:<26} {wall:6.2f}s {cpu:6.2f}s   (540 trivial items with pytest-json-report)")
    if not all(same.values()):
        raise SystemExit("a kind's report holds other numbers than -n 0's")


if __name__ == "__main__":
    main()
