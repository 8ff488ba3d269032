"""A model asked for by an alias is priced, limited and gated as the model id the alias names."""

from __future__ import annotations

import json

import llm
import pytest

from fieldeval import ModelClient
from fieldeval.calls.limits import CallLimits, ModelLimits

pytest_plugins = ["pytester"]


class Priced(llm.Model):
    """An llm model with an alias, answering with usage a price applies to."""

    model_id = "fake-priced-model"
    can_stream = False
    seen: list[str] = []

    def execute(self, prompt, stream, response, conversation):
        response.set_usage(input=1000, output=500)
        yield f"answer to {prompt.prompt}"


class _Plugin:
    @llm.hookimpl
    def register_models(self, register):
        register(Priced(), aliases=("fpm",))


@pytest.fixture
def priced():
    name = "fake-priced-plugin"
    llm.plugins.pm.register(_Plugin(), name=name)
    yield
    llm.plugins.pm.unregister(name=name)


PRICES = {"fake-priced-model": {"input_per_mtok": 2.0, "output_per_mtok": 8.0}}


@pytest.mark.parametrize("asked", ["fake-priced-model", "fpm"])
def test_the_alias_gets_its_models_price(priced, tmp_path, asked):
    client = ModelClient(prices=PRICES, cache_mode="off")
    completion = client.complete(asked, f"question {asked}")
    assert completion.prompt_tokens == 1000 and completion.completion_tokens == 500
    assert completion.est_cost_usd == pytest.approx((1000 * 2.0 + 500 * 8.0) / 1e6)


def test_the_alias_takes_its_models_own_limit(priced):
    limits = CallLimits(concurrency=8, models={"fake-priced-model": ModelLimits(concurrency=1)})
    client = ModelClient(prices=PRICES, cache_mode="off", limits=limits)
    client.complete("fpm", "question")
    assert set(limits._slots) == {None, "fake-priced-model"}  # the model's own one slot, shared with its id

GATES = '''
[tool.fieldeval.thresholds."*"]
"ebs.ontology_score" = 0.1

[tool.fieldeval.thresholds."fake-ebs"]
"ebs.ontology_score" = 0.9
'''


@pytest.mark.parametrize("asked", ["fake-ebs", "febs"])
def test_the_alias_is_gated_by_its_models_own_thresholds(pytester, asked):
    # issue 35: `--model febs` was gated by the "*" default, not by its model id's own table
    from tests.ebs_project import ARGS, FAKE_CONFTEST, make_project

    project = make_project(pytester)
    project.makeconftest(FAKE_CONFTEST.replace("register(Fake())", 'register(Fake(), aliases=("febs",))'))
    (project.path / "pyproject.toml").write_text(GATES)
    args = [asked if arg == "fake-ebs" else arg for arg in ARGS]
    result = project.runpytest_subprocess(*args, "--store", "none", "--max-errors", "1")
    report = json.loads((project.path / "reports" / "report.json").read_text())
    gates = [(g["model"], g["threshold"], g["passed"]) for g in report["evals"]["gates"] if g["metric"] != "errors"]
    assert gates == [(asked, 0.9, False)]  # ontology_score (1 + 0.95 + 0) / 3 is under the model's own 0.9
    assert result.ret == 1
