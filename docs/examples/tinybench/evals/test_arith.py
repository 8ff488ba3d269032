"""arith: the eval module is the dataset, the model work (a solver) and the recorded metrics, nothing else."""

import pytest

from fieldeval import completion_fields


def solve(case, model, client):
    """The model work of one case; the session runs every item's solver ahead, in one bounded pool."""
    return client.complete(model, case.prompt)


pytestmark = pytest.mark.fieldeval(benchmark="arith", solver=solve)


def test_arith(case, model, answer, record):
    text = answer.text.strip()
    record(model=model, case=case.test_id, answer=text, correct=text == str(case.a + case.b),
           **completion_fields(answer))
