"""IBF scored tables: the run's ``reports/ibf/scores.tsv`` and ``fieldeval score ibf``."""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from fieldeval.benchmark import CliGroups
from fieldeval.benchmarks.ibf.agreement_cli import register_cli as register_agreement_cli
from fieldeval.errors import UsageError
from fieldeval.inputs import read_tsv, write_tsv
from scorers.ibf import DIMENSIONS, reading, run_scores

SCORES_FILE = "scores.tsv"
SCORE_COLUMNS = ["item_id", *DIMENSIONS]
TABLE_COLUMNS = ["model", "item_id", "hazard", "region", "corpus_version", *DIMENSIONS, "scorer",
                 "unscored_reason", "response_time_s", "prompt_tokens", "completion_tokens", "est_cost_usd",
                 "cached", "response_text", "judge_response"]
def write_outputs(rows: list[dict], reports_dir: Path) -> list[Path]:
    """Write the run's scores as ``reports/ibf/scores.tsv`` (the columns ``fieldeval score ibf`` reads)."""
    folder = Path(reports_dir) / "ibf"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / SCORES_FILE
    write_tsv(path, TABLE_COLUMNS, ([row.get(c) for c in TABLE_COLUMNS] for row in rows))
    return [path]


def read_scores(path: Path) -> dict[str, list[list[int | None]]]:
    """Model (``""`` when the table has no model column) -> each item's five scores, validated."""
    if not path.is_file():
        raise UsageError(f"SCORES_TSV {path}: no such file; pass a table with columns {', '.join(SCORE_COLUMNS)}")
    _, rows = read_tsv(path, what="SCORES_TSV", required=SCORE_COLUMNS)
    runs: dict[str, list[list[int | None]]] = defaultdict(list)
    for number, row in enumerate(rows, start=2):
        scores: list[int | None] = []
        for column in DIMENSIONS:
            text = (row.get(column) or "").strip()
            if text == "":
                scores.append(None)
                continue
            if not text.isdigit() or int(text) > 4:
                raise UsageError(f"SCORES_TSV {path}: row {number} (item_id {row.get('item_id') or '?'}) "
                                 f"column {column}: {text!r} is not an integer 0-4; "
                                 "write 0-4, or leave it blank for unscored")
            scores.append(int(text))
        runs[row.get("model") or ""].append(scores)
    return dict(runs)


def run_payload(scores: list[list[int | None]], *, model: str | None = None) -> dict:
    """The seed's per-run payload, rounded as its evaluations table stores it (2 and 4 decimals)."""
    numbers = run_scores(scores)
    mds, tpr = numbers["mean_dimension_score"], numbers["threshold_pass_rate"]
    payload: dict = {"model_name": model} if model else {}
    payload |= {
        "total_items": numbers["total_items"],
        "scores": {d: None if v is None else round(v, 2) for d, v in numbers["scores"].items()},
        "mean_dimension_score": None if mds is None else round(mds, 2),
        "threshold_pass_rate": None if tpr is None else round(tpr, 4),
        "unscored": {d: sum(s[i] is None for s in scores) for i, d in enumerate(DIMENSIONS)},
        "reading": reading(mds, tpr),
        "ci95": _intervals(scores),
    }
    return payload


def _intervals(scores: list[list[int | None]]) -> dict[str, list[float | None]]:
    """Each dimension's, MDS's and TPR's ci95, from the run aggregate's seeded bootstrap."""
    from fieldeval.benchmarks.ibf.aggregate import aggregate
    from fieldeval.stats import DEFAULT_RESAMPLES, DEFAULT_SEED

    out = aggregate([dict(zip(DIMENSIONS, item)) for item in scores], seed=DEFAULT_SEED, resamples=DEFAULT_RESAMPLES)
    return {name: out[name]["ci95"] for name in [*DIMENSIONS, "mean_dimension_score", "threshold_pass_rate"]}


def score_table(path: Path) -> dict:
    """The payload for a scores table: one run, or ``{"runs": [...]}`` when it holds several models."""
    runs = read_scores(path)
    if len(runs) <= 1:
        model, scores = next(iter(runs.items()), ("", []))
        return run_payload(scores, model=model or None)
    return {"runs": [run_payload(scores, model=model) for model, scores in sorted(runs.items())]}


def _format_run(payload: dict) -> list[str]:
    def num(value, digits=2):
        return "-" if value is None else f"{value:.{digits}f}"

    def ci(name, digits=2):
        lo, hi = payload["ci95"][name]
        return "ci95 -" if lo is None else f"ci95 {lo:.{digits}f}-{hi:.{digits}f}"

    head = f"{payload.get('model_name') or 'run'}: {payload['total_items']} items"
    lines = [head]
    for dim, value in payload["scores"].items():
        lines.append(f"  {dim:24s} {num(value)}  ({ci(dim)}; unscored {payload['unscored'][dim]})")
    r = payload["reading"]
    lines.append(f"  {'mean_dimension_score':24s} {num(payload['mean_dimension_score'])}  "
                 f"({ci('mean_dimension_score')})  {r['mds_band'] or '-'}")
    lines.append(f"  {'threshold_pass_rate':24s} {num(payload['threshold_pass_rate'], 4)}  "
                 f"({ci('threshold_pass_rate', 4)})  {'below 0.4' if r['tpr_meets_minimum'] is False else ''}".rstrip())
    lines.append(f"  reading: {r['overall'] or '-'}")
    return lines


def _score_ibf(args: argparse.Namespace) -> int:
    payload = score_table(Path(args.scores_tsv))
    if args.json:
        print(json.dumps(payload, indent=2))
    else:
        for run in payload.get("runs", [payload]):
            print("\n".join(_format_run(run)))
    return 0


def register_cli(groups: CliGroups) -> None:
    """Add ``fieldeval score ibf SCORES_TSV [--json]``."""
    s_ibf = groups.score.add_parser("ibf", help="the seed's per-run IBF payload (five means, MDS, TPR) for a scores table")
    s_ibf.add_argument("scores_tsv", metavar="SCORES_TSV",
                       help=f"TSV with columns {', '.join(SCORE_COLUMNS)} (0-4, blank = unscored)")
    s_ibf.add_argument("--json", action="store_true", help="print the payload as JSON")
    s_ibf.set_defaults(func=_score_ibf)
    register_agreement_cli(groups)
