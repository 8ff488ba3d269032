"""The MicrobioRel benchmark end to end: a pytest run with a fake model, direct, summarised and filtered."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT

FAKE_CONFTEST = r'''
import re

import llm

pytest_plugins = ["fieldeval.plugin"]


class Fake(llm.Model):
    model_id = "fake-re"
    can_stream = False

    class Options(llm.Options):
        temperature: float | None = None

    def execute(self, prompt, stream, response, conversation):
        text = prompt.prompt
        assert prompt.system.startswith("You are an expert in biomedical relation extraction")
        response.set_usage(input=100, output=3)
        if text.startswith("Summarize"):
            yield re.search(r"^Entity 1: (.*) \(type", text, re.M).group(1) + " increase the other one."
        elif "Summary of their relation:" in text:
            yield "Answer: increase." if " increase the other one." in text else "no summary seen"
        elif "characters 409-414" in text:  # pair000's first entity: a chatty answer
            yield "I think it is Location_of"
        else:
            offered = re.findall(r"^- (\S+)$", text, re.M)
            yield f"'{offered[0]}'" if len(offered) < 23 else "None."


class Plugin:
    @llm.hookimpl
    def register_models(self, register):
        register(Fake())


llm.plugins.pm.register(Plugin(), name="fake-re-plugin")
'''

ITEMS = "pair000 or pair001 or pair002 or pair003 or pair004 or pair005"
N_ITEMS = 6


@pytest.fixture
def project(pytester: pytest.Pytester, data_dir):
    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makeini("[pytest]\n")
    (pytester.path / "evals").mkdir()
    shutil.copy(ROOT / "evals" / "test_microbiorel.py", pytester.path / "evals" / "test_microbiorel.py")
    return pytester


@pytest.fixture(scope="module")
def test_cases(data_dir):
    from fieldeval.benchmarks.microbiorel.cases import load_split

    return load_split("test")[:N_ITEMS]


def _run(project: pytest.Pytester, *extra: str):
    result = project.runpytest_subprocess("evals", "--model", "fake-re", "-k", ITEMS, "--cache", "off",
                                          "--bootstrap-resamples", "200", "-p", "no:cacheprovider", *extra)
    report = json.loads((project.path / "reports" / "report.json").read_text())
    return result, report["evals"]["benchmarks"]["microbiorel"]["fake-re"]


def _expected(golds, preds) -> dict:
    from scorers.microbiorel import score_relations

    return score_relations(golds, preds).__dict__


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_direct_run_records_metrics_into_the_json_report(project, test_cases):
    result, entry = _run(project)
    result.assert_outcomes(passed=N_ITEMS)
    golds = [case.gold for case in test_cases]
    expected = _expected(golds, [None] + ["None"] * (N_ITEMS - 1))
    for metric in ["weighted_f1", "weighted_precision", "weighted_recall", "macro_f1", "accuracy", "parse_rate"]:
        assert entry[metric]["value"] == pytest.approx(expected[metric], abs=1e-6), metric
        assert entry[metric]["n"] == N_ITEMS and len(entry[metric]["ci95"]) == 2
    assert entry["parse_rate"]["value"] == pytest.approx(5 / 6, abs=1e-6)
    assert len(entry["per_class"]) == 23 and entry["per_class"]["None"]["support"] == golds.count("None")
    assert sum(map(sum, entry["confusion_matrix"]["matrix"])) == N_ITEMS
    assert (entry["items"], entry["errors"], entry["re_mode"]) == (N_ITEMS, 0, ["direct"])
    result.stdout.fnmatch_lines(["*microbiorel: value (ci95 lo-hi)*", "*fake-re*",
                                 "*fake-re: 1 of 6 responses are not a class*"])


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_items_have_readable_ids(project):
    result, _ = _run(project, "-v")
    result.stdout.fnmatch_lines(["*test_microbiorel[[]pair000-brain-glia_cells-fake-re[]] PASSED*"])


def test_summarize_mode_classifies_from_the_summary(project, test_cases):
    result, entry = _run(project, "--re-mode", "summarize")
    result.assert_outcomes(passed=N_ITEMS)
    golds = [case.gold for case in test_cases]
    assert entry["parse_rate"]["value"] == 1.0
    assert entry["accuracy"]["value"] == pytest.approx(golds.count("increase") / N_ITEMS, abs=1e-6)
    assert entry["re_mode"] == ["summarize"]
    import pandas as pd

    table = pd.read_csv(project.path / "reports" / "microbiorel" / "predictions.tsv", sep="\t",
                        dtype=str, keep_default_na=False)
    assert list(table["summary_text"]) == [f"{case.source.name} increase the other one." for case in test_cases]
    assert set(table["prediction"]) == {"increase"}


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_filtered_candidates_offer_only_the_pairs_filtered_labels(project, test_cases):
    from fieldeval.benchmarks.microbiorel.prompts import candidate_classes

    result, entry = _run(project, "--re-candidates", "filtered")
    result.assert_outcomes(passed=N_ITEMS)
    golds = [case.gold for case in test_cases]
    firsts = [candidate_classes(case, "filtered")[0] for case in test_cases]
    expected = _expected(golds, [None, *firsts[1:]])
    assert entry["weighted_f1"]["value"] == pytest.approx(expected["weighted_f1"], abs=1e-6)
    assert entry["re_candidates"] == ["filtered"]


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_cli_rescoring_of_the_run_agrees_with_the_report(project):
    _, entry = _run(project)
    out = subprocess.run([sys.executable, "-m", "fieldeval.cli", "score", "re", "--json",
                          str(project.path / "reports" / "microbiorel" / "predictions.tsv")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    scores = json.loads(out.stdout)
    for metric in ["weighted_f1", "macro_f1", "accuracy", "parse_rate"]:
        assert scores[metric] == pytest.approx(entry[metric]["value"], abs=1e-6)


def test_bad_re_mode_is_a_usage_error(project):
    result = project.runpytest_subprocess("evals", "--model", "fake-re", "--re-mode", "chatty", "-p", "no:cacheprovider")
    assert result.ret == 2  # fieldeval checks the value: one line naming the option, the value and the choices
    result.stderr.fnmatch_lines(["*--re-mode 'chatty': not a choice; choose from *direct*summarize*"])
