"""env_broad_scale results tables: scoring an llm-matrix results.tsv, the run's scored table, aggregation."""

from __future__ import annotations

import dataclasses
import re
from collections import Counter, defaultdict
from pathlib import Path

from fieldeval.errors import UsageError
from fieldeval.stats import mean_metric
from scorers.ebs import EbsScore, OntologyIndex, score_ebs

METRICS = ["ontology_score", "exact_match", "parse_success", "curie_label_valid", "hierarchy_score", "in_template_enum"]
SCORE_COLUMNS = [field.name for field in dataclasses.fields(EbsScore)]
COST_COLUMNS = ["response_time_s", "prompt_tokens", "completion_tokens", "est_cost_usd"]

def score_row(response: str, ideal: str, template: str, *, index: OntologyIndex, enums: dict[str, frozenset[str]]) -> dict:
    """Every scored column for one response, as a plain dict."""
    return dataclasses.asdict(score_ebs(response, ideal, index=index, allowed=enums.get(template)))


def template_of(row: dict) -> str:
    """The template of a results row: ``sampleData`` or, failing that, from ``case_original_input``."""
    value = row.get("sampleData")
    if isinstance(value, str) and value.strip():
        return value.strip()
    match = re.search(r"sampleData['\"]?\s*[:=]\s*['\"]?(\w+)", str(row.get("case_original_input") or ""))
    return match.group(1) if match else ""


def check_results_columns(columns) -> None:
    """Raise a one-line usage error when an llm-matrix results table lacks a column scoring needs."""
    missing = [c for c in ["model", "case_ideal", "response_text"] if c not in columns]
    if "sampleData" not in columns and "case_original_input" not in columns:
        missing.append("sampleData or case_original_input")
    if missing:
        raise UsageError(f"results table is missing column(s): {', '.join(missing)}; "
                         "expected an llm-matrix results.tsv")


def score_results(df, *, index: OntologyIndex, enums: dict[str, frozenset[str]]):
    """Add the scored columns (and empty cost columns where absent) to an llm-matrix results table."""
    import pandas as pd

    check_results_columns(df.columns)
    records = df.to_dict("records")
    scored = pd.DataFrame(
        [score_row(_text(r["response_text"]), _text(r["case_ideal"]), template_of(r), index=index, enums=enums)
         for r in records],
        columns=SCORE_COLUMNS,
        index=df.index,
    )
    out = pd.concat([df.drop(columns=[c for c in SCORE_COLUMNS if c in df.columns]), scored], axis=1)
    for column in COST_COLUMNS:
        if column not in out.columns:
            out[column] = None
    out["hop_distance"] = out["hop_distance"].astype("Int64")
    return out


def _text(value) -> str:
    return "" if value is None or (isinstance(value, float) and value != value) else str(value)


def summary_lines(df) -> list[str]:
    """The per-model summary printed after scoring a results table."""
    lines = ["", "env_broad_scale scoring summary", "", "Model ranking (mean ontology_score):"]
    models = df.groupby("model")["ontology_score"].agg(["mean", "count"]).sort_values("mean", ascending=False)
    for model, row in models.iterrows():
        lines.append(f"  {row['mean']:.3f}  {model}  (n={int(row['count'])})")
    for title, column in [("Exact match rate", "exact_match"), ("Parse rate", "parse_success"),
                          ("CURIE-label validity", "curie_label_valid")]:
        lines += ["", f"{title}:"]
        for model, rate in df.groupby("model")[column].mean().items():
            lines.append(f"  {rate:6.1%}  {model}")
    lines += ["", "Enum compliance (rows whose template has a value set):"]
    for model, group in df.groupby("model"):
        with_enum = group["in_template_enum"].dropna()
        rate = f"{with_enum.astype(bool).mean():6.1%}" if len(with_enum) else "   n/a"
        lines.append(f"  {rate}  {model}  (n={len(with_enum)})")
    lines += ["", "Relationship breakdown (descendant = more specific, ancestor = vaguer):"]
    for model, group in df.groupby("model"):
        counts = Counter(group["relationship"].fillna("parse_failure"))
        lines.append(f"  {model}: " + ", ".join(f"{k}={counts[k]}" for k in sorted(counts)))
    return lines

def aggregate(rows: list[dict], *, seed: int, resamples: int) -> dict:
    """Per-metric values with bootstrap intervals, relationship counts and per-stratum scores."""
    out: dict = {}
    for metric in METRICS[:-1]:
        out[metric] = mean_metric([float(r[metric]) for r in rows], seed=seed, resamples=resamples)
    out["in_template_enum"] = mean_metric(
        [float(r["in_template_enum"]) for r in rows if r["in_template_enum"] is not None],
        seed=seed, resamples=resamples,
    )
    counts = Counter(r["relationship"] or "parse_failure" for r in rows)
    out["relationship_counts"] = {k: counts.get(k, 0) for k in
                                  ["exact", "descendant", "ancestor", "unrelated", "parse_failure"]}
    strata: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        strata[row["stratum"]].append(row)
    out["per_stratum"] = {
        stratum: {m: mean_metric([float(r[m]) for r in group], seed=seed, resamples=resamples)
                  for m in ["ontology_score", "exact_match"]}
        for stratum, group in sorted(strata.items())
    }
    return out


def write_outputs(rows: list[dict], reports_dir: Path) -> list[Path]:
    """Write the run's scored table as ``reports/ebs/results_envo_scored.tsv``."""
    import pandas as pd

    folder = reports_dir / "ebs"
    folder.mkdir(parents=True, exist_ok=True)
    columns = ["model", "case_id", "stratum", "sampleData", "case_ideal", "response_text",
               *SCORE_COLUMNS, *COST_COLUMNS, "cached"]
    df = pd.DataFrame(rows).reindex(columns=columns)
    df["hop_distance"] = df["hop_distance"].astype("Int64")
    path = folder / "results_envo_scored.tsv"
    df.to_csv(path, sep="\t", index=False, errors="backslashreplace")
    return [path]
