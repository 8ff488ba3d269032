"""The EBS benchmark end to end: a pytest run with a fake model, with and without xdist."""

from __future__ import annotations

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


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_scored_table_and_summary_are_written(project):
    result, _ = run(project)
    table = (project.path / "reports" / "ebs" / "results_envo_scored.tsv").read_text().splitlines()
    assert table[0].startswith("model\tcase_id\tstratum\tsampleData\tcase_ideal\tresponse_text\tparse_success")
    assert len(table) == 4
    result.stdout.fnmatch_lines(["*ebs: value (ci95 lo-hi)*", "*metric*fake-ebs*", "*items*4*", "*errors*1*",
                                 "*ontology_score*0.650 (0.000-1.000)*"])


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_same_numbers_with_and_without_xdist(project):
    _, serial = run(project, "-n", "0", "--cache", "off")
    _, parallel = run(project, "-n", "2", "--cache", "off")
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
