"""arith: the eval module is the dataset, the model call and the recorded metrics, nothing else."""

import pytest

from fieldeval import completion_fields

pytestmark = pytest.mark.fieldeval(benchmark="arith")


def test_arith(case, model, client, record):
    completion = client.complete(model, case.prompt)
    answer = completion.text.strip()
    record(model=model, case=case.test_id, answer=answer, correct=answer == str(case.a + case.b),
           **completion_fields(completion))
