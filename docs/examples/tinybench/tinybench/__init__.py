"""arith: add two numbers; exact match. A complete fieldeval benchmark in one screen."""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from fieldeval import Benchmark, Dashboard, Metric, RunMeta, UsageError, option, write_tsv
from fieldeval.stats import mean_metric


@dataclass(frozen=True)
class Case:
    """One sum: the prompt and the answer."""

    a: int
    b: int

    @property
    def test_id(self) -> str:
        return f"{self.a}+{self.b}"

    @property
    def prompt(self) -> str:
        return f"What is {self.a} + {self.b}? Answer with the number only."


@dataclass(frozen=True)
class ArithOptions:
    """The benchmark's own options; each becomes a pytest option in its --help group."""

    cases: int = field(default=12, metadata=option("--arith-cases", help="how many sums to ask (default: 12)"))


def load(options: ArithOptions) -> tuple[Case, ...]:
    """The context: here simply the cases."""
    if options.cases < 1:
        raise UsageError(f"--arith-cases {options.cases}: must be at least 1")
    return tuple(Case(a, 2 * a + 1) for a in range(options.cases))


def aggregate(rows: list[dict], *, seed: int, resamples: int) -> dict:
    """Accuracy with its seeded bootstrap ci95."""
    return {"accuracy": mean_metric([float(r["correct"]) for r in rows], seed=seed, resamples=resamples)}


def write_outputs(rows: list[dict], reports_dir: Path) -> list[Path]:
    """reports/arith/answers.tsv; write_tsv quotes any text a model answers, so the table reads back."""
    path = Path(reports_dir) / "arith" / "answers.tsv"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_tsv(path, ["model", "case", "answer", "correct"], ([r["model"], r["case"], r["answer"], r["correct"]] for r in rows))
    return [path]


def _score(args) -> int:
    """``fieldeval score arith ANSWERS_TSV``: accuracy of a written table."""
    path = Path(args.answers_tsv)
    if not path.is_file():
        raise UsageError(f"ANSWERS_TSV {path}: no such file; pass reports/arith/answers.tsv")
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    correct = sum(row["correct"] == "True" for row in rows)
    print(f"arith accuracy {correct / max(len(rows), 1):.3f} ({correct}/{len(rows)})")
    return 0


def register_cli(groups) -> None:
    parser = groups.score.add_parser("arith", help="accuracy of an arith answers table")
    parser.add_argument("answers_tsv", metavar="ANSWERS_TSV")
    parser.set_defaults(func=_score)


BENCHMARK = Benchmark(
    name="arith",
    title="add two numbers, exact match",
    metrics=(Metric("accuracy"),),
    baseline="arith-baseline",
    options=ArithOptions,
    load=load,
    cases=lambda cases: cases,
    aggregate=aggregate,
    write_outputs=write_outputs,
    register_cli=register_cli,
    # the version of the data, never of an option: a new corpus_version marks the runs of older ones "(legacy)"
    run_meta=lambda cases: RunMeta(corpus_version="arith-v1"),
    dashboard=Dashboard(),  # the headline chart (accuracy with its ci95) across runs is drawn for every benchmark
)
