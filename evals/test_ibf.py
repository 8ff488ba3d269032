"""Impact-based forecasting (IBF): reason from a forecast alert to impacts, uncertainty, actions and places.

Items: the IBF corpus (``--ibf-corpus`` / ``--corpus-version``, default
fixtures/ibf/ibf-v1.0.jsonl). Model: ``--model`` (default: the offline
ibf-floor). Scores: the five 0-4 rubric dimensions, by ``--judge-model`` or
else the offline reference scorer; MDS and TPR are aggregated by the plugin.
"""

from __future__ import annotations

import pytest

from fieldeval import complete, completion_fields
from fieldeval.benchmarks.ibf import JUDGE_SYSTEM, SYSTEM_PROMPT, ibf_context, judge_prompt, render_prompt
from scorers.ibf import parse_judgement, score_reference

pytestmark = pytest.mark.fieldeval(benchmark="ibf", baseline="ibf-floor")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    items = ibf_context(metafunc.config).corpus.items
    metafunc.parametrize("item", items, ids=[item.test_id for item in items])


def test_ibf(item, model, record, pytestconfig):
    ibf = ibf_context(pytestconfig)
    completion = complete(model, render_prompt(item), system=SYSTEM_PROMPT,
                          temperature=ibf.temperature, max_tokens=ibf.max_tokens)
    judge_response = None
    if ibf.judge_model:
        verdict = complete(ibf.judge_model, judge_prompt(item, completion.text), system=JUDGE_SYSTEM,
                           temperature=0.0, schema=ibf.judge_schema)
        judge_response = verdict.text
        score = parse_judgement(verdict.text, scorer=f"judge:{ibf.judge_model}")
    else:
        score = score_reference(completion.text, item.references.model_dump())
    record(
        model=model,
        item_id=item.id,
        hazard=item.hazard,
        region=item.region,
        corpus_version=item.corpus_version,
        response_text=completion.text,
        judge_response=judge_response,
        **score.as_dict(),
        **completion_fields(completion),
    )
