"""Impact-based forecasting (IBF): reason from a forecast alert to impacts, uncertainty, actions and places.

Items: the IBF corpus (``--ibf-corpus`` / ``--corpus-version``, default
fixtures/ibf/ibf-v1.0.jsonl). Model: ``--model`` (default: the offline
ibf-floor). Scores: the five 0-4 rubric dimensions, by ``--judge-model`` or
else the offline reference scorer; MDS and TPR are aggregated by the plugin.
"""

from __future__ import annotations

import pytest

from fieldeval import completion_fields
from fieldeval.benchmarks.ibf.judge import ask, median_score
from fieldeval.benchmarks.ibf.prompts import JUDGE_SYSTEM, SYSTEM_PROMPT, judge_prompt, render_prompt
from scorers.ibf import score_reference



def solve(case, model, client):
    """The model work of one item: the answer, then (with ``--judge-model``) its ``--judge-epochs`` judgements."""
    context = client.context
    completion = client.complete(model, render_prompt(case), system=SYSTEM_PROMPT,
                                 temperature=context.temperature, max_tokens=context.max_tokens)
    verdicts = []
    if context.judge_model:
        verdicts = ask(client, context.judge_model, judge_prompt(case, completion.text), system=JUDGE_SYSTEM,
                       schema=context.judge_schema, epochs=context.judge_epochs)
    return completion, verdicts


pytestmark = pytest.mark.fieldeval(benchmark="ibf", solver=solve)


def test_ibf(case, model, context, answer, record):
    completion, verdicts = answer
    judge_response, repeats = None, {}
    if verdicts:
        judge_response = verdicts[0].text
        score, judged = median_score([v.text for v in verdicts], scorer=f"judge:{context.judge_model}")
        if len(verdicts) > 1:
            repeats = {"judge_repeats": judged}
    else:
        score = score_reference(completion.text, case.references.model_dump())
    record(
        model=model,
        item_id=case.id,
        hazard=case.hazard,
        region=case.region,
        corpus_version=case.corpus_version,
        response_text=completion.text,
        judge_response=judge_response,
        **score.as_dict(),
        evidence=score.evidence,
        **completion_fields(completion),
        **repeats,
    )
