"""The eval fixtures an item's own function asks for are filled in its setup, not by pytest's fixture machinery:
each item gets the values pytest's fill would give it, a fixture of the user's that asks for one of them gets the
item's one value, a conftest's override of one is the one used, and --setup-show still shows every fixture."""

from __future__ import annotations

import json

import pytest

from tests.ebs_project import ARGS, FAKE_CONFTEST, make_project

EVAL_FIXTURES = ("case", "model", "context", "answer", "record")


def _rows(project: pytest.Pytester) -> list[dict]:
    reports = project.path / "reports"
    pointer = json.loads((reports / "report.json").read_text())["evals_rows"]
    rows = [json.loads(line) for line in (reports / pointer["path"]).read_text().splitlines()]
    return sorted(rows, key=lambda row: row["case_id"])


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    return make_project(pytester)


def test_an_item_records_what_pytest_s_own_fill_gives_it(project):
    result = project.runpytest_subprocess(*ARGS, "--cache", "off")
    result.assert_outcomes(passed=3, failed=1)
    filled = _rows(project)
    (project.path / "reports").rename(project.path / "reports-filled")
    # --setup-show leaves every fixture to pytest (it reports each one): the same rows, value for value
    shown = project.runpytest_subprocess(*ARGS, "--cache", "off", "--setup-show")
    shown.assert_outcomes(passed=3, failed=1)
    pytests = _rows(project)
    assert len(filled) == 3
    timing = {"response_time_s"}
    assert [{k: v for k, v in row.items() if k not in timing} for row in filled] == \
        [{k: v for k, v in row.items() if k not in timing} for row in pytests]


def test_setup_show_still_shows_each_eval_fixture_of_each_item(project):
    result = project.runpytest_subprocess(*ARGS, "--setup-show")
    shown = result.stdout.str()
    for name in EVAL_FIXTURES:
        assert shown.count(f"SETUP    F {name}") == 4, name


def test_a_user_fixture_that_asks_for_the_answer_gets_the_one_the_item_s_body_gets(project):
    # the answer is taken from the solvers once per item: a second taking would hand the body another object
    project.makeconftest(FAKE_CONFTEST + '''

import pytest


@pytest.fixture(autouse=True)
def watch_answer(request, answer, case):
    yield
    if "answer" in request.node.funcargs:
        assert request.node.funcargs["answer"] is answer, "the body got another answer than the fixture"
        with open("watched.log", "a") as log:
            log.write(case.case_id + "\\n")
''')
    result = project.runpytest_subprocess(*ARGS)
    result.assert_outcomes(passed=3, failed=1)
    assert len((project.path / "watched.log").read_text().splitlines()) == 4


def test_a_conftest_s_own_model_fixture_is_the_one_each_item_gets(project):
    project.makeconftest(FAKE_CONFTEST + '''

import pytest


@pytest.fixture
def model(request):
    with open("override.log", "a") as log:
        log.write(request.param + "\\n")
    return request.param
''')
    result = project.runpytest_subprocess(*ARGS)
    result.assert_outcomes(passed=3, failed=1)
    assert (project.path / "override.log").read_text().splitlines() == ["fake-ebs"] * 4
