"""MicrobioRel (El Khettari et al. 2025): classify the relation between two entities in a microbiome paragraph.

Cases: the 375 test entity pairs. Model: ``--model`` (default: the offline
re-baseline). ``--re-mode summarize`` asks for an ``Entity1 Relation Entity2``
sentence first; ``--re-candidates filtered`` offers only the pair's
filtered_labels. Metrics: exact-match weighted F1 and friends, aggregated by
the plugin.
"""

from __future__ import annotations

import pytest

from fieldeval import completion_fields
from fieldeval.benchmarks.microbiorel.prompts import SYSTEM_PROMPT, classify_prompt, summary_prompt
from scorers.microbiorel import normalize_relation



def solve(case, model, client):
    """The model work of one pair: the summary (``--re-mode summarize``), then the relation; both completions."""
    context, first = client.context, None
    if context.mode == "summarize":
        first = client.complete(model, summary_prompt(case), system=SYSTEM_PROMPT, temperature=0.0,
                                max_tokens=context.max_tokens)
    prompt = classify_prompt(case, classes=context.classes_for(case), summary=first.text if first else None)
    return first, client.complete(model, prompt, system=SYSTEM_PROMPT, temperature=0.0, max_tokens=context.max_tokens)


pytestmark = pytest.mark.fieldeval(benchmark="microbiorel", solver=solve)


def test_microbiorel(case, model, context, answer, record):
    first, completion = answer
    calls = [first] if first is not None else []
    summary = first.text if first is not None else None
    prediction = normalize_relation(completion.text)
    record(
        model=model,
        case_id=case.case_id,
        annotation_id=case.annotation_id,
        from_entity_name=case.source.name,
        from_entity_label=case.source.type,
        to_entity_name=case.target.name,
        to_entity_label=case.target.type,
        re_mode=context.mode,
        re_candidates=context.candidates,
        gold=case.gold,
        summary_text=summary,
        response_text=completion.text,
        prediction=prediction,
        valid=prediction is not None,
        correct=prediction == case.gold,
        **completion_fields(*calls, completion),
    )
