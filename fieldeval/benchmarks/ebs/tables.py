"""env_broad_scale results tables: scoring an llm-matrix results.tsv, the run's scored table, aggregation."""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

from fieldeval.benchmarks.ebs.truth import write_truth_table
from fieldeval.errors import UsageError
from fieldeval.inputs import tsv_cell
from fieldeval.rows import column as row_column
from fieldeval.stats import Design, Estimator, estimate, mean_metric
from scorers.ebs import EbsScore, OntologyIndex, score_ebs, score_ebs_batch

METRICS = ["ontology_score", "exact_match", "parse_success", "curie_label_valid", "hierarchy_score", "in_template_enum",
           "linkml_valid"]
# what upstream's envo_scorer.py adds to results.tsv, in its order (cost columns are its stubs)
COST_COLUMNS = ["response_time_s", "prompt_tokens", "completion_tokens", "est_cost_usd"]
UPSTREAM_COLUMNS = ["parse_success", "pred_label", "pred_curie", "truth_label", "truth_curie", "curie_label_valid",
                    "exact_match", "relationship", "hop_distance", "in_template_enum", "ontology_score",
                    *COST_COLUMNS]
# fieldeval's own columns, after upstream's
EXTRA_COLUMNS = ["hierarchy_score", "enum_score", "lenient_curie", "relationship_detail", "missed_information",
                 "false_information", "missed_terms", "false_terms", "label_mismatch", "ontology_status",
                 "linkml_valid", "linkml_message"]
SCHEMA_COLUMNS = ["linkml_valid", "linkml_message"]  # not the scorer's: the slot's validation (ebs.schema)
INFORMATION_METRICS = ["missed_information", "false_information"]  # lower is better: what an answer missed, got wrong
SCORED_COLUMNS = [*UPSTREAM_COLUMNS, *EXTRA_COLUMNS]
SCORE_FIELDS = [field.name for field in dataclasses.fields(EbsScore)]
FLOAT_COLUMNS = ["ontology_score", "hierarchy_score", "enum_score", "missed_information", "false_information"]
INT_COLUMNS = ["hop_distance", "missed_terms", "false_terms"]  # whole numbers, blank for None
# blank where the response does not parse (or the template has no value set), as upstream writes them
OPTIONAL_BOOL_COLUMNS = ["curie_label_valid", "in_template_enum", "linkml_valid"]
FLOAT_DECIMALS = 12  # 0.9, not 0.9000000000000001


def score_row(response: str, ideal: str, template: str, *, index: OntologyIndex, enums: dict[str, frozenset[str]]) -> dict:
    """Every scored column for one response, as a plain dict."""
    score = score_ebs(response, ideal, index=index, allowed=enums.get(template))
    return score.columns()


def _template_in(original_input) -> str:
    match = re.search(r"sampleData['\"]?\s*[:=]\s*['\"]?(\w+)", str(original_input or ""))
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
    """Add the scored columns to an llm-matrix results table: its own columns, upstream's, then fieldeval's.

    Each distinct (response, ideal, template) is scored once; the input's cost
    columns keep their values (blank where absent) at upstream's position.
    """
    import numpy as np
    import pandas as pd

    check_results_columns(df.columns)
    keys = list(zip(_texts(df["response_text"]), _texts(df["case_ideal"]), _templates(df)))
    first = dict.fromkeys(keys)  # each distinct triple, in the order of its first row
    distinct = len(first) == len(df)  # every row its own triple: nothing to spread back
    scores = score_ebs_batch(((response, ideal, enums.get(template)) for response, ideal, template in first),
                             index=index)
    if not distinct:
        code = dict(zip(first, range(len(first))))
        codes = np.fromiter(map(code.__getitem__, keys), dtype=np.intp, count=len(df))
    columns = {name: _values(values) if distinct else _values(values)[codes]
               for name, values in zip(SCORE_FIELDS, zip(*scores))}
    from fieldeval.benchmarks.ebs.schema import slot_validator

    validator = slot_validator()
    checked = [validator.validate(response, template) for response, _, template in first]
    for number, name in enumerate(SCHEMA_COLUMNS):
        values = [pair[number] for pair in checked]
        columns[name] = _values(values) if distinct else _values(values)[codes]
    for name in COST_COLUMNS:
        columns[name] = df[name].to_numpy() if name in df.columns else np.full(len(df), None, dtype=object)
    scored = format_scored(pd.DataFrame(columns, index=df.index, columns=SCORED_COLUMNS))
    return pd.concat([df.drop(columns=[c for c in SCORED_COLUMNS if c in df.columns]), scored], axis=1)


def format_scored(df):
    """The scored columns as upstream writes them: integer hops, blanks for None, floats to 12 decimals."""
    import pandas as pd

    df = df.copy()
    for column in ["parse_success", "exact_match"]:
        df[column] = df[column].astype(bool)
    for column in INT_COLUMNS:
        df[column] = pd.array(df[column], dtype="Int64")
    for column in OPTIONAL_BOOL_COLUMNS:
        if column in df.columns:  # linkml_valid: not a scorer column, absent from a table scored by hand
            df[column] = pd.array(df[column], dtype="boolean")
    for column in FLOAT_COLUMNS:
        df[column] = df[column].astype(float).round(FLOAT_DECIMALS)
    return df


def _values(items):
    import numpy as np

    array = np.empty(len(items), dtype=object)
    array[:] = items
    return array


def _texts(column) -> list[str]:
    values = column.tolist()
    if set(map(type, values)) <= {str}:  # text already (what the TSV reader gives)
        return values
    return [value if type(value) is str else _text(value) for value in values]


def _templates(df) -> list[str]:
    samples = _texts(df["sampleData"]) if "sampleData" in df.columns else [""] * len(df)
    originals = df["case_original_input"].tolist() if "case_original_input" in df.columns else [""] * len(df)
    return [sample.strip() or _template_in(original) for sample, original in zip(samples, originals)]


def _text(value) -> str:
    return "" if value is None or (isinstance(value, float) and value != value) else str(value)


def write_scored(df, path: Path) -> None:
    """Write a scored table as ``df.to_csv(path, sep="\\t", index=False)`` would, None and NA as empty cells.

    Rows go out :data:`WRITE_ROWS` at a time. A block's lines are joined directly when no cell needs quoting
    (no tab, newline, carriage return, double quote or NUL), several times faster than ``to_csv``; otherwise
    every cell goes through :func:`fieldeval.inputs.tsv_cell`, which quotes as ``to_csv`` does and also quotes
    a bare carriage return (``to_csv`` leaves it bare, and ``read_csv`` then splits the row), and writes NUL as
    ``\\x00``. A cell that needs no quoting is the same text either way.
    """
    blocks = (df.iloc[start:start + WRITE_ROWS] for start in range(0, len(df), WRITE_ROWS))
    write_scored_blocks(list(df.columns), blocks, path)


def write_scored_blocks(columns: list[str], blocks: Iterable, path: Path) -> None:
    """Write a scored table given as consecutive blocks of rows (frames with ``columns``, or each column's cells
    already as text, see :func:`row_cells`), as :func:`write_scored` writes the frame they make up."""
    width = len(columns)
    with open(path, "w", newline="", encoding="utf-8", errors="backslashreplace") as handle:
        handle.write("\t".join(tsv_cell(str(name)) for name in columns) + "\n")
        for part in blocks:
            cells = part if isinstance(part, list) else [_cells(part.iloc[:, position]) for position in range(width)]
            lines = list(zip(*cells))
            text = "\n".join(map("\t".join, lines)) + "\n"
            if ('"' not in text and "\r" not in text and "\x00" not in text and text.count("\n") == len(lines)
                    and text.count("\t") == len(lines) * (width - 1)):
                handle.write(text)
            else:
                handle.writelines("\t".join(map(tsv_cell, line)) + "\n" for line in lines)


WRITE_ROWS = 2_500  # rows of a scored table formatted at once


def row_cells(rows: Sequence[dict], columns: Sequence[str]) -> list[list[str]] | None:
    """Each column's cells of a block of recorded rows as text, straight from the rows: what
    ``format_scored(pd.DataFrame(rows, columns=columns))`` gives :func:`write_scored_blocks`, without the frame.

    Only where the text cannot depend on what pandas makes of the whole column: a scored column holding the
    types its conversion takes as they are, and any other column holding text (and None), flags, whole numbers,
    or floats (and None) alone. Otherwise (say whole numbers beside None, which pandas writes as ``3.0``), None:
    the block goes through pandas.
    """
    out = []
    for name in columns:
        cells = _column_cells(name, row_column(rows, name))
        if cells is None:
            return None
        out.append(cells)
    return out


def _column_cells(name: str, values: list) -> list[str] | None:
    kinds = set(map(type, values))
    if name in ("parse_success", "exact_match"):  # astype(bool)
        return ["True" if value else "False" for value in values] if kinds <= {bool} else None
    if name in INT_COLUMNS:  # Int64: whole numbers, blank for None
        if kinds <= {int, type(None)} and all(abs(v) < 2**53 for v in values if v is not None):
            return ["" if value is None else str(value) for value in values]
        return None
    if name in OPTIONAL_BOOL_COLUMNS:  # boolean: blank for None
        return [_FLAGS[value] for value in values] if kinds <= {bool, type(None)} else None
    if name in FLOAT_COLUMNS:  # astype(float).round(FLOAT_DECIMALS), blank for None
        return _float_cells(values, decimals=FLOAT_DECIMALS) if kinds <= {float, int, type(None)} else None
    if kinds <= {str}:
        return values
    if kinds <= {str, type(None)}:
        return ["" if value is None else value for value in values]
    if kinds == {bool}:
        return [_FLAGS[value] for value in values]
    if kinds == {int}:
        return list(map(str, values))
    if kinds <= {float, type(None)}:
        return _float_cells(values)
    return None


_FLAGS = {True: "True", False: "False", None: ""}


def _float_cells(values: list, *, decimals: int | None = None) -> list[str] | None:
    """Floats as a float64 column's cells (NaN and None blank), rounded as pandas rounds; None where pandas would
    write 0.0 and -0.0 alike (as whichever comes first)."""
    import numpy as np

    array = np.array(values, dtype=float)  # None: NaN
    if decimals is not None:
        array = array.round(decimals)
    zeros = array == 0
    if zeros.any() and 0 < np.signbit(array[zeros]).sum() < zeros.sum():
        return None
    cells = list(map(repr, array.tolist()))  # a Python float's repr is numpy's str of the float64
    if np.isnan(array).any():
        cells = ["" if cell == "nan" else cell for cell in cells]
    return cells


def _cells(column) -> list[str]:
    """A column's cells as text, each distinct value formatted once; missing values blank."""
    import pandas as pd

    if column.dtype == object:
        values = column.tolist()
        if set(map(type, values)) <= {str}:  # text as it is: nothing to format or blank
            return values
    if isinstance(column.dtype, pd.StringDtype):  # text with missing cells (NA) blank, not an element at a time
        return column.to_numpy(dtype=object, na_value="").tolist()
    codes, uniques = pd.factorize(column)
    return _values([*map(str, uniques), ""])[codes].tolist()  # code -1 (missing) is the blank


def combination_column(df) -> str:
    """What a results table's rows are grouped by: llm-matrix's ``hyperparameters`` (model and temperature, a
    matrix run) when the table has it and it tells rows apart beyond the model, else ``model``."""
    if "hyperparameters" in df.columns and df["hyperparameters"].nunique() > df["model"].nunique():
        return "hyperparameters"
    return "model"


def summary_lines(df) -> list[str]:
    """The per-model summary printed after scoring a results table.

    CURIE-label validity and enum compliance count only the rows where they are
    defined (parsed responses; templates with a value set), each with its n; a
    model with none is left out, as upstream's summary does.
    """
    key = combination_column(df)
    lines = ["", "env_broad_scale scoring summary", "", "Model ranking (mean ontology_score):"]
    models = df.groupby(key)["ontology_score"].agg(["mean", "count"]).sort_values("mean", ascending=False)
    for model, row in models.iterrows():
        lines.append(f"  {row['mean']:.3f}  {model}  (n={int(row['count'])})")
    lines += ontology_score_intervals(df, key, list(models.index))
    for title, column in [("Exact match rate", "exact_match"), ("Parse rate", "parse_success")]:
        lines += ["", f"{title}:"]
        for model, rate in df.groupby(key)[column].mean().items():
            lines.append(f"  {rate:6.1%}  {model}")
    for title, column in [("CURIE-label validity (parsed responses):", "curie_label_valid"),
                          ("Enum compliance (parsed responses whose template has a value set):", "in_template_enum")]:
        lines += ["", title]
        defined = df[df[column].notna()]
        for model, group in defined.groupby(key):
            lines.append(f"  {group[column].astype(bool).mean():6.1%}  {model}  (n={len(group)})")
        if defined.empty:
            lines.append("     n/a  (no rows)")
    lines += ["", "Relationship breakdown (descendant = more specific, ancestor = vaguer):"]
    relationships = df["relationship"].astype(object).fillna("parse_failure")
    counts = relationships.groupby(df["model"]).value_counts()
    for model in sorted(df["model"].unique()):
        lines.append(f"  {model}: " + ", ".join(f"{k}={n}" for k, n in sorted(counts[model].items())))
    return lines


# a quoted value as a run of plain characters between escapes (not one alternation per character: 5x faster)
STUDY_FIRST = "{'study_name': '"  # how upstream's original_input (a dict as text) starts: what STUDY_FIELD finds
STUDY_FIELD = re.compile(r"""['"]study(?:_name)?['"]\s*:\s*(?:'([^'\\]*(?:\\.[^'\\]*)*)'|"([^"\\]*(?:\\.[^"\\]*)*)")""")


def table_studies(df) -> list[str] | None:
    """Each row's study, from its ``case_original_input`` (``study_name``) or the ``Study:`` line of its prompt
    (``case_input``, ``input`` or ``prompt``); None when some row names none (its items count as independent).

    Each distinct cell is read once (a results table repeats its cases once per model).
    """
    from fieldeval.benchmarks.ebs.suite import study_of

    def from_original(text: str) -> str:
        if text.startswith(STUDY_FIRST):  # upstream's str(dict): the name first, most often without an escape
            end = text.find("'", len(STUDY_FIRST))
            if end >= 0 and "\\" not in text[len(STUDY_FIRST):end]:
                return text[len(STUDY_FIRST):end]
        found = STUDY_FIELD.search(text)
        return (found.group(1) or found.group(2) or "") if found else ""

    readers = [("case_original_input", from_original)]
    readers += [(c, lambda text: study_of({"input": text})) for c in ("case_input", "input", "prompt")]
    studies = [""] * len(df)
    for column, read in readers:
        if column not in df.columns or all(studies):
            continue
        cells = df[column].tolist()
        seen: dict[object, str] = {}
        for i, cell in enumerate(cells):
            if not studies[i] and isinstance(cell, str):
                if cell not in seen:
                    seen[cell] = read(cell)
                studies[i] = seen[cell]
    return studies if all(studies) else None


def ontology_score_intervals(df, key: str, models: Sequence[str]) -> list[str]:
    """The summary's ontology-score intervals, each named by the question it answers: each model's
    :func:`fieldeval.stats.mean_metric` of its scores in the table's row order, at the default seed and resamples,
    clustered by the study each row names (else the one interval of independent items). A run's report (rows in
    node-id order, epochs as one, the run's seed and resamples) agrees with it only where those match."""
    from fieldeval.stats.wording import interval_names

    studies = table_studies(df)
    lines: list[str] = []
    for model in models:
        keep = (df[key] == model) & df["ontology_score"].notna()
        scores = df.loc[keep, "ontology_score"].astype(float).tolist()
        design = Design(tuple(s for s, k in zip(studies, keep) if k)) if studies else Design()
        entry = mean_metric(scores, design=design)
        new, within = interval_names(entry, "studies")
        spans = {"new": entry["ci95"], "within": entry["ci95_within"]}
        if not lines:
            if studies is None:
                lines += ["", "Ontology score ci95 (the table names no study, so rows count as independent; "
                          "add case_original_input or a Study: line to answer on new studies):"]
            else:
                lines += ["", "Ontology score ci95, on new studies and on more samples from these studies "
                          "(as a run's report gives them):"]
        text = {k: "-" if lo is None else f"{lo:.3f}-{hi:.3f}" for k, (lo, hi) in spans.items()}
        if studies is None or new == within:
            lines.append(f"  {text['new']}  {model}")
        else:
            lines.append(f"  {text['new']}  {model}  {new}")
            lines.append(f"  {text['within']}  {model}  {within}")
    return lines


def estimators(rows: list[dict], metrics: Sequence[str] = (*METRICS, *INFORMATION_METRICS)) -> dict[str, Estimator]:
    """Each metric as the mean of its per-row values (None: not defined for the row); a rate lies in 0-1, an
    amount of information from 0 up."""
    return {metric: Estimator.mean(row_column(rows, metric),
                                   (0.0, math.inf) if metric in INFORMATION_METRICS else (0.0, 1.0))
            for metric in metrics}


def aggregate(rows: list[dict], *, seed: int, resamples: int) -> dict:
    """Per-metric values with their two intervals (:func:`fieldeval.stats.estimate`), relationship counts and
    per-stratum scores.

    A metric counts the rows where it is defined: ``curie_label_valid`` and
    ``in_template_enum`` are None (not False) for a response that does not parse.
    Intervals are clustered by the rows' studies when the rows carry them.
    """
    design = Design.of_rows(rows)
    out: dict = {metric: estimate(est, design, seed=seed, resamples=resamples)
                 for metric, est in estimators(rows).items()}
    counts = Counter(r["relationship"] or "parse_failure" for r in rows)
    out["relationship_counts"] = {k: counts.get(k, 0) for k in
                                  ["exact", "descendant", "ancestor", "unrelated", "parse_failure"]}
    details = Counter(r.get("relationship_detail") or "parse_failure" for r in rows)
    out["relationship_detail_counts"] = {k: details.get(k, 0) for k in
                                         ["exact", "descendant", "ancestor", "sibling", "unrelated", "parse_failure"]}
    out["ontology_unknown"] = sum(1 for r in rows if r.get("ontology_status") == "unknown")
    mismatches = Counter(r.get("label_mismatch") for r in rows if r.get("label_mismatch"))
    out["label_mismatch_counts"] = {k: mismatches.get(k, 0) for k in ["none", "wording", "other_term", "unrecognized"]}
    strata: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        strata[row["stratum"]].append(row)
    out["per_stratum"] = {}
    for stratum, group in sorted(strata.items()):
        group_estimators, group_design = estimators(group, ["ontology_score", "exact_match"]), Design.of_rows(group)
        out["per_stratum"][stratum] = {m: estimate(group_estimators[m], group_design, seed=seed, resamples=resamples)
                                       for m in ["ontology_score", "exact_match"]}
    return out


def summary_notes(models: dict[str, dict]) -> list[str]:
    """Under the terminal table, per model: what its answers missed and asserted falsely (information content,
    lower is better; beside upstream's score, never part of it) and how many of its unrelated answers were
    siblings of the truth."""
    from fieldeval.run.summary import format_metric

    lines = []
    for model, entry in models.items():
        if entry.get("ontology_unknown"):
            lines.append(f"ebs {model}: the ontology could not be read, so the ontology checks of "
                         f"{entry['ontology_unknown']} answer(s) are unknown, counted apart: no ontology_score, "
                         "hierarchy or label check for them (unknown, not 0); fix --ontology and score again")
        if (entry.get("missed_information") or {}).get("value") is None:
            continue
        siblings = (entry.get("relationship_detail_counts") or {}).get("sibling", 0)
        labels = entry.get("label_mismatch_counts") or {}
        valid = (entry.get("linkml_valid") or {}).get("value")
        lines.append(f"ebs {model}: missed information {format_metric(entry['missed_information'])}, false "
                     f"information {format_metric(entry.get('false_information'))} (lower is better); "
                     f"{siblings} sibling answer(s); labels: {labels.get('wording', 0)} reworded, "
                     f"{labels.get('other_term', 0)} another term's, {labels.get('unrecognized', 0)} no term's"
                     + ("" if valid is None else f"; valid for the submission schema's slot: {valid:.0%}"))
    return lines


def matrix_params(rows: list[dict]) -> list[str]:
    """The hyperparameter names of a matrix run's rows besides the model, in the matrix's order."""
    names: dict[str, int] = {}
    for row in rows:
        text = "_" + str(row.get("hyperparameters") or "")
        for name in row:
            if name not in ("model", "model_name", "hyperparameters") and f"_{name}=" in text:
                names.setdefault(name, text.index(f"_{name}="))
    return sorted(names, key=names.get)


def write_outputs(rows: list[dict], reports_dir: Path) -> list[Path]:
    """Write the run's scored table as ``reports/ebs/results_envo_scored.tsv`` (upstream's order, then extras), and
    fieldeval's ``results_truth.tsv`` (each row's truth rule and ``truth_conflict``) when the rows carry them."""
    import pandas as pd

    folder = reports_dir / "ebs"
    folder.mkdir(parents=True, exist_ok=True)
    columns = ["model", "case_id", "stratum", "sampleData", "case_ideal", "response_text", *SCORED_COLUMNS, "cached"]
    path = folder / "results_envo_scored.tsv"
    extra = [write_truth_table(rows, folder / "results_truth.tsv")] if rows and "truth_conflict" in rows[0] else []
    if rows and not any("hyperparameters" in row for row in rows):  # a block of rows at a time: no frame of them all
        def block(start: int) -> list[list[str]] | object:
            part = rows[start:start + WRITE_ROWS]
            cells = row_cells(part, columns)
            return cells if cells is not None else format_scored(pd.DataFrame(part, columns=columns))

        blocks = map(block, range(0, len(rows), WRITE_ROWS))
        write_scored_blocks(columns, blocks, path)
        return [path, *extra]
    frame = pd.DataFrame(rows)
    if "hyperparameters" in frame.columns:  # a matrix run: llm-matrix's hyperparameter columns, the model's name
        frame["model"] = frame["model_name"]
        params = [c for c in matrix_params(rows) if c in frame.columns]
        columns = ["hyperparameters", "model", *params, *(["epoch"] if "epoch" in frame.columns else []),
                   *columns[1:]]
        if "epoch" in frame.columns:  # whole numbers, blank for the combinations run once (temperature 0)
            frame["epoch"] = pd.array(frame["epoch"], dtype="Int64")
    write_scored(format_scored(frame.reindex(columns=columns)), path)
    return [path, *extra]
