"""env_broad_scale (NMDC): predict a biosample's ENVO biome; scored ontology-aware.

Cases: the pinned upstream suite (or ``--ebs-suite``). Model: ``--model``
(default: the offline ebs-baseline). ``solve`` is the model work (run ahead in
the session's pool); the item scores its ``answer``. Metrics: every column of the seed's
scored table, aggregated by the plugin.
"""

from __future__ import annotations

import pytest

from fieldeval import completion_fields


def solve(case, model, client):
    """The model work of one case: one call (run ahead in the session's bounded pool)."""
    context = client.context
    return client.complete(model, case.prompt, system=context.suite.system, temperature=0.0,
                           max_tokens=context.max_tokens)


pytestmark = pytest.mark.fieldeval(benchmark="ebs", solver=solve)


def test_ebs(case, model, context, answer, record):
    completion = answer
    # --ebs-truth: the case's CURIE (upstream's rule), its label's term, or the closest of its references
    score, matched, conflict = context.score(case, completion.text)
    record(
        model=model,
        case_id=case.case_id,
        stratum=case.stratum,
        sampleData=case.template,
        case_ideal=case.ideal,
        response_text=completion.text,
        ontology_version=context.index.version,
        truth_rule=context.truth_rule,
        truth_conflict=conflict,
        matched_reference=matched,
        **score.columns(),
        **context.validated(case.template, completion.text),  # the submission schema's slot, by LinkML
        **completion_fields(completion),
    )
