"""``fieldeval score ebs`` end to end: its marginal cost per row against the per-row oaklib loop.

Marginal cost = (time for 44,000 rows - time for 4,400 rows) / 39,600, each
time the whole command (``python -m fieldeval.cli score ebs``, reading and
writing the TSV) run as a subprocess, so start-up and the ontology load
cancel out. The rows are the suite's 100 cases against answer variants taken
in turn, as an llm-matrix results.tsv. The per-row oaklib loop is the one in
``bench_ebs_scoring.py``, on the same ENVO.

Run: ``FIELDEVAL_DATA_DIR=../shared/data .venv/bin/python benchmarks/bench_ebs_cli.py``
"""

from __future__ import annotations

import csv
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_ebs_scoring import PREDICTIONS, obvious_score

from fieldeval.benchmarks.ebs.enums import load_enums
from fieldeval.benchmarks.ebs.suite import load_suite
from fieldeval.ontology import default_selector

SMALL, LARGE = 4_400, 44_000
MODELS = ["model-a", "model-b"]


def write_results(path: Path, n: int) -> None:
    """An llm-matrix results.tsv of ``n`` rows: each case in turn, the answer variants cycling."""
    cases = load_suite().cases
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle, delimiter="\t")
        writer.writerow(["model", "case_id", "case_ideal", "response_text", "sampleData"])
        for i in range(n):
            case = cases[i % len(cases)]
            answer = PREDICTIONS[(i // len(cases) + i) % len(PREDICTIONS)]
            writer.writerow([MODELS[i % len(MODELS)], case.case_id, case.ideal, answer, case.template])


def command_seconds(path: Path, runs: int = 3) -> float:
    """The fastest of ``runs`` whole ``fieldeval score ebs`` commands on ``path``."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "fieldeval.cli", "score", "ebs", str(path), "-o", str(path.parent)],
                       check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return min(times)


def oaklib_us_per_row() -> float:
    """The per-row oaklib loop over the suite's cases and every answer variant."""
    from oaklib import get_adapter

    enums = load_enums()
    rows = [(p, case.ideal, enums.get(case.template)) for case in load_suite().cases for p in PREDICTIONS]
    adapter = get_adapter(default_selector())
    adapter.label("ENVO:00000428")  # parse the file before timing
    start = time.perf_counter()
    for response, ideal, allowed in rows:
        obvious_score(adapter, response, ideal, allowed)
    return (time.perf_counter() - start) / len(rows) * 1e6


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        timings = {}
        for n in [SMALL, LARGE]:
            folder = Path(tmp) / str(n)
            folder.mkdir()
            write_results(folder / "results.tsv", n)
            timings[n] = command_seconds(folder / "results.tsv")
    marginal = (timings[LARGE] - timings[SMALL]) / (LARGE - SMALL) * 1e6
    oaklib = oaklib_us_per_row()
    print(f"fieldeval score ebs, {SMALL:,} rows:   {timings[SMALL]:8.2f} s")
    print(f"fieldeval score ebs, {LARGE:,} rows:  {timings[LARGE]:8.2f} s")
    print(f"CLI marginal cost:              {marginal:8.1f} us/row")
    print(f"per-row oaklib loop:            {oaklib:8.1f} us/row")
    print(f"ratio (oaklib / CLI marginal):  {oaklib / marginal:8.0f}x (target: at least 100x)")


if __name__ == "__main__":
    main()
