"""``fieldeval score ebs`` as a drop-in for upstream's envo_scorer.py: options, column order, blanks, numbers."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fieldeval.benchmarks.ebs.tables import (
    SCORE_FIELDS,
    SCORED_COLUMNS,
    aggregate,
    format_scored,
    score_results,
    score_row,
    summary_lines,
    write_outputs,
    write_scored,
)
from tests.conftest import TINY_ENUMS, TINY_SELECTOR
from tests.test_ebs_cli import FOREST, fieldeval, write_tsv

INPUT_COLUMNS = ["model", "case_id", "case_ideal", "response_text", "sampleData"]
UPSTREAM_ADDED = ["parse_success", "pred_label", "pred_curie", "truth_label", "truth_curie", "curie_label_valid",
                  "exact_match", "relationship", "hop_distance", "in_template_enum", "ontology_score",
                  "response_time_s", "prompt_tokens", "completion_tokens", "est_cost_usd"]
EXTRAS = ["hierarchy_score", "enum_score", "lenient_curie", "relationship_detail", "missed_information",
          "false_information", "missed_terms", "false_terms", "label_mismatch", "ontology_status", "linkml_valid",
          "linkml_message"]  # after upstream's
BIOME = "biome [ENVO:00000428]"
TEMPERATE = "temperate coniferous forest biome [ENVO:01000211]"


def score(tmp_path, rows: list[dict], *options: str) -> tuple[list[str], list[dict[str, str]]]:
    """Run ``fieldeval score ebs`` on ``rows``; the written header and rows, cells as raw text."""
    write_tsv(tmp_path / "results.tsv", rows)
    result = fieldeval("score", "ebs", str(tmp_path / "results.tsv"), "--ontology", TINY_SELECTOR,
                       "--enum-dir", str(TINY_ENUMS), *options)
    assert result.returncode == 0, result.stderr
    out = tmp_path / "out" if options else tmp_path
    lines = (out / "results_envo_scored.tsv").read_text().splitlines()
    header = lines[0].split("\t")
    return header, [dict(zip(header, line.split("\t"))) for line in lines[1:]]


def unparsed(model: str = "m") -> dict:
    """A scored row for a response that does not parse, as the scorer's contract has it (blanks, not False)."""
    return {**dict.fromkeys(SCORE_FIELDS), "model": model, "stratum": "forest biome", "parse_success": False,
            "exact_match": False, "hierarchy_score": 0.0, "enum_score": 0.0, "ontology_score": 0.0}


def parsed(tiny_index, tiny_enums, response: str, model: str = "m") -> dict:
    return {**score_row(response, FOREST, "soil_data", index=tiny_index, enums=tiny_enums),
            "model": model, "stratum": "forest biome"}


def test_scored_header_is_the_input_then_upstream_columns_then_fieldeval_extras(tmp_path):
    header, _ = score(tmp_path, [dict(zip(INPUT_COLUMNS, ["m", "c0", FOREST, FOREST, "soil_data"]))])
    assert header == INPUT_COLUMNS + UPSTREAM_ADDED + EXTRAS


def test_output_dir_is_accepted_under_upstream_name(tmp_path):
    header, rows = score(tmp_path, [dict(zip(INPUT_COLUMNS, ["m", "c0", FOREST, FOREST, "soil_data"]))],
                         "--output-dir", str(tmp_path / "out"))
    assert rows[0]["ontology_score"] == "1.0"


def test_numbers_are_written_as_upstream_writes_them(tmp_path):
    rows = [dict(zip(INPUT_COLUMNS, ["m", "c0", BIOME, TEMPERATE, "air_data"])),
            dict(zip(INPUT_COLUMNS, ["m", "c1", FOREST, "marine biome [ENVO:00000447]", "air_data"]))]
    _, (descendant, unrelated) = score(tmp_path, rows)
    # 1 - 0.1 * 3 is 0.6999999999999999 in floating point; upstream-reading scripts compare the text
    assert (descendant["hop_distance"], descendant["hierarchy_score"]) == ("3", "0.7")
    assert (descendant["relationship"], descendant["ontology_score"]) == ("descendant", "0.7")
    assert (unrelated["relationship"], unrelated["hop_distance"], unrelated["in_template_enum"]) == ("unrelated", "", "")
    assert [unrelated[c] for c in ["parse_success", "curie_label_valid", "exact_match"]] == ["True", "True", "False"]


def test_parse_failure_leaves_label_validity_and_enum_blank_in_the_tsv(tmp_path, tiny_index, tiny_enums):
    table = format_scored(pd.DataFrame([unparsed(), parsed(tiny_index, tiny_enums, FOREST)])
                          .reindex(columns=["model", *SCORED_COLUMNS]))
    write_scored(table, tmp_path / "scored.tsv")
    header, *lines = (tmp_path / "scored.tsv").read_text().splitlines()
    failure, success = (dict(zip(header.split("\t"), line.split("\t"))) for line in lines)
    assert [failure[c] for c in ["parse_success", "curie_label_valid", "in_template_enum", "hop_distance"]] == \
        ["False", "", "", ""]
    assert [success[c] for c in ["curie_label_valid", "in_template_enum", "hop_distance"]] == ["True", "True", "0"]


def test_write_scored_writes_what_to_csv_writes_even_when_cells_need_quoting(tmp_path, tiny_index, tiny_enums):
    rows = [parsed(tiny_index, tiny_enums, FOREST), unparsed()]
    rows[1]["lenient_curie"] = 'said "forest"\tthen\nleft'
    table = format_scored(pd.DataFrame(rows).reindex(columns=["model", *SCORED_COLUMNS]))
    for name, frame in [("plain", table.iloc[:1]), ("quoted", table)]:
        write_scored(frame, tmp_path / f"{name}.tsv")
        frame.to_csv(tmp_path / f"{name}_pandas.tsv", sep="\t", index=False)
        assert (tmp_path / f"{name}.tsv").read_text() == (tmp_path / f"{name}_pandas.tsv").read_text()


def test_a_run_table_written_a_block_at_a_time_is_what_to_csv_writes_of_the_whole_frame(tmp_path, tiny_index,
                                                                                       tiny_enums, monkeypatch):
    """The run's scored table is formatted a block of rows at a time; a block whose optional cells are all blank,
    or that lacks a column, reads its types differently, and the table must not show it."""
    from fieldeval.benchmarks.ebs import tables

    monkeypatch.setattr(tables, "WRITE_ROWS", 4)
    rows = []
    for n in range(11):
        row = unparsed() if n < 4 else parsed(tiny_index, tiny_enums, FOREST if n % 3 else "woodland biome [ENVO:01000174]")
        row.update(case_id=f"c{n}", sampleData="soil_data", case_ideal=FOREST, response_text=f"answer {n}",
                   cached=None if n < 4 else n % 2 == 0)
        if n >= 8:
            del row["cached"]
        rows.append(row)
    rows[5]["response_text"] = 'said "forest"\tthen'
    write_outputs(rows, tmp_path)
    columns = ["model", "case_id", "stratum", "sampleData", "case_ideal", "response_text", *SCORED_COLUMNS, "cached"]
    format_scored(pd.DataFrame(rows).reindex(columns=columns)).to_csv(tmp_path / "pandas.tsv", sep="\t", index=False)
    assert (tmp_path / "ebs" / "results_envo_scored.tsv").read_text() == (tmp_path / "pandas.tsv").read_text()


def test_aggregate_counts_label_validity_and_enum_over_parsed_rows_only(tiny_index, tiny_enums):
    # upstream: in_template_enum 1.0 (n=90), curie_label_valid 0.9; counting blanks as False gave 0.5 and 0.45
    rows = ([parsed(tiny_index, tiny_enums, FOREST) for _ in range(81)]
            + [parsed(tiny_index, tiny_enums, "woodland biome [ENVO:01000174]") for _ in range(9)]
            + [unparsed() for _ in range(90)])
    out = aggregate(rows, seed=1, resamples=50)
    assert (out["in_template_enum"]["value"], out["in_template_enum"]["n"]) == (1.0, 90)
    assert out["curie_label_valid"]["value"] == pytest.approx(0.9) and out["curie_label_valid"]["n"] == 90
    assert (out["parse_success"]["value"], out["parse_success"]["n"]) == (0.5, 180)


def test_summary_leaves_out_a_model_with_no_parsed_responses(tiny_index, tiny_enums):
    rows = [parsed(tiny_index, tiny_enums, FOREST, model="good") for _ in range(4)] + \
           [unparsed(model="silent") for _ in range(90)]
    lines = summary_lines(format_scored(pd.DataFrame(rows)))

    def block(title: str) -> list[str]:
        start = lines.index(title) + 1
        return lines[start:lines.index("", start)]

    assert block("CURIE-label validity (parsed responses):") == ["  100.0%  good  (n=4)"]
    assert block("Enum compliance (parsed responses whose template has a value set):") == ["  100.0%  good  (n=4)"]
    assert "  0.000  silent  (n=90)" in lines  # still ranked, with its parse failures scored 0


def test_run_table_keeps_upstream_order_then_extras_then_cached(tmp_path, tiny_index, tiny_enums):
    row = {**parsed(tiny_index, tiny_enums, FOREST), "case_id": "c0", "sampleData": "soil_data",
           "case_ideal": FOREST, "response_text": FOREST, "cached": False, "ontology_version": "x"}
    (path,) = write_outputs([row], tmp_path)
    header = path.read_text().splitlines()[0].split("\t")
    assert header == ["model", "case_id", "stratum", "sampleData", "case_ideal", "response_text",
                      *UPSTREAM_ADDED, *EXTRAS, "cached"]


def test_repeated_rows_score_as_each_row_alone(tiny_index, tiny_enums):
    # score_results scores each distinct (response, ideal, template) once; the table must not show it
    answers = [FOREST, BIOME, TEMPERATE, "no idea", FOREST, "woodland biome [ENVO:01000174]", FOREST]
    templates = ["soil_data", "air_data", "soil_data", "soil_data", "air_data", "soil_data", "soil_data"]
    df = pd.DataFrame({"model": "m", "case_ideal": FOREST, "response_text": answers, "sampleData": templates})
    scored = score_results(df, index=tiny_index, enums=tiny_enums)
    alone = format_scored(pd.DataFrame([score_row(a, FOREST, t, index=tiny_index, enums=tiny_enums)
                                        for a, t in zip(answers, templates)]).reindex(columns=SCORED_COLUMNS))
    pd.testing.assert_frame_equal(scored[SCORE_FIELDS], alone[SCORE_FIELDS], check_dtype=False)


_CELL_VALUES = {
    "text": st.text(max_size=6), "text or none": st.none() | st.text(max_size=6), "flag": st.booleans(),
    "flag or none": st.none() | st.booleans(), "whole": st.integers(-(2**70), 2**70),
    "whole or none": st.none() | st.integers(-5, 5), "float": st.floats(width=64),
    "float or none": st.none() | st.floats(-2, 2) | st.sampled_from([0.0, -0.0, 1e-13, -1e-13, 0.1 + 0.2]),
    "number": st.integers(-3, 3) | st.floats(-3, 3), "anything": st.none() | st.booleans() | st.integers() | st.text(),
}


_BLOCK_COLUMNS = ["model", "case_id", *SCORED_COLUMNS, "cached"]


@pytest.mark.filterwarnings("ignore:invalid value encountered in cast:RuntimeWarning")  # pandas' own, as it refuses
@settings(max_examples=400, deadline=None)
@given(st.sampled_from(_BLOCK_COLUMNS), st.sampled_from(sorted(_CELL_VALUES)), st.data())
def test_cells_formatted_straight_from_the_rows_are_what_pandas_writes(name, kind, data):
    """A column of a block of rows formatted without a frame: its text is what ``format_scored`` and the frame's
    own formatting give it, or it is left to pandas (None). One column varies at a time, beside valid others."""
    from fieldeval.benchmarks.ebs.tables import _cells, _column_cells

    values = data.draw(st.lists(_CELL_VALUES[kind], min_size=1, max_size=8))
    valid = {**dict.fromkeys(_BLOCK_COLUMNS, None), "model": "m", "case_id": "c", "parse_success": True,
             "exact_match": False, "ontology_score": 0.5, "hierarchy_score": 0.5, "enum_score": 0.5, "cached": True}
    rows = [{**valid, name: value} for value in values]
    for row in data.draw(st.lists(st.sampled_from(rows), max_size=2)):  # a row without the field
        row.pop(name, None)
    cells = _column_cells(name, [row.get(name) for row in rows])
    try:
        frame = format_scored(pd.DataFrame(rows, columns=_BLOCK_COLUMNS))
    except (TypeError, ValueError, OverflowError):  # values the scored column refuses: never formatted straight
        assert cells is None
        return
    if cells is not None:
        assert cells == _cells(frame[name])


def test_a_baselines_rows_are_formatted_straight_from_the_rows(tiny_index, tiny_enums):
    from fieldeval.benchmarks.ebs.tables import row_cells

    columns = ["model", "case_id", "stratum", "sampleData", "case_ideal", "response_text", *SCORED_COLUMNS, "cached"]
    rows = [{**row, "model": "m", "case_id": f"c{n}", "stratum": "s", "sampleData": "soil_data", "case_ideal": FOREST,
             "response_text": "x", "response_time_s": 0.25, "prompt_tokens": None, "completion_tokens": None,
             "est_cost_usd": None, "cached": n % 2 == 0}
            for n, row in enumerate([unparsed(), parsed(tiny_index, tiny_enums, FOREST),
                                     parsed(tiny_index, tiny_enums, "woodland biome [ENVO:01000174]")])]
    assert row_cells(rows, columns) is not None  # parsed and unparsed answers alike: no frame needed
