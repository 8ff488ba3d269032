"""A model asked for by an alias is priced and limited as the model id the alias names."""

from __future__ import annotations

import llm
import pytest

from fieldeval import ModelClient
from fieldeval.calls.limits import CallLimits, ModelLimits


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
