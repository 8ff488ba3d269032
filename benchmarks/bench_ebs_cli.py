"""``fieldeval score ebs`` end to end on distinct rows: marginal cost per row against the per-row oaklib loop.

Marginal cost = (cost of LARGE rows - cost of SMALL rows) / (LARGE - SMALL),
each the whole command (``python -m fieldeval.cli score ebs``, reading and
writing the TSV) run as a subprocess, so start-up and the ontology load
cancel out. Cost is the child's CPU time (user + system, the fastest of three
runs), which a loaded machine disturbs far less than wall time; wall time is
printed too.

Every row of the distinct workload is a different (response, ideal,
template) triple: the suite's 100 cases in turn, each answered by a real ENVO
term (``label [CURIE]`` from the ontology, a fixed shuffle of its labelled
terms), so the CLI's de-duplication cannot help. The replicated workload
(the suite's cases against 8 fixed answers, at most 800 distinct triples) is
measured too, and the ratio of the two is reported as the de-duplication
gain, separately. The per-row oaklib loop (``bench_ebs_scoring.obvious_score``)
scores a sample of the same distinct rows on the same ENVO.

Run: ``FIELDEVAL_DATA_DIR=../shared/data nice -n 10 .venv/bin/python benchmarks/bench_ebs_cli.py [--large 44000]``
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_ebs_scoring import PREDICTIONS, obvious_score

from fieldeval.benchmarks.ebs.enums import load_enums
from fieldeval.benchmarks.ebs.suite import load_suite
from fieldeval.ontology import default_selector, load_index

MODELS = ["model-a", "model-b"]
OAKLIB_SAMPLE = 2_000


def envo_answers() -> list[str]:
    """Every labelled ENVO term as ``label [CURIE]``, in a fixed shuffled order."""
    index = load_index()
    terms = sorted(f"{label} [{curie}]" for curie, label in index.labels.items()
                   if curie.startswith("ENVO:") and "[" not in label and "\t" not in label and "\n" not in label)
    random.Random(19).shuffle(terms)
    return terms


def distinct_rows(n: int) -> list[tuple[str, str, str, str, str]]:
    """``n`` rows (model, case_id, ideal, response, template), no two with the same (response, ideal, template)."""
    cases = load_suite().cases
    answers = envo_answers()
    rows, seen = [], set()
    for k in range(len(cases) * len(answers)):  # (case, answer) pairs in turn; cases with one ideal and template
        case = cases[k % len(cases)]  # share their triples, so a repeat is skipped
        answer = answers[k // len(cases)]
        if (answer, case.ideal, case.template) in seen:
            continue
        seen.add((answer, case.ideal, case.template))
        rows.append((MODELS[len(rows) % len(MODELS)], case.case_id, case.ideal, answer, case.template))
        if len(rows) == n:
            break
    if len(rows) < n:
        raise SystemExit(f"--large {n}: the suite and ENVO give only {len(rows)} distinct rows")
    return rows


def replicated_rows(n: int) -> list[tuple[str, str, str, str, str]]:
    """``n`` rows of the suite's cases against the 8 fixed answers (at most 800 distinct triples)."""
    cases = load_suite().cases
    rows = []
    for i in range(n):
        case = cases[i % len(cases)]
        answer = PREDICTIONS[(i // len(cases) + i) % len(PREDICTIONS)]
        rows.append((MODELS[i % len(MODELS)], case.case_id, case.ideal, answer, case.template))
    return rows


def write_results(path: Path, rows) -> None:
    """An llm-matrix results.tsv of ``rows``."""
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle, delimiter="\t")
        writer.writerow(["model", "case_id", "case_ideal", "response_text", "sampleData"])
        for model, case_id, ideal, answer, template in rows:
            writer.writerow([model, case_id, ideal, answer, template])


def command_cost(path: Path, runs: int = 3) -> tuple[float, float]:
    """(CPU seconds, wall seconds): the fastest of ``runs`` whole ``fieldeval score ebs`` commands on ``path``."""
    cpu, wall = [], []
    for _ in range(runs):
        before = os.times()
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "fieldeval.cli", "score", "ebs", str(path), "-o", str(path.parent)],
                       check=True, stdout=subprocess.DEVNULL)
        wall.append(time.perf_counter() - start)
        after = os.times()
        cpu.append(after.children_user - before.children_user + after.children_system - before.children_system)
    return min(cpu), min(wall)


def oaklib_us_per_row(rows) -> float:
    """The per-row oaklib loop over an evenly spaced sample of ``rows``."""
    from oaklib import get_adapter

    enums = load_enums()
    step = max(1, len(rows) // OAKLIB_SAMPLE)
    sample = [(answer, ideal, enums.get(template)) for _, _, ideal, answer, template in rows[::step]]
    adapter = get_adapter(default_selector())
    adapter.label("ENVO:00000428")  # parse the file before timing
    start = time.process_time()
    for response, ideal, allowed in sample:
        obvious_score(adapter, response, ideal, allowed)
    return (time.process_time() - start) / len(sample) * 1e6


def marginal(kind: str, rows_for, small: int, large: int, tmp: Path) -> tuple[float, float, dict]:
    """Marginal CPU and wall microseconds per row of one workload, and the raw costs."""
    costs = {}
    for n in [small, large]:
        folder = tmp / f"{kind}-{n}"
        folder.mkdir()
        write_results(folder / "results.tsv", rows_for(n))
        costs[n] = command_cost(folder / "results.tsv")
    cpu = (costs[large][0] - costs[small][0]) / (large - small) * 1e6
    wall = (costs[large][1] - costs[small][1]) / (large - small) * 1e6
    return cpu, wall, costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=4_400)
    parser.add_argument("--large", type=int, default=44_000)
    args = parser.parse_args()
    load_index()  # build the cached index once, outside the timings
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        d_cpu, d_wall, d_costs = marginal("distinct", distinct_rows, args.small, args.large, tmp)
        r_cpu, r_wall, r_costs = marginal("replicated", replicated_rows, args.small, args.large, tmp)
    oaklib = oaklib_us_per_row(distinct_rows(args.large))
    for kind, costs in [("distinct", d_costs), ("replicated", r_costs)]:
        for n, (cpu, wall) in costs.items():
            print(f"fieldeval score ebs, {n:>7,} {kind:<10} rows: {cpu:7.2f} CPU s {wall:7.2f} wall s")
    print(f"CLI marginal cost, distinct rows:        {d_cpu:8.1f} us/row CPU ({d_wall:.1f} wall; target: at most 15)")
    print(f"CLI marginal cost, replicated rows:      {r_cpu:8.1f} us/row CPU ({r_wall:.1f} wall)")
    print(f"de-duplication gain (distinct / replicated): {d_cpu / r_cpu:6.1f}x")
    print(f"per-row oaklib loop, distinct rows:      {oaklib:8.1f} us/row CPU")
    print(f"ratio (oaklib / CLI marginal, distinct): {oaklib / d_cpu:8.0f}x (target: at least 100x)")


if __name__ == "__main__":
    main()
