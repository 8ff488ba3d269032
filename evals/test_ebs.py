"""env_broad_scale (NMDC): predict a biosample's ENVO biome; scored ontology-aware.

Cases: the pinned upstream suite (or ``--ebs-suite``). Model: ``--model``
(default: the offline ebs-baseline). Metrics: every column of the seed's
scored table, aggregated by the plugin.
"""

from __future__ import annotations

import dataclasses

import pytest

from fieldeval import complete, completion_fields
from fieldeval.benchmarks.ebs import ebs_context
from scorers.ebs import score_ebs

pytestmark = pytest.mark.fieldeval(benchmark="ebs", baseline="ebs-baseline")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    cases = ebs_context(metafunc.config).suite.cases
    metafunc.parametrize("case", cases, ids=[case.test_id for case in cases])


def test_ebs(case, model, record, pytestconfig):
    ebs = ebs_context(pytestconfig)
    completion = complete(model, case.prompt, system=ebs.suite.system, temperature=0.0)
    score = score_ebs(completion.text, case.ideal, index=ebs.index, allowed=ebs.enums.get(case.template))
    record(
        model=model,
        case_id=case.case_id,
        stratum=case.stratum,
        sampleData=case.template,
        case_ideal=case.ideal,
        response_text=completion.text,
        ontology_version=ebs.index.version,
        **dataclasses.asdict(score),
        **completion_fields(completion),
    )
