"""The EBS benchmark end to end: a pytest run with a fake model, with and without xdist."""

from __future__ import annotations

import csv
import re

import numpy as np
import pytest

from tests.conftest import TINY_SELECTOR
from tests.ebs_project import make_project, run

@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    return make_project(pytester)


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_run_records_metrics_into_the_json_report(project):
    result, report = run(project)
    result.assert_outcomes(passed=3, failed=1)
    ebs = report["evals"]["benchmarks"]["ebs"]["fake-ebs"]
    assert ebs["ontology_score"]["value"] == pytest.approx((1.0 + 0.95 + 0.0) / 3)
    assert ebs["ontology_score"]["n"] == 3 and len(ebs["ontology_score"]["ci95"]) == 2
    assert ebs["exact_match"]["value"] == pytest.approx(1 / 3)
    assert ebs["in_template_enum"]["n"] == 2  # the air_data item has no value set
    assert ebs["relationship_counts"] == {"exact": 1, "descendant": 1, "ancestor": 0, "unrelated": 0,
                                          "parse_failure": 1}
    assert (ebs["items"], ebs["errors"]) == (4, 1)
    assert set(ebs["per_stratum"]) == {"cropland biome", "forest biome"}
    assert report["evals"]["ontology_version"] == "tinyenvo 2025-01-01"
    assert report["evals"]["run_id"].startswith("run_")


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_items_have_readable_ids_and_wrong_answers_pass(project):
    result, _ = run(project, "-v")
    result.stdout.fnmatch_lines(["*test_ebs[[]cropland_biome-case000-fake-ebs[]] PASSED*",
                                 "*test_ebs[[]forest_biome-case002-fake-ebs[]] PASSED*",
                                 "*test_ebs[[]forest_biome-case003-fake-ebs[]] FAILED*"])


def _summary_cells(stdout: str, model: str) -> dict[str, str]:
    """The terminal summary table's cells for one model, by row: ``{"items": "4", "ontology_score": ...}``."""
    lines = stdout.splitlines()
    start = next(number for number, line in enumerate(lines) if "metric" in line and model in line)
    cells = {}
    for line in lines[start + 1:]:
        if line.lstrip().startswith("\u2514"):  # the table's bottom rule
            break
        parts = [part.strip() for part in line.split("\u2502")]  # its column rules
        if len(parts) == 4 and parts[1]:
            cells[parts[1]] = parts[2]
    return cells


def _value_and_interval(cell: str) -> tuple[float, float, float]:
    """``0.650 (0.000-1.000)`` read as numbers."""
    value, lo, hi = map(float, re.fullmatch(r"(-?[\d.]+) \((-?[\d.]+)-(-?[\d.]+)\)", cell).groups())
    return value, lo, hi


def _bootstrap_ci95(values: np.ndarray, resamples: int = 20_000) -> tuple[float, float]:
    """The 95% percentile interval of the mean over i.i.d. item resamples, computed here from the rows."""
    draws = np.random.default_rng(0).integers(0, len(values), size=(resamples, len(values)))
    return tuple(np.percentile(values[draws].mean(axis=1), [2.5, 97.5]))


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_scored_table_and_summary_are_written(project):
    result, _ = run(project)
    with open(project.path / "reports" / "ebs" / "results_envo_scored.tsv", newline="") as tsv:
        reader = csv.DictReader(tsv, delimiter="\t")
        header, rows = reader.fieldnames, list(reader)
    # the upstream table's leading columns, in its order; one row per answered case (case003's call failed)
    assert header[:7] == ["model", "case_id", "stratum", "sampleData", "case_ideal", "response_text",
                          "parse_success"]
    scores = {row["case_id"]: float(row["ontology_score"]) for row in rows}
    assert scores == pytest.approx({"case000": 1.0, "case001": 0.95, "case002": 0.0})  # exact, 1 hop, unparsed
    cells = _summary_cells(result.stdout.str(), "fake-ebs")
    assert (int(cells["items"]), int(cells["errors"])) == (4, 1)
    # each headline metric printed as the rows' mean and its interval, within the table's 3 decimals
    for metric in ("ontology_score", "exact_match", "hierarchy_score", "parse_success", "in_template_enum"):
        column = [row[metric] for row in rows if row[metric] != ""]  # blank: not defined for the case
        values = np.array([float(v == "True") if v in ("True", "False") else float(v) for v in column])
        value, lo, hi = _value_and_interval(cells[metric])
        assert value == pytest.approx(values.mean(), abs=5e-4), metric
        assert (lo, hi) == pytest.approx(_bootstrap_ci95(values), abs=5e-4), metric
    assert _value_and_interval(cells["ontology_score"]) == pytest.approx((1.95 / 3, 0.0, 1.0), abs=5e-4)


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_same_numbers_with_and_without_xdist(project):
    _, serial = run(project, "-n", "0", "--cache", "off")
    _, parallel = run(project, "-n", "2", "--workers-as-given", "--cache", "off")
    for report in (serial, parallel):  # wall-clock time is the one figure that may differ
        report["evals"]["benchmarks"]["ebs"]["fake-ebs"]["totals"].pop("response_time_s")
    assert serial["evals"]["benchmarks"] == parallel["evals"]["benchmarks"]


def test_unknown_model_is_a_usage_error(project):
    result = project.runpytest_subprocess("evals", "--model", "no-such-model", "--ebs-suite", "suite.yaml",
                                          "--ontology", TINY_SELECTOR, "-p", "no:cacheprovider")
    assert result.ret == 2
    result.stderr.fnmatch_lines(["Exit: --model 'no-such-model' is not a known llm model*"])
    assert "Traceback" not in result.stderr.str()


def test_missing_suite_is_one_line_exit_2(project):
    result = project.runpytest_subprocess("evals", "--ebs-suite", "nope.yaml", "-p", "no:cacheprovider")
    assert result.ret == 2
    result.stderr.fnmatch_lines(["Exit: --ebs-suite nope.yaml: no such file*"])
