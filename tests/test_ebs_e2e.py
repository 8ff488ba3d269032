"""The EBS benchmark end to end: a pytest run with a fake model, with and without xdist."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from tests.conftest import ROOT, TINY_ENUMS, TINY_SELECTOR

FAKE_CONFTEST = '''
import llm

pytest_plugins = ["fieldeval.plugin"]

ANSWERS = {"Iowa": "cropland biome [ENVO:01000245]", "Oregon": "coniferous forest biome [ENVO:01000196]",
           "Maine": "Forest, I would say."}


class Fake(llm.Model):
    model_id = "fake-ebs"
    can_stream = False

    class Options(llm.Options):
        temperature: float | None = None

    def execute(self, prompt, stream, response, conversation):
        if "Atlantis" in prompt.prompt:
            raise RuntimeError("provider exploded")
        assert prompt.system.startswith("You are an expert")
        response.set_usage(input=100, output=7)
        yield next(a for place, a in ANSWERS.items() if place in prompt.prompt)


class Plugin:
    @llm.hookimpl
    def register_models(self, register):
        register(Fake())


llm.plugins.pm.register(Plugin(), name="fake-ebs-plugin")
'''


def _case(place: str, template: str, ideal: str) -> dict:
    prompt = f"Predict.\\nEnvironmental package: {template}\\nGeographic location: USA: {place}\\n"
    return {"input": prompt, "ideal": ideal, "tags": [template, ideal],
            "original_input": {"study_name": "s", "sampleData": template, "env_broad_scale": ideal}}


SUITE = {
    "name": "tiny",
    "template": "predict_ebs",
    "templates": {"predict_ebs": {"system": "You are an expert. Answer label [CURIE].", "prompt": "{input}"}},
    "cases": [
        _case("Iowa", "soil_data", "cropland biome [ENVO:01000245]"),  # exact, in enum: 1.0
        _case("Oregon", "soil_data", "forest biome [ENVO:01000174]"),  # descendant 1 hop: 0.95
        _case("Maine", "air_data", "forest biome [ENVO:01000174]"),  # parse failure: 0
        _case("Atlantis", "soil_data", "forest biome [ENVO:01000174]"),  # model error: the item fails
    ],
}


@pytest.fixture
def project(pytester: pytest.Pytester):
    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makeini("[pytest]\n")
    (pytester.path / "evals").mkdir()
    shutil.copy(ROOT / "evals" / "test_ebs.py", pytester.path / "evals" / "test_ebs.py")
    (pytester.path / "suite.yaml").write_text(yaml.safe_dump(SUITE))
    return pytester


def _run(project: pytest.Pytester, *extra: str):
    result = project.runpytest_subprocess(
        "evals", "--model", "fake-ebs", "--ebs-suite", "suite.yaml", "--ontology", TINY_SELECTOR,
        "--enum-dir", str(TINY_ENUMS), "--retries", "0", "-p", "no:cacheprovider", *extra)
    report = json.loads((project.path / "reports" / "report.json").read_text())
    return result, report


def test_run_records_metrics_into_the_json_report(project):
    result, report = _run(project)
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


def test_items_have_readable_ids_and_wrong_answers_pass(project):
    result, _ = _run(project, "-v")
    result.stdout.fnmatch_lines(["*test_ebs[[]cropland_biome-case000-fake-ebs[]] PASSED*",
                                 "*test_ebs[[]forest_biome-case002-fake-ebs[]] PASSED*",
                                 "*test_ebs[[]forest_biome-case003-fake-ebs[]] FAILED*"])


def test_scored_table_and_summary_are_written(project):
    result, _ = _run(project)
    table = (project.path / "reports" / "ebs" / "results_envo_scored.tsv").read_text().splitlines()
    assert table[0].startswith("model\tcase_id\tstratum\tsampleData\tcase_ideal\tresponse_text\tparse_success")
    assert len(table) == 4
    result.stdout.fnmatch_lines(["*ebs: value (ci95 lo-hi)*", "*fake-ebs*4*1*0.650*"])


def test_same_numbers_with_and_without_xdist(project):
    _, serial = _run(project, "-n", "0")
    _, parallel = _run(project, "-n", "2")
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
