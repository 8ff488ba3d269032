"""Honest numbers end to end: clusters in the report, paired compare, the regression gate both ways,
partial runs, resume, and a merge that refuses an incomplete union of shards."""

from __future__ import annotations

import json
import re
import os
import subprocess
import sys

import pytest
import yaml

from fieldeval.store import open_store
from tests.conftest import ROOT, TINY_ENUMS, TINY_SELECTOR
from tests.ebs_project import _case

CONFTEST = '''
import os

import llm

pytest_plugins = ["fieldeval.plugin"]

ANSWERS = {"Iowa": "cropland biome [ENVO:01000245]", "Oregon": "coniferous forest biome [ENVO:01000196]",
           "Maine": "forest biome [ENVO:01000174]"}


class Fake(llm.Model):
    model_id = "fake-ebs"
    can_stream = False

    class Options(llm.Options):
        temperature: float | None = None

    def execute(self, prompt, stream, response, conversation):
        place = next(p for p in ANSWERS if p in prompt.prompt)
        if os.path.exists(f"fail-{place}"):
            raise RuntimeError("provider exploded")
        with open("calls.log", "a") as log:
            log.write(place + "\\n")
        response.set_usage(input=100, output=7)
        yield "Forest, I would say." if os.path.exists(f"worse-{place}") else ANSWERS[place]


class Plugin:
    @llm.hookimpl
    def register_models(self, register):
        register(Fake())


llm.plugins.pm.register(Plugin(), name="fake-honest-plugin")
'''

PLACES = [("Iowa", "soil_data", "cropland biome [ENVO:01000245]"),
          ("Oregon", "soil_data", "forest biome [ENVO:01000174]"),
          ("Maine", "air_data", "forest biome [ENVO:01000174]")]
STUDIES = ["NEON", "EcoFAB", "Seawater", "Stand"]


def _study_case(study: str, place: tuple[str, str, str]) -> dict:
    """A case whose prompt names its study on a ``Study:`` line, as the upstream suite's do."""
    case = _case(*place)
    return {**case, "input": f"{case['input']}\nStudy: {study}\n"}


# four studies of three cases each (one per place): 12 items in 4 clusters
SUITE = {"name": "tiny-studies", "template": "predict_ebs",
         "templates": {"predict_ebs": {"system": "You are an expert. Answer label [CURIE].", "prompt": "{input}"}},
         "cases": [_study_case(study, place) for study in STUDIES for place in PLACES]}
ARGS = ("evals", "--model", "fake-ebs", "--ebs-suite", "suite.yaml", "--ontology", TINY_SELECTOR,
        "--enum-dir", str(TINY_ENUMS), "--retries", "0", "--cache", "off", "-p", "no:cacheprovider",
        "--bootstrap-resamples", "300")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("GITHUB_RUN_ID", "GITHUB_STEP_SUMMARY", "FIELDEVAL_STORE", "PYTEST_XDIST_WORKER")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makeini("[pytest]\n")
    (pytester.path / "evals").mkdir()
    (pytester.path / "evals" / "test_ebs.py").write_text((ROOT / "evals" / "test_ebs.py").read_text())
    (pytester.path / "suite.yaml").write_text(yaml.safe_dump(SUITE))
    return pytester


def _pytest(project: pytest.Pytester, *extra: str) -> subprocess.CompletedProcess:
    store = f"sqlite:///{project.path / 'store.db'}"
    return subprocess.run([sys.executable, "-m", "pytest", *ARGS, "--store", store, *extra], cwd=project.path,
                          env=_env(), capture_output=True, text=True, timeout=300)


def _fieldeval(project: pytest.Pytester, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fieldeval.cli", *args, "--store", str(project.path / "store.db")],
                          cwd=project.path, env=_env(), capture_output=True, text=True, timeout=120)


def _run(project: pytest.Pytester, run_id: str) -> dict:
    with open_store(str(project.path / "store.db")) as store:
        return store.get_run(run_id)


def test_clusters_paired_compare_and_the_regression_gate_both_ways(project):
    base = _pytest(project, "--run-id", "run_base")
    assert base.returncode == 0, base.stdout
    entry = json.loads((project.path / "reports" / "report.json").read_text())["evals"]["benchmarks"]["ebs"]["fake-ebs"]
    assert (entry["ontology_score"]["n"], entry["ontology_score"]["n_clusters"]) == (12, 4)
    assert (entry["planned"], entry["scored"], entry["errors"]) == (12, 12, 0)
    assert "12 items in only 4 studies (under 10): the intervals on new studies are wide and approximate" in base.stdout
    assert "ebs intervals: first on new studies (4 studies: approximate), second on more samples from these 4 studies" \
        in base.stdout
    shown = json.loads(_fieldeval(project, "runs", "show", "run_base", "--json").stdout)
    assert shown["metrics"]["ebs"]["fake-ebs"]["ontology_score"]["n_clusters"] == 4
    assert shown["metrics"]["ebs"]["fake-ebs"]["ontology_score"]["ci95_within"] == entry["ontology_score"]["ci95_within"]
    assert "ebs intervals: first on new studies (4 studies: approximate), second on more samples from these 4 " \
        "studies" in _fieldeval(project, "runs", "show", "run_base").stdout

    (project.path / "worse-Iowa").touch()  # every study loses its exact Iowa answer
    worse = _pytest(project, "--run-id", "run_worse", "--baseline-run", "run_base")
    assert worse.returncode == 1, worse.stdout
    # every study lost the same: no spread, so the drop is certain (p 0) in a family of the 5 headline metrics
    assert ("FAILED gate ebs.ontology_score for fake-ebs: worse than baseline run run_base by -0.333 "
            "(paired ci95 on new clusters: -0.333 to -0.333, 12 items in 4 clusters); a drop beyond -0 has one-sided "
            "p 0, Holm-adjusted 0 over ") in worse.stdout
    report = json.loads((project.path / "reports" / "report.json").read_text())["evals"]
    assert any(g["gate_on"] == "baseline" and not g["passed"] for g in report["gates"])
    tolerated = _pytest(project, "--run-id", "run_tolerated", "--baseline-run", "run_base",
                        "--regression-tolerance", "0.5")
    assert tolerated.returncode == 0, tolerated.stdout

    (project.path / "worse-Iowa").unlink()
    same = _pytest(project, "--run-id", "run_same", "--baseline-run", "run_base")
    assert same.returncode == 0, same.stdout

    compared = _fieldeval(project, "runs", "compare", "run_base", "run_worse", "--json")
    assert compared.returncode == 0, compared.stderr
    diffs = {d["metric"]: d for d in json.loads(compared.stdout)["differences"]}
    base_rows = {r["corpus_item_id"]: r["metrics"]["ontology_score"] for r in _responses(project, "run_base")}
    worse_rows = {r["corpus_item_id"]: r["metrics"]["ontology_score"] for r in _responses(project, "run_worse")}
    by_hand = sum(worse_rows[k] - base_rows[k] for k in base_rows) / len(base_rows)
    within = diffs["ontology_score"].pop("ci95_within")
    # every study's mean drops by the same third: new studies would too (a zero-width ci95); items within a study
    # differ (one of its three drops), so more samples from these studies spread about the drop, never above 0
    assert within[0] < by_hand < within[1] < 0
    assert diffs["ontology_score"] == {"benchmark": "ebs", "metric": "ontology_score", "model": "fake-ebs",
                                       "base_run": "run_base", "run": "run_worse",
                                       "value": pytest.approx(by_hand, abs=1e-6),
                                       "ci95": [pytest.approx(by_hand, abs=1e-6)] * 2,
                                       "n_items": 12, "n_clusters": 4, "p_value": 0.0, "p_holm": 0.0}
    table = _fieldeval(project, "runs", "compare", "run_base", "run_worse")
    assert "paired differences against run_base" in table.stdout and "-0.333" in table.stdout
    report = _fieldeval(project, "report", "run_base", "run_worse", "-o", "report.html")
    assert report.returncode == 0, report.stderr
    html = (project.path / "report.html").read_text()
    assert "Paired differences against run_base" in html and "-0.333" in html
    assert "run_worse ebs fake-ebs: 12 items in only 4 studies (under 10): the intervals on new studies" in html
    # the page marks what `runs compare` marks, by the Holm-adjusted p over the same family, and names both intervals
    family = sum(1 for d in diffs.values() if d["p_value"] is not None)
    assert f"{family} comparisons; * marks a" in html
    rows = {re.search(r'data-label="metric">([a-z_]+)<', row).group(1): row
            for row in re.findall(r"<tr class=\"[a-z]*\">.*?</tr>", html, flags=re.S) if 'data-label="metric"' in row}
    assert rows["ontology_score"].startswith('<tr class="significant">')
    assert f"({within[0]:.3f}&ndash;{within[1]:.3f})" in rows["ontology_score"]
    assert ">4 studies <" in rows["ontology_score"]
    assert "ebs intervals: first interval on new studies (4 studies: approximate), second on more samples from " \
           "these 4 studies" in html
    base_score = entry["ontology_score"]
    assert f'({base_score["ci95_within"][0]:.3f}&ndash;{base_score["ci95_within"][1]:.3f})' in html


def _responses(project: pytest.Pytester, run_id: str) -> list[dict]:
    with open_store(str(project.path / "store.db")) as store:
        return store.responses(run_id)


def test_errored_items_make_a_partial_run_that_resume_completes(project):
    clean = _pytest(project, "--run-id", "run_clean")
    assert clean.returncode == 0, clean.stdout
    (project.path / "calls.log").unlink()
    (project.path / "fail-Maine").touch()
    flaky = _pytest(project, "--run-id", "run_flaky")
    assert flaky.returncode == 1
    entry = json.loads((project.path / "reports" / "report.json").read_text())["evals"]["benchmarks"]["ebs"]["fake-ebs"]
    assert (entry["planned"], entry["scored"], entry["errors"]) == (12, 8, 4)
    assert _run(project, "run_flaky")["status"] == "partial"
    assert "the run is partial: 4 of 12 planned items errored or missing" in flaky.stdout

    refused = _fieldeval(project, "runs", "compare", "run_clean", "run_flaky")
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "run run_flaky is partial" in refused.stderr
    allowed = _fieldeval(project, "runs", "compare", "run_clean", "run_flaky", "--allow-partial", "--json")
    assert allowed.returncode == 0, allowed.stderr
    assert "share 8 of 12 and 8 items" in allowed.stderr

    assert _pytest(project, "--run-id", "run_allowed", "--max-errors", "4").returncode == 0

    (project.path / "fail-Maine").unlink()
    (project.path / "calls.log").unlink()
    resumed = _pytest(project, "--resume", "run_flaky")
    assert resumed.returncode == 0, resumed.stdout
    assert (project.path / "calls.log").read_text().split() == ["Maine"] * 4  # only the errored items ran
    done, whole = _run(project, "run_flaky"), _run(project, "run_clean")
    assert done["status"] == "completed" and done["errors"] == []
    assert done["metrics"] == whole["metrics"]


def test_merge_refuses_shards_that_leave_out_planned_items(project):
    assert _pytest(project, "--run-id", "run_base").returncode == 0
    for group in ("1", "2"):
        shard = _pytest(project, "--splits", "2", "--group", group, "--run-group", "g1", "-k", "not case011")
        assert shard.returncode == 0, shard.stdout
    refused = _fieldeval(project, "runs", "merge", "g1")
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "fieldeval: run group 'g1': the shards' union lacks 1 of 12 planned items "
        "(first: ebs fake-ebs forest_biome-case011); run them (e.g. `pytest evals --resume RUN` on the shard that "
        "left them out), or pass --allow-partial"]
    partial = _fieldeval(project, "runs", "merge", "g1", "--allow-partial", "--json")
    assert partial.returncode == 1  # a partial run fails its gates unless --max-errors allows it
    merged = json.loads(partial.stdout)
    assert merged["status"] == "partial"
    _fieldeval(project, "runs", "delete", merged["run_id"])
    gated = _fieldeval(project, "runs", "merge", "g1", "--allow-partial", "--max-errors", "1",
                       "--baseline-run", "run_base", "--json")
    assert gated.returncode == 0, gated.stderr  # the same answers as the baseline: no regression
    baseline = json.loads(gated.stdout)["payload"]["baseline"]
    score = next(d for d in baseline["differences"] if d["metric"] == "ontology_score")
    assert (score["value"], score["n_items"], score["n_clusters"]) == (0.0, 11, 4)
    assert "share 11 of 12 and 11 items" in baseline["notes"][0]


def test_power_prints_items_and_clusters_needed(project):
    assert _pytest(project, "--run-id", "run_base").returncode == 0
    power = _fieldeval(project, "power", "ebs", "--difference", "0.1", "--from-run", "run_base")
    assert power.returncode == 0, power.stderr
    lines = power.stdout.splitlines()
    assert lines[0].startswith("ebs.ontology_score of fake-ebs in run run_base: ")
    assert "on 12 items in 4 clusters" in lines[0]
    assert lines[1].startswith("to detect a paired difference of 0.1 with 80% power at alpha 0.05")
    assert lines[2].startswith("this suite (12 items, 4 clusters) can detect a difference of about ")
    bad = _fieldeval(project, "power", "ebs", "--difference", "0")
    assert bad.returncode == 2 and bad.stderr.startswith("fieldeval: --difference 0: must be above 0")
    assert lines[3].startswith("note: 4 clusters (under 10)")  # the design effect of 4 clusters is approximate
    wide = _fieldeval(project, "power", "ebs", "--difference", "5", "--from-run", "run_base")
    assert wide.returncode == 2  # a 0-1 metric cannot move by 5: one line, never "1 items"
    assert wide.stderr.strip().splitlines() == [
        "fieldeval: --difference 5: larger than ebs.ontology_score's whole range (0 to 1); pass a difference in "
        "the metric's units, e.g. 0.05"]


def test_power_defaults_to_each_benchmarks_lead_metric():
    from fieldeval.benchmark import benchmarks

    leads = {name: bench.lead_metric for name, bench in benchmarks().items()}
    assert leads == {"ebs": "ontology_score", "ibf": "mean_dimension_score", "microbiorel": "weighted_f1"}
