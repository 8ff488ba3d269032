"""``fieldeval agreement ibf GRADED.jsonl``: read a file of people's grades, score its responses, print agreement."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from fieldeval.benchmark import CliGroups
from fieldeval.errors import UsageError
from fieldeval.stats import DEFAULT_RESAMPLES, DEFAULT_SEED
from scorers.ibf import DIMENSIONS, MAX_SCORE, MIN_SCORE, REFERENCE_SCORER

JUDGED_BENCHMARKS = ("ibf",)  # the benchmarks a scorer grades on a rubric people can grade too
WHAT = "GRADED_JSONL"
LINE_SHAPE = ('write one JSON object per line: {"item_id": "...", "response": "...", '
              '"grades": {"hazard_recognition": 0-4, ...}}')


def read_graded(path: str | Path, item_ids: set[str]) -> list[tuple[str, str, dict[str, int | None]]]:
    """``(item_id, response, grades)`` of each line of a graded file, checked; a usage error naming the line.

    A grade that is null or absent is not graded (None); any other grade must be an integer 0-4.
    """
    from fieldeval.inputs import read_jsonl

    lines = []
    for number, value in read_jsonl(path, what=WHAT, hint=LINE_SHAPE):
        where = f"{WHAT} {path} line {number}"
        if not isinstance(value, dict):
            raise UsageError(f"{where}: a JSON {type(value).__name__}, not an object; {LINE_SHAPE}")
        item_id, response, grades = value.get("item_id"), value.get("response"), value.get("grades")
        if not isinstance(item_id, str) or not item_id:
            raise UsageError(f"{where}: no item_id; add the id of the corpus item the response answers")
        if not isinstance(response, str):
            raise UsageError(f"{where}: no response text; add \"response\": the text that was graded")
        if item_id not in item_ids:
            raise UsageError(f"{where}: item_id {item_id!r} is not in the corpus; fix the id, or pass "
                             "--ibf-corpus with the corpus the responses answer")
        lines.append((item_id, response, _grades(grades, where)))
    return lines


def _grades(grades: object, where: str) -> dict[str, int | None]:
    """The five grades of one line (None: not graded)."""
    example = '"grades": {"hazard_recognition": 3, "impact_reasoning": 2, ...}'
    if not isinstance(grades, dict) or not grades:
        raise UsageError(f"{where}: no grades; add {example}")
    unknown = [key for key in grades if key not in DIMENSIONS]
    if unknown:
        raise UsageError(f"{where}: grades.{unknown[0]} is not a rubric dimension; use {', '.join(DIMENSIONS)}")
    out: dict[str, int | None] = {}
    for name in DIMENSIONS:
        grade = grades.get(name)
        if grade is not None and (isinstance(grade, bool) or not isinstance(grade, int)
                                  or not MIN_SCORE <= grade <= MAX_SCORE):
            raise UsageError(f"{where}: grades.{name} {json.dumps(grade)} is not an integer "
                             f"{MIN_SCORE}-{MAX_SCORE}; write {MIN_SCORE}-{MAX_SCORE}, or null when not graded")
        out[name] = grade
    if all(grade is None for grade in out.values()):
        raise UsageError(f"{where}: every grade is null; grade at least one dimension, or drop the line")
    return out


def score_responses(lines: Sequence[tuple[str, str, Mapping]], items: Mapping, judge_model: str | None
                    ) -> dict[tuple[str, str], dict[str, int | None]]:
    """The scorer's grades of each distinct ``(item_id, response)``: the reference scorer's, or the judge's."""
    from scorers.ibf import parse_judgement, score_reference

    scored: dict[tuple[str, str], dict[str, int | None]] = {}
    for item_id, response, _ in lines:
        key = (item_id, response)
        if key in scored:
            continue
        case = items[item_id]
        if judge_model is None:
            score = score_reference(response, case.references.model_dump())
        else:
            score = parse_judgement(_judge_reply(judge_model, case, response), scorer=f"judge:{judge_model}")
        scored[key] = dict(zip(DIMENSIONS, score.values))
    return scored


def _judge_reply(judge_model: str, case, response: str) -> str:
    """The judge's reply for one response, asked as evals/test_ibf.py's solver asks it."""
    import fieldeval
    from fieldeval.benchmarks.ibf.prompts import JUDGE_SYSTEM, judge_prompt
    from fieldeval.calls.failures import ModelCallError
    from scorers.ibf import JUDGE_SCHEMA

    try:
        return fieldeval.complete(judge_model, judge_prompt(case, response), system=JUDGE_SYSTEM, temperature=0.0,
                                  schema=JUDGE_SCHEMA).text
    except ModelCallError as error:
        raise UsageError(f"--judge-model {judge_model}: no reply for item {case.id} ({error.detail}); "
                         "check the model's key and endpoint, then rerun") from None


def format_agreement(payload: Mapping, *, n_lines: int) -> list[str]:
    """The text report: one block per dimension, then notes."""
    def stat(entry: Mapping, digits: int = 2) -> str:
        value, (low, high) = entry["value"], entry["ci95"]
        if value is None:
            return "not defined"
        ci = "ci95 -" if low is None else f"ci95 {low:.{digits}f} to {high:.{digits}f}"
        return f"{value:.{digits}f} ({ci})"

    lines = [f"agreement of {payload['scorer']} with people: {n_lines} graded lines, "
             f"{payload['n_responses']} responses, {payload['n_items']} items"]
    notes = []
    for name, dim in payload["dimensions"].items():
        graded = sum(map(sum, dim["confusion"]))
        base = "-" if dim["base_rate"] is None else f"{dim['base_rate']:.2f}"
        lines.append(f"  {name} ({graded} lines)")
        lines.append(f"    kappa (quadratic)  {stat(dim['kappa'])}   base rate {base}")
        lines.append(f"    alpha (ordinal)    {stat(dim['alpha'])}")
        lines.append(f"    MAE                {stat(dim['mae'])}")
        lines.append("    human \\ scorer  " + " ".join(f"{g:>4}" for g in range(MIN_SCORE, MAX_SCORE + 1)))
        for grade, row in enumerate(dim["confusion"], start=MIN_SCORE):
            lines.append(f"    {grade:>14}  " + " ".join(f"{count:>4}" for count in row))
        notes.extend(undefined_notes(name, dim))
    if notes:
        lines.append("notes:")
        lines.extend(f"  {note}" for note in notes)
    return lines


def undefined_notes(name: str, dim: Mapping) -> list[str]:
    """One line for a dimension whose kappa or alpha is not defined, saying why."""
    graded = sum(map(sum, dim["confusion"]))
    if graded == 0:
        return [f"{name}: no line has both a human grade and a scorer grade"]
    undefined = [stat for stat in ("kappa", "alpha") if dim[stat]["value"] is None]
    if not undefined:
        return []
    return [f"{name}: {' and '.join(undefined)} not defined: the grades do not vary "
            "(every human and scorer grade is the same); grade responses of differing quality"]


def _agreement(args: argparse.Namespace) -> int:
    if args.bench not in JUDGED_BENCHMARKS:
        raise UsageError(f"BENCH {args.bench!r}: agreement is for a judge-scored benchmark; "
                         f"choose {' or '.join(JUDGED_BENCHMARKS)}")
    if args.resamples < 1:
        raise UsageError(f"--resamples {args.resamples}: must be at least 1")
    from fieldeval.benchmarks.ibf.agreement import GradedPair, agreement
    from fieldeval.benchmarks.ibf.corpus import load_corpus
    from fieldeval.calls.client import resolve_model

    if args.judge_model:
        resolve_model(args.judge_model, flag="--judge-model")
    corpus = load_corpus(args.ibf_corpus)
    items = {item.id: item for item in corpus.items}
    lines = read_graded(args.graded, set(items))
    scored = score_responses(lines, items, args.judge_model)
    pairs = [GradedPair(item_id, response, grades, scored[(item_id, response)])
             for item_id, response, grades in lines]
    scorer = f"judge:{args.judge_model}" if args.judge_model else REFERENCE_SCORER
    payload = agreement(pairs, scorer=scorer, resamples=args.resamples, seed=args.seed)
    if args.json:
        print(json.dumps(payload, indent=2))
        for name, dim in payload["dimensions"].items():
            for note in undefined_notes(name, dim):
                print(f"note: {note}", file=sys.stderr)
    else:
        print("\n".join(format_agreement(payload, n_lines=len(pairs))))
    return 0


def register_cli(groups: CliGroups) -> None:
    """Add ``fieldeval agreement BENCH GRADED_JSONL [--judge-model M] [--ibf-corpus PATH] [--json]``."""
    cmd = groups.top.add_parser(
        "agreement", help="how well the scorer agrees with people's rubric grades (kappa, alpha, MAE)",
        description="Score each graded response with the reference scorer (or --judge-model) and print, per "
                    "rubric dimension, quadratic-weighted kappa, ordinal Krippendorff's alpha and MAE against "
                    "the people's grades, with cluster-bootstrap ci95 by corpus item, and the confusion of grades.")
    cmd.add_argument("bench", metavar="BENCH", help=f"the benchmark: {', '.join(JUDGED_BENCHMARKS)}")
    cmd.add_argument("graded", metavar=WHAT,
                     help='one JSON object per line: {"item_id", "response", "grades": {dimension: 0-4 or null}}')
    cmd.add_argument("--judge-model", dest="judge_model", metavar="MODEL", default=None,
                     help="llm model that grades the responses (default: the offline reference scorer)")
    cmd.add_argument("--ibf-corpus", dest="ibf_corpus", metavar="PATH", default=None,
                     help="the JSON-lines IBF corpus the responses answer (default: the bundled one)")
    cmd.add_argument("--resamples", type=int, default=DEFAULT_RESAMPLES, metavar="N",
                     help=f"bootstrap resamples of corpus items (default: {DEFAULT_RESAMPLES})")
    cmd.add_argument("--seed", type=int, default=DEFAULT_SEED, metavar="N",
                     help=f"bootstrap seed (default: {DEFAULT_SEED})")
    cmd.add_argument("--json", action="store_true", help="print the agreement as JSON")
    cmd.set_defaults(func=_agreement)
