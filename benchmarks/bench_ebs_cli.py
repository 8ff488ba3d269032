"""``fieldeval score ebs`` end to end on two workloads of distinct rows: marginal cost per row against the per-row
oaklib loop on a sample of the same rows.

Marginal cost = (cost of LARGE rows - cost of SMALL rows) / (LARGE - SMALL),
each the whole command (``python -m fieldeval.cli score ebs``, reading and
writing the TSV) run as a subprocess, so start-up and the ontology load
cancel out. Cost is the child's CPU time (user + system), the median of
``--runs`` runs taken in turns with the other tables, which a loaded machine
disturbs far less than wall time; wall time is printed too.

Workloads, each with no (response, ideal, template) twice, so the CLI's
de-duplication cannot help:

- **answers**: rows distinct in their answers: the suite's 100 cases in turn,
  each answered by a real ENVO term (``label [CURIE]``, a fixed shuffle of its
  labelled terms); columns model, case_id, case_ideal, response_text,
  sampleData.
- **upstream**: rows whose ideal (an ENVO biome), template (the eight
  sampleData packages, with and without a value set) and answer (an ENVO term)
  all vary, in the layout of upstream's results tables (nmdc-ai-eval's
  ``tests/fixtures/mini_results.tsv``): model, case_ideal, response_text,
  case_original_input, sampleData, where case_original_input is the case's
  ``original_input`` dict as text (study name with its sample tag, sampleData,
  env_broad_scale), different on every row.

The replicated workload (the suite's cases against 8 fixed answers, at most
800 distinct triples) is measured too; its ratio to the answers workload is
reported as the de-duplication gain, apart. The per-row oaklib loop
(``bench_ebs_scoring.obvious_score``) scores an evenly spaced sample of each
workload's large table on the same ENVO.

Run: ``FIELDEVAL_DATA_DIR=../shared/data nice -n 10 .venv/bin/python benchmarks/bench_ebs_cli.py [--large 44000]``
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_ebs_scoring import PREDICTIONS, obvious_score

from fieldeval.benchmarks.ebs.enums import load_enums
from fieldeval.benchmarks.ebs.suite import SUITE_FILE, load_suite
from fieldeval.data import fetch
from fieldeval.inputs import read_yaml
from fieldeval.ontology import default_selector, load_index

MODELS = ["model-a", "model-b"]
OAKLIB_SAMPLE = 2_000
BIOME = "ENVO:00000428"
SITES = ["AY23", "BART", "CPER", "DSNY", "HARV", "JORN", "KONZ", "NIWO", "OSBS", "SRER", "TALL", "WOOD"]
TEMPLATES = ["soil_data", "water_data", "sediment_data", "plant_associated_data", "air_data",
             "host_associated_data", "misc_envs_data", "metagenome_sequencing_non_interleaved_data"]
ANSWER_COLUMNS = ["model", "case_id", "case_ideal", "response_text", "sampleData"]
UPSTREAM_COLUMNS = ["model", "case_ideal", "response_text", "case_original_input", "sampleData"]


def envo_terms(*, under: str | None = None) -> list[str]:
    """Every labelled ENVO term (below ``under`` when given) as ``label [CURIE]``, in a fixed shuffled order."""
    index = load_index()
    terms = sorted(f"{label} [{curie}]" for curie, label in index.labels.items()
                   if curie.startswith("ENVO:") and "[" not in label and "\t" not in label and "\n" not in label
                   and (under is None or under in index.ancestors.get(curie, ())))
    random.Random(19).shuffle(terms)
    return terms


def answer_rows(n: int) -> list[list[str]]:
    """``n`` rows (model, case_id, ideal, response, template), no two with the same (response, ideal, template)."""
    cases = load_suite().cases
    answers = envo_terms()
    rows, seen = [], set()
    for k in range(len(cases) * len(answers)):  # (case, answer) pairs in turn; cases with one ideal and template
        case = cases[k % len(cases)]  # share their triples, so a repeat is skipped
        answer = answers[k // len(cases)]
        if (answer, case.ideal, case.template) in seen:
            continue
        seen.add((answer, case.ideal, case.template))
        rows.append([MODELS[len(rows) % len(MODELS)], case.case_id, case.ideal, answer, case.template])
        if len(rows) == n:
            break
    if len(rows) < n:
        raise SystemExit(f"--large {n}: the suite and ENVO give only {len(rows)} distinct rows")
    return rows


def upstream_rows(n: int) -> list[list[str]]:
    """``n`` rows (model, ideal, response, original_input, template) of upstream's layout: each case a
    different (study, template, ideal), drawn at random, answered by both models, no (answer, ideal, template)
    twice."""
    rng = random.Random(23)
    suite = read_yaml(fetch(SUITE_FILE), what="the pinned suite")
    studies = sorted({case["original_input"]["study_name"] for case in suite["cases"]})
    neon = next(study for study in studies if study.endswith("(AY23_plt05)"))  # one name per NEON site and plot
    studies += [neon.replace("(AY23_plt05)", f"({site}_plt{plot:02d})") for site in SITES for plot in range(1, 11)]
    ideals, answers = envo_terms(under=BIOME), envo_terms()
    rows, cases, seen = [], set(), set()
    while len(rows) < n:
        case = (rng.choice(studies), rng.choice(TEMPLATES), rng.choice(ideals))
        if case in cases:
            continue
        cases.add(case)
        study, template, ideal = case
        original = str({"study_name": study, "sampleData": template, "env_broad_scale": ideal})
        for model in MODELS[:n - len(rows)]:
            answer = ""
            while not answer or (answer, ideal, template) in seen:  # half of them biomes
                answer = rng.choice(ideals) if rng.random() < 0.5 else rng.choice(answers)
            seen.add((answer, ideal, template))
            rows.append([model, ideal, answer, original, template])
    return rows


def replicated_rows(n: int) -> list[list[str]]:
    """``n`` rows of the suite's cases against the 8 fixed answers (at most 800 distinct triples)."""
    cases = load_suite().cases
    rows = []
    for i in range(n):
        case = cases[i % len(cases)]
        answer = PREDICTIONS[(i // len(cases) + i) % len(PREDICTIONS)]
        rows.append([MODELS[i % len(MODELS)], case.case_id, case.ideal, answer, case.template])
    return rows


# workload -> (its rows, its header, the (response, ideal, template) positions in a row)
WORKLOADS = {
    "answers": (answer_rows, ANSWER_COLUMNS, (3, 2, 4)),
    "upstream": (upstream_rows, UPSTREAM_COLUMNS, (2, 1, 4)),
    "replicated": (replicated_rows, ANSWER_COLUMNS, (3, 2, 4)),
}


def write_results(path: Path, header: list[str], rows) -> None:
    """A results.tsv of ``rows``, as upstream writes it."""
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)


def command_cost(path: Path) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one whole ``fieldeval score ebs`` command on ``path``."""
    before = os.times()
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "fieldeval.cli", "score", "ebs", str(path), "-o", str(path.parent)],
                   check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = os.times()
    return after.children_user - before.children_user + after.children_system - before.children_system, wall


def oaklib_us_per_row(adapter, rows, positions: tuple[int, int, int]) -> float:
    """The per-row oaklib loop over an evenly spaced sample of ``rows``."""
    enums = load_enums()
    step = max(1, len(rows) // OAKLIB_SAMPLE)
    r, i, t = positions
    sample = [(row[r], row[i], enums.get(row[t])) for row in rows[::step]]
    start = time.process_time()
    for response, ideal, allowed in sample:
        obvious_score(adapter, response, ideal, allowed)
    return (time.process_time() - start) / len(sample) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=4_400)
    parser.add_argument("--large", type=int, default=44_000)
    parser.add_argument("--runs", type=int, default=5, help="runs of each command, in turns (default: 5)")
    parser.add_argument("--workload", action="append", choices=list(WORKLOADS),
                        help="measure only these (repeatable; default: all)")
    args = parser.parse_args()
    names = args.workload or list(WORKLOADS)
    load_index()  # build the cached index once, outside the timings
    costs: dict[tuple[str, int], list[tuple[float, float]]] = {}
    large_rows = {}
    with tempfile.TemporaryDirectory() as folder:
        paths = {}
        for name in names:
            rows_for, header, _ = WORKLOADS[name]
            for n in [args.small, args.large]:
                rows = rows_for(n)
                paths[name, n] = Path(folder) / f"{name}-{n}" / "results.tsv"
                paths[name, n].parent.mkdir()
                write_results(paths[name, n], header, rows)
            large_rows[name] = rows
        for _ in range(args.runs):
            for key, path in paths.items():
                costs.setdefault(key, []).append(command_cost(path))
    from oaklib import get_adapter

    adapter = get_adapter(default_selector())
    adapter.label(BIOME)  # parse the file before timing
    marginal = {}
    for name in names:
        medians = {n: tuple(statistics.median(run[k] for run in costs[name, n]) for k in (0, 1))
                   for n in [args.small, args.large]}
        for n, (cpu, wall) in medians.items():
            print(f"fieldeval score ebs, {n:>7,} {name:<10} rows: {cpu:7.2f} CPU s {wall:7.2f} wall s "
                  f"(median of {args.runs})")
        marginal[name] = [(medians[args.large][k] - medians[args.small][k]) / (args.large - args.small) * 1e6
                          for k in (0, 1)]
    for name in names:
        cpu, wall = marginal[name]
        print(f"CLI marginal cost, {name:<10} rows: {cpu:8.1f} us/row CPU ({wall:.1f} wall)")
        if name == "replicated":
            continue
        oaklib = oaklib_us_per_row(adapter, large_rows[name], WORKLOADS[name][2])
        print(f"  per-row oaklib loop, same rows:  {oaklib:8.1f} us/row CPU")
        print(f"  ratio (oaklib / CLI marginal):   {oaklib / cpu:8.0f}x (target: at least 100x)")
    if "answers" in marginal and "replicated" in marginal:
        print(f"de-duplication gain (answers / replicated): {marginal['answers'][0] / marginal['replicated'][0]:6.1f}x")


if __name__ == "__main__":
    main()
