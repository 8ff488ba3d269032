"""MicrobioRel relation extraction (El Khettari et al. 2025): cases, prompts, aggregation, CLI.

One eval item per test entity pair: the prompt gives the paragraph, both
entities with their types and character offsets and the class list, and
asks for the class only. ``--re-mode summarize`` (the paper's method) first
asks for a one-sentence ``Entity1 Relation Entity2`` summary and classifies
from it and the paragraph. Scores are exact match after the shared
post-processing of :mod:`scorers.microbiorel`; weighted F1 is the primary
metric.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from fieldeval.data import fetch
from fieldeval.errors import UsageError
from fieldeval.stats import mean_metric, statistic_metric
from scorers.microbiorel import (
    RELATION_CLASSES,
    encode_labels,
    macro_f1_batch,
    normalize_relation,
    score_relations,
    unknown_labels,
    weighted_f1_batch,
    weighted_precision_batch,
    weighted_recall_batch,
)

NAME = "microbiorel"
HEADLINE = ["weighted_f1", "macro_f1", "accuracy", "parse_rate"]
METRICS = ["weighted_f1", "weighted_precision", "weighted_recall", "macro_f1", "accuracy", "parse_rate"]
SPLIT_FILES = {
    "train": "microbiorel/unmasked/train_df.csv",
    "dev": "microbiorel/unmasked/dev_df.csv",
    "test": "microbiorel/unmasked/test_df.csv",
}
BASELINE = "re-baseline"
PUBLISHED_WEIGHTED_F1 = {"PubMedBERT (fine-tuned; El Khettari et al. 2025)": 0.71}

Mode = Literal["direct", "summarize"]
Candidates = Literal["all", "filtered"]

SYSTEM_PROMPT = (
    "You are an expert in biomedical relation extraction in the microbiome domain. "
    "You read a paragraph of a scientific article and judge how two entities mentioned in it are related."
)

_ENTITY_LINE = "Entity {k}: {name} (type {type}, characters {start}-{end})"
_PASSAGE = "Paragraph:\n<<<\n{text}\n>>>\n\n{entity1}\n{entity2}\n"

CLASSIFY_TEMPLATE = (
    "Classify the relation between Entity 1 and Entity 2 in the paragraph below.\n\n"
    "{passage}"
    "{summary_section}"
    "\nRelation classes:\n{class_lines}\n\n"
    "Answer with the class name only, exactly as written above; "
    "answer None when the paragraph states no relation between them."
)

SUMMARY_TEMPLATE = (
    "Summarize the relation between Entity 1 and Entity 2 in the paragraph below.\n\n"
    "{passage}\n"
    'Write one sentence of the form "Entity1 Relation Entity2" about this pair, '
    "using the entities' names, and nothing else."
)

PREDICTION_COLUMNS = [
    "model", "case_id", "annotation_id", "from_entity_name", "from_entity_label", "to_entity_name",
    "to_entity_label", "re_mode", "re_candidates", "gold", "summary_text", "response_text", "prediction",
    "valid", "correct", "response_time_s", "prompt_tokens", "completion_tokens", "est_cost_usd", "cached",
]


@dataclass(frozen=True)
class Entity:
    """One entity mention: its text, type and character offsets in the paragraph."""

    name: str
    type: str
    start: int
    end: int


@dataclass(frozen=True)
class RelationCase:
    """One MicrobioRel entity pair.

    Attributes:
        case_id: ``pair000`` ..., the row number in its split.
        test_id: a readable pytest id: case id and both entity names.
        annotation_id: the upstream paragraph id.
        text: the paragraph.
        source: the first entity (``from_entity``).
        target: the second entity (``to_entity``).
        gold: the relation class (``"None"`` is a class).
        filtered_labels: the classes allowed for the pair's entity types (test split only).
    """

    case_id: str
    test_id: str
    annotation_id: str
    text: str
    source: Entity
    target: Entity
    gold: str
    filtered_labels: tuple[str, ...] = ()


def _slug(name: str) -> str:
    return re.sub(r"[^0-9A-Za-z]+", "_", name).strip("_")[:24] or "x"


def load_split(split: str = "test") -> tuple[RelationCase, ...]:
    """The entity pairs of a split (``train``, ``dev`` or ``test``) from the pinned upstream CSVs."""
    import pandas as pd

    if split not in SPLIT_FILES:
        raise UsageError(f"MicrobioRel split {split!r} is unknown; use one of {', '.join(SPLIT_FILES)}")
    df = pd.read_csv(fetch(SPLIT_FILES[split]), dtype=str, keep_default_na=False)
    unknown = unknown_labels(df["relation_type"])
    if unknown:
        raise UsageError(f"{SPLIT_FILES[split]}: relation_type value(s) {unknown} are not MicrobioRel classes; "
                         "check the data file against the registry")
    cases = []
    for number, row in enumerate(df.to_dict("records")):
        source = Entity(row["from_entity_name"], row["from_entity_label"],
                        int(float(row["from_entity_start"])), int(float(row["from_entity_end"])))
        target = Entity(row["to_entity_name"], row["to_entity_label"],
                        int(float(row["to_entity_start"])), int(float(row["to_entity_end"])))
        filtered = tuple(ast.literal_eval(row["filtered_labels"])) if row.get("filtered_labels") else ()
        case_id = f"pair{number:03d}"
        cases.append(RelationCase(
            case_id=case_id,
            test_id=f"{case_id}-{_slug(source.name)}-{_slug(target.name)}",
            annotation_id=row["annotation_id"].removesuffix(".0"),
            text=row["original_text"],
            source=source,
            target=target,
            gold=row["relation_type"],
            filtered_labels=filtered,
        ))
    return tuple(cases)


# --- prompts ----------------------------------------------------------------------------------


def candidate_classes(case: RelationCase, candidates: Candidates) -> tuple[str, ...]:
    """The classes a prompt offers: all 23, or the pair's ``filtered_labels`` in the canonical order."""
    if candidates == "all" or not case.filtered_labels:
        return RELATION_CLASSES
    allowed = set(case.filtered_labels)
    return tuple(c for c in RELATION_CLASSES if c in allowed)


def _passage(case: RelationCase) -> str:
    entity1 = _ENTITY_LINE.format(k=1, name=case.source.name, type=case.source.type,
                                  start=case.source.start, end=case.source.end)
    entity2 = _ENTITY_LINE.format(k=2, name=case.target.name, type=case.target.type,
                                  start=case.target.start, end=case.target.end)
    return _PASSAGE.format(text=case.text, entity1=entity1, entity2=entity2)


def classify_prompt(case: RelationCase, *, classes: tuple[str, ...] = RELATION_CLASSES,
                    summary: str | None = None) -> str:
    """The classification prompt: paragraph, entities, optional summary, class list; asks for the class only."""
    section = f"\nSummary of their relation: {summary.strip()}\n" if summary is not None else ""
    return CLASSIFY_TEMPLATE.format(passage=_passage(case), summary_section=section,
                                    class_lines="\n".join(f"- {c}" for c in classes))


def summary_prompt(case: RelationCase) -> str:
    """The summarisation prompt: one sentence ``Entity1 Relation Entity2`` about the pair."""
    return SUMMARY_TEMPLATE.format(passage=_passage(case))


# --- pytest face ------------------------------------------------------------------------------


@dataclass(frozen=True)
class MicrobioRelContext:
    """What a MicrobioRel eval item needs: the test cases and the run's options."""

    cases: tuple[RelationCase, ...]
    mode: Mode
    candidates: Candidates

    def classes_for(self, case: RelationCase) -> tuple[str, ...]:
        """The classes the prompt offers for this case."""
        return candidate_classes(case, self.candidates)


_contexts: dict[tuple[str, str], MicrobioRelContext] = {}


def microbiorel_context(config) -> MicrobioRelContext:
    """The MicrobioRel context for a pytest config's options, built once per process."""
    import pytest

    key = (config.getoption("fieldeval_re_mode"), config.getoption("fieldeval_re_candidates"))
    if key not in _contexts:
        try:
            _contexts[key] = MicrobioRelContext(load_split("test"), mode=key[0], candidates=key[1])
        except UsageError as error:
            raise pytest.UsageError(str(error)) from None
    return _contexts[key]


def prepare(config) -> None:
    """Load the test split before collection, and train or load the baseline once (not once per xdist worker)."""
    microbiorel_context(config)
    if BASELINE in (config.getoption("fieldeval_models") or [BASELINE]):
        from fieldeval.baselines.microbiorel import load_model

        load_model()


def add_options(group) -> None:
    """MicrobioRel options."""
    group.addoption("--re-candidates", dest="fieldeval_re_candidates", choices=["all", "filtered"], default="all",
                    help="MicrobioRel classes offered in the prompt: all 23, or the pair's filtered_labels "
                         "(default: all)")
    group.addoption("--re-mode", dest="fieldeval_re_mode", choices=["direct", "summarize"], default="direct",
                    help="MicrobioRel prompting: classify directly, or summarise the pair first as the paper does "
                         "(default: direct)")


def aggregate(rows: list[dict], *, seed: int, resamples: int) -> dict:
    """Weighted/macro F1, precision, recall, accuracy, parse rate with bootstrap ci95; per class; confusion."""
    golds = [row["gold"] for row in rows]
    preds = [row["prediction"] for row in rows]
    codes = encode_labels(golds, preds)
    out: dict = {}
    for name, statistic in [("weighted_f1", weighted_f1_batch), ("weighted_precision", weighted_precision_batch),
                            ("weighted_recall", weighted_recall_batch), ("macro_f1", macro_f1_batch)]:
        out[name] = statistic_metric(codes, statistic, seed=seed, resamples=resamples)
    out["accuracy"] = mean_metric([float(g == p) for g, p in zip(golds, preds)], seed=seed, resamples=resamples)
    out["parse_rate"] = mean_metric([float(p is not None) for p in preds], seed=seed, resamples=resamples)
    scores = score_relations(golds, preds)
    out["per_class"] = {name: {"precision": round(s.precision, 6), "recall": round(s.recall, 6),
                               "f1": round(s.f1, 6), "support": s.support}
                        for name, s in scores.per_class.items()}
    out["confusion_matrix"] = scores.confusion_matrix
    out["re_mode"] = sorted({row.get("re_mode") or "direct" for row in rows})
    out["re_candidates"] = sorted({row.get("re_candidates") or "all" for row in rows})
    return out


def write_outputs(rows: list[dict], reports_dir: Path) -> list[Path]:
    """Write every prediction as ``reports/microbiorel/predictions.tsv`` (``fieldeval score re`` reads it)."""
    import pandas as pd

    folder = reports_dir / NAME
    folder.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame(rows).reindex(columns=PREDICTION_COLUMNS)
    path = folder / "predictions.tsv"
    df.to_csv(path, sep="\t", index=False)
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
    import pandas as pd

    if not path.is_file():
        raise UsageError(f"PREDICTIONS_TSV {path}: no such file; pass a TSV with columns gold and response_text")
    try:
        df = pd.read_csv(path, sep="\t", dtype=str, keep_default_na=False)
    except pd.errors.EmptyDataError:
        raise UsageError(f"PREDICTIONS_TSV {path}: the file is empty; pass a TSV with columns gold and "
                         "response_text and one row per prediction") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise UsageError(f"PREDICTIONS_TSV {path}: not a readable TSV ({reason}); pass a tab-separated table") from None
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
    }


def _score_re(args: argparse.Namespace) -> int:
    result = score_table(read_predictions(Path(args.predictions_tsv), model=args.model))
    if args.json:
        print(json.dumps(result, sort_keys=True))
        return 0
    print(f"MicrobioRel exact-match scores ({result['n']} predictions)")
    for key in ["weighted_f1", "weighted_precision", "weighted_recall", "macro_f1", "accuracy", "parse_rate"]:
        print(f"  {key:20s} {result[key]:.4f}")
    print("\n  class                  precision  recall     f1  support")
    for name, s in result["per_class"].items():
        if s["support"] or s["precision"]:
            print(f"  {name:22s} {s['precision']:9.3f} {s['recall']:7.3f} {s['f1']:6.3f} {s['support']:8d}")
    return 0


def register_cli(sub, score_sub) -> None:
    """Add ``fieldeval score re``."""
    parser = score_sub.add_parser("re", help="exact-match MicrobioRel scores for a predictions TSV (gold, response_text)")
    parser.add_argument("predictions_tsv", metavar="PREDICTIONS_TSV")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--model", metavar="MODEL", help="score only this model's rows (needed when there are several)")
    parser.set_defaults(func=_score_re)



def run_meta(config) -> dict:
    """The test split's pinned version and content hash, for the run store."""
    from fieldeval.data import REGISTRY

    entry = REGISTRY[SPLIT_FILES["test"]]
    commit = entry.url.split("/MicrobioRel/")[1].split("/")[0][:7]
    return {"corpus_version": f"microbiorel-test@{commit}", "content_hash": f"sha256:{entry.sha256}"}
