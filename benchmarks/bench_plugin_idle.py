"""What an installed fieldeval costs a pytest session that runs no eval: a one-test project, with and without
the plugin.

The same project (one file, one passing test, no conftest) is run as ``python -m pytest`` in a subprocess, in
turns: with fieldeval's pytest11 plugin loaded, and with ``-p no:fieldeval.plugin``. Cost is the child's CPU
time (user + system) and its peak resident memory, the median of the runs; the ratio of the two medians is
the figure (the goal is at most 1.1x). The modules the plugin imported are listed, so a heavy import that
comes back shows by name.

Run: ``nice -n 10 .venv/bin/python benchmarks/bench_plugin_idle.py [--runs 9]``
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HEAVY = ("numpy", "sqlalchemy", "pandas", "llm", "pydantic", "oaklib", "sklearn", "fieldeval.run.session",
         "fieldeval.calls.client", "fieldeval.store.core")
PROBE = """
import sys
import pytest
code = pytest.main(sys.argv[1:])
heavy = sorted(m for m in {heavy!r} if m in sys.modules)
print("HEAVY", ",".join(heavy))
raise SystemExit(code)
"""


def one_run(project: Path, *extra: str) -> tuple[float, str]:
    """(CPU seconds, the heavy modules imported) of one pytest session of ``project``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-c", PROBE.format(heavy=HEAVY), "-q", "-p", "no:cacheprovider", *extra],
                          cwd=project, capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"pytest failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    heavy = next((line.split(" ", 1)[1] for line in done.stdout.splitlines() if line.startswith("HEAVY")), "")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, heavy.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9, help="sessions of each kind, in turns (default: 9)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        (project / "test_one.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
        one_run(project)  # warm the file cache and the bytecode of both kinds
        one_run(project, "-p", "no:fieldeval.plugin")
        with_cpu, without_cpu, heavy = [], [], set()
        for _ in range(args.runs):
            cpu, imported = one_run(project)
            with_cpu.append(cpu)
            heavy.add(imported)
            cpu, _ = one_run(project, "-p", "no:fieldeval.plugin")
            without_cpu.append(cpu)
        # peak memory: ru_maxrss of RUSAGE_CHILDREN is the largest child so far, so each kind is measured in a
        # process of its own
        with_mem, without_mem = _peak(project), _peak(project, "-p", "no:fieldeval.plugin")
    a, b = statistics.median(with_cpu), statistics.median(without_cpu)
    print(f"one-test project, {args.runs} sessions of each, in turns (median CPU, user + system)")
    print(f"  with fieldeval's plugin:     {a:.3f} s   peak {with_mem / 1024:.0f} MB")
    print(f"  -p no:fieldeval.plugin:      {b:.3f} s   peak {without_mem / 1024:.0f} MB")
    print(f"  ratio: {a / b:.2f}x CPU, {with_mem / without_mem:.2f}x memory (goal: at most 1.1x)")
    print(f"  heavy modules the plugin imported: {', '.join(sorted(heavy - {''})) or 'none'}")


def _peak(project: Path, *extra: str) -> int:
    """Peak resident KB of one session, measured in a fresh Python that runs only it."""
    code = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, capture_output=True); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    done = subprocess.run([sys.executable, "-c", code, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *extra], cwd=project, capture_output=True, text=True, check=True)
    return int(done.stdout.strip())


if __name__ == "__main__":
    main()
