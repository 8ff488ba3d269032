"""CI gates every model: ``[tool.fieldeval.thresholds."*"]`` is the default, a model's own table overrides it."""

from __future__ import annotations

from fieldeval.run.entries import benchmark_entries
from fieldeval.run.gates import gate_results
from fieldeval.settings import load_thresholds, tool_settings
from tests.conftest import ROOT

EBS_0655 = {"ontology_score": {"value": 0.655, "ci95": [0.60, 0.71], "n": 100}}


def test_the_projects_default_gates_a_real_model_on_the_lower_bound():
    # a model scoring 0.655 on EBS had `gates: []` when only the baselines had thresholds (issue 20)
    gates = load_thresholds(tool_settings(ROOT), [])
    [result] = gate_results(gates, {"ebs": {"gpt-4o-mini": EBS_0655}}, on="lower", ran=["ebs"])
    assert (result["model"], result["threshold"], result["value"], result["passed"]) == (
        "gpt-4o-mini", 0.80, 0.60, False)


def test_a_models_own_table_overrides_the_default_for_that_metric_only():
    tool = {"thresholds": {"*": {"ebs.ontology_score": 0.8, "ebs.parse_success": 0.9},
                           "cheap-model": {"ebs.ontology_score": 0.5}}}
    gates = load_thresholds(tool, [])
    entry = {**EBS_0655, "parse_success": {"value": 0.95, "ci95": [0.9, 1.0], "n": 100}}
    results = gate_results(gates, {"ebs": {"cheap-model": entry, "other": entry}}, on="point", ran=["ebs"])
    by = {(r["model"], r["metric"]): (r["threshold"], r["passed"]) for r in results}
    assert by == {("cheap-model", "ebs.ontology_score"): (0.5, True),
                  ("cheap-model", "ebs.parse_success"): (0.9, True),
                  ("other", "ebs.ontology_score"): (0.8, False),
                  ("other", "ebs.parse_success"): (0.9, True)}


def test_a_run_whose_every_item_errored_fails_the_default_gate():
    # shards without keys errored on every item and merged green; the default gate now fails them
    entries = benchmark_entries({}, {("ebs", "gpt-4o-mini"): 40}, seed=1, resamples=10)
    gates = load_thresholds(tool_settings(ROOT), [])
    [result] = gate_results(gates, entries, on="lower", ran=["ebs"])
    assert result["passed"] is False and result["value"] is None
    assert "scored no items for gpt-4o-mini" in result["reason"]


def test_a_run_with_no_responses_at_all_fails_the_default_gate():
    gates = load_thresholds(tool_settings(ROOT), [])
    results = gate_results(gates, {}, on="lower", ran=["ebs"])
    assert [(r["metric"], r["passed"], r["reason"]) for r in results] == [
        ("ebs.ontology_score", False, "ebs scored no items")]


def test_a_default_every_evaluated_model_overrides_adds_no_failing_gate():
    # the offline baseline's own floor replaces "*"; the default must not then fail for "no items"
    gates = load_thresholds(tool_settings(ROOT), [])
    results = gate_results(gates, {"ebs": {"ebs-baseline": EBS_0655}}, on="point", ran=["ebs"])
    assert [(r["model"], r["threshold"]) for r in results] == [("ebs-baseline", 0.8)]
