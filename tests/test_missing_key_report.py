"""A model without its key fails once; its remaining items are skipped, one summary line, no FAILURES block each."""

from __future__ import annotations

import pytest

from tests.calls_project import make_calls_project, run_calls


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    return make_calls_project(pytester, cases=12)


def test_a_missing_key_fails_one_item_and_skips_the_rest_of_that_model(project):
    # 99 FAILURES blocks repeated one line (346 lines) for a missing key (issue 20)
    result, report = run_calls(project, "fake-nokey", "--concurrency", "1", "-n", "0")
    outcomes = result.parseoutcomes()
    assert (outcomes.get("failed"), outcomes.get("skipped")) == (1, 11)
    assert result.ret == 1
    assert result.stdout.str().count("_ test_ebs[") == 1  # one FAILURES block: the failure that says what to do
    result.stdout.fnmatch_lines(["*fake-nokey*NeedsKeyException: No key found*",
                                 "fieldeval: fake-nokey: 11 item(s) skipped after its permanent failure, no call made "
                                 "(counted as errors)"])
    entry = report["evals"]["benchmarks"]["ebs"]["fake-nokey"]
    assert (entry["items"], entry["errors"]) == (12, 12)  # not evaluated is not a pass
