"""MicrobioRel aggregation, the run's predictions table and ``fieldeval score re``."""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np

from fieldeval.benchmark import CliGroups
from fieldeval.errors import UsageError
from fieldeval.inputs import read_tsv_frame, write_tsv
from fieldeval.stats import Design, Estimator, estimate
from scorers.microbiorel import (
    RELATION_CLASSES,
    encode_labels,
    macro_f1_weights,
    normalize_relation,
    score_relations,
    unknown_labels,
    weighted_f1_weights,
    weighted_precision_weights,
    weighted_recall_weights,
)

PUBLISHED_WEIGHTED_F1 = {"PubMedBERT (fine-tuned; El Khettari et al. 2025)": 0.71}
PREDICTION_COLUMNS = [
    "model", "case_id", "annotation_id", "from_entity_name", "from_entity_label", "to_entity_name",
    "to_entity_label", "re_mode", "re_candidates", "gold", "summary_text", "response_text", "prediction",
    "valid", "correct", "response_time_s", "prompt_tokens", "completion_tokens", "est_cost_usd", "cached",
]


def estimators(rows: list[dict]) -> dict[str, Estimator]:
    """Weighted/macro F1, precision, recall on the rows' (gold, prediction) codes; accuracy and parse rate as means."""
    golds = [row["gold"] for row in rows]
    preds = [row["prediction"] for row in rows]
    codes = encode_labels(golds, preds)
    every = np.ones(len(rows), dtype=bool)
    out: dict[str, Estimator] = {
        name: Estimator(codes, statistic, every, (0.0, 1.0))
        for name, statistic in [("weighted_f1", weighted_f1_weights), ("weighted_precision", weighted_precision_weights),
                                ("weighted_recall", weighted_recall_weights), ("macro_f1", macro_f1_weights)]}
    out["accuracy"] = Estimator.mean([float(g == p) for g, p in zip(golds, preds)], (0.0, 1.0))
    out["parse_rate"] = Estimator.mean([float(p is not None) for p in preds], (0.0, 1.0))
    return out


def aggregate(rows: list[dict], *, seed: int, resamples: int) -> dict:
    """Weighted/macro F1, precision, recall, accuracy, parse rate with their two intervals
    (:func:`fieldeval.stats.estimate`); per class; confusion.

    Intervals are clustered by the rows' paragraphs (``annotation_id``) when the rows carry them.
    """
    golds = [row["gold"] for row in rows]
    preds = [row["prediction"] for row in rows]
    design = Design.of_rows(rows)
    out: dict = {name: estimate(est, design, seed=seed, resamples=resamples)
                 for name, est in estimators(rows).items()}
    scores = score_relations(golds, preds)
    f1_ci = per_class_f1_ci95(encode_labels(golds, preds), design, seed=seed, resamples=resamples)
    out["per_class"] = {name: {"precision": round(s.precision, 6), "recall": round(s.recall, 6),
                               "f1": round(s.f1, 6), "f1_ci95": f1_ci[i], "support": s.support}
                        for i, (name, s) in enumerate(scores.per_class.items())}
    out["confusion_matrix"] = scores.confusion_matrix
    out["re_mode"] = sorted({row.get("re_mode") or "direct" for row in rows})
    out["re_candidates"] = sorted({row.get("re_candidates") or "all" for row in rows})
    return out


def per_class_f1_ci95(codes, design: Design, *, seed: int, resamples: int) -> list[list[float | None]]:
    """Each class's F1 ci95 ``[lo, hi]`` on new paragraphs, by the method and seed of the headline metrics
    (:func:`fieldeval.stats.estimate`); F1 counts as 0 in a resample where it is undefined."""
    from scorers.microbiorel import weighted_class_scores

    n_classes = len(RELATION_CLASSES)
    n = len(codes)
    if n == 0:
        return [[None, None]] * n_classes
    every = np.ones(n, dtype=bool)
    seen: dict[bytes, np.ndarray] = {}  # every class's F1 under one weight matrix, computed once for all classes

    def all_f1(data: np.ndarray, w: np.ndarray) -> np.ndarray:
        key = str(w.shape).encode() + hashlib.blake2b(np.ascontiguousarray(w).view(np.uint8), digest_size=16).digest()
        if key not in seen:
            seen[key] = np.nan_to_num(weighted_class_scores(data, w, n_classes)[3])
        return seen[key]

    def class_f1(c: int):
        return lambda data, w: all_f1(data, w)[:, c]

    return [estimate(Estimator(codes, class_f1(c), every, (0.0, 1.0)), design, seed=seed,
                     resamples=resamples)["ci95"] for c in range(n_classes)]


def write_outputs(rows: list[dict], reports_dir: Path) -> list[Path]:
    """Write every prediction as ``reports/microbiorel/predictions.tsv`` (``fieldeval score re`` reads it)."""
    import pandas as pd

    folder = reports_dir / "microbiorel"
    folder.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame(rows).reindex(columns=PREDICTION_COLUMNS)
    path = folder / "predictions.tsv"
    cells = df.astype(object).where(df.notna(), None).itertuples(index=False, name=None)
    write_tsv(path, PREDICTION_COLUMNS, cells)  # as to_csv writes it, with every control character quoted
    return [path]


def summary_notes(models: dict[str, dict]) -> list[str]:
    """Terminal lines under the table: the published reference and each model's invalid responses."""
    lines = [f"microbiorel: published weighted F1, {name}: about {value:.2f}"
             for name, value in PUBLISHED_WEIGHTED_F1.items()]
    for model, entry in models.items():
        parse = entry.get("parse_rate") or {}
        if parse.get("value") is not None and parse["value"] < 1:
            invalid = round((1 - parse["value"]) * parse["n"])
            lines.append(f"microbiorel: {model}: {invalid} of {parse['n']} responses are not a class "
                         "(counted wrong); see reports/microbiorel/predictions.tsv")
    return lines


# --- CLI ----------------------------------------------------------------------------------------


def read_predictions(path: Path, *, model: str | None = None):
    """A predictions TSV with ``gold`` and ``response_text`` columns, checked; one model's rows when asked."""

    if not path.is_file():
        raise UsageError(f"PREDICTIONS_TSV {path}: no such file; pass a TSV with columns gold and response_text")
    df = read_tsv_frame(path, what="PREDICTIONS_TSV", hint="pass a TSV with columns gold and response_text "
                        "and one row per prediction")
    missing = [c for c in ["gold", "response_text"] if c not in df.columns]
    if missing:
        raise UsageError(f"PREDICTIONS_TSV {path}: missing column(s) {', '.join(missing)}; "
                         "it needs gold and response_text")
    if model is not None:
        if "model" not in df.columns:
            raise UsageError(f"--model {model}: {path} has no model column; drop --model")
        df = df[df["model"] == model]
    elif "model" in df.columns and df["model"].nunique() > 1:
        names = sorted(df["model"].unique())
        raise UsageError(f"PREDICTIONS_TSV {path}: holds {len(names)} models ({', '.join(names)}); "
                         "pass --model NAME to score one")
    if df.empty:
        raise UsageError(f"PREDICTIONS_TSV {path}: no prediction rows{f' for --model {model}' if model else ''}; "
                         "pass a table with one row per prediction")
    unknown = unknown_labels(df["gold"])
    if unknown:
        raise UsageError(f"PREDICTIONS_TSV {path}: gold value(s) {unknown[:5]} are not MicrobioRel classes; "
                         f"use one of {', '.join(RELATION_CLASSES)}")
    return df


SCORE_KEYS = ["weighted_f1", "weighted_precision", "weighted_recall", "macro_f1", "accuracy", "parse_rate"]


def score_table(df) -> dict:
    """The CLI's JSON object for a checked predictions table."""
    golds = df["gold"].tolist()
    preds = [normalize_relation(text) for text in df["response_text"]]
    scores = score_relations(golds, preds)
    return {
        "weighted_f1": scores.weighted_f1,
        "weighted_precision": scores.weighted_precision,
        "weighted_recall": scores.weighted_recall,
        "macro_f1": scores.macro_f1,
        "accuracy": scores.accuracy,
        "parse_rate": scores.parse_rate,
        "n": scores.n,
        "per_class": {name: {"precision": s.precision, "recall": s.recall, "f1": s.f1, "support": s.support}
                      for name, s in scores.per_class.items()},
        "ci95": _intervals(golds, preds),
    }


def _intervals(golds: list[str], preds: list[str | None]) -> dict[str, list[float | None]]:
    """Each headline metric's ci95, from the run aggregate's seeded bootstrap."""
    from fieldeval.stats import DEFAULT_RESAMPLES, DEFAULT_SEED

    out = aggregate([{"gold": g, "prediction": p} for g, p in zip(golds, preds)], seed=DEFAULT_SEED,
                    resamples=DEFAULT_RESAMPLES)
    return {key: out[key]["ci95"] for key in SCORE_KEYS}


def _score_re(args: argparse.Namespace) -> int:
    result = score_table(read_predictions(Path(args.predictions_tsv), model=args.model))
    if args.json:
        print(json.dumps(result, sort_keys=True))
        return 0
    print(f"MicrobioRel exact-match scores ({result['n']} predictions)")
    for key in SCORE_KEYS:
        lo, hi = result["ci95"][key]
        print(f"  {key:20s} {result[key]:.4f}  (ci95 {lo:.4f}-{hi:.4f})")
    print("\n  class                  precision  recall     f1  support")
    for name, s in result["per_class"].items():
        if s["support"] or s["precision"]:
            print(f"  {name:22s} {s['precision']:9.3f} {s['recall']:7.3f} {s['f1']:6.3f} {s['support']:8d}")
    return 0


def register_cli(groups: CliGroups) -> None:
    """Add ``fieldeval score re``."""
    parser = groups.score.add_parser("re", help="exact-match MicrobioRel scores for a predictions TSV (gold, response_text)")
    parser.add_argument("predictions_tsv", metavar="PREDICTIONS_TSV")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--model", metavar="MODEL", help="score only this model's rows (needed when there are several)")
    parser.set_defaults(func=_score_re)
