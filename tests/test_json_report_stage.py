"""The plugin's quicker pytest-json-report stage entries: each test's setup, call and teardown in the JSON report
are those pytest-json-report writes on its own, whatever the outcome, the captured output or the worker."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

VOLATILE = {"created", "msecs", "relativeCreated", "thread", "threadName", "process", "processName", "taskName"}
OUTCOMES = '''
import logging
import sys

import pytest


@pytest.fixture
def noisy():
    print("set up", flush=True)
    yield 1
    print("torn down", file=sys.stderr)


@pytest.fixture
def broken_setup():
    raise RuntimeError("no database")


@pytest.fixture
def broken_teardown():
    yield
    raise RuntimeError("left a lock")


def test_passes():
    assert True


def test_prints(noisy):
    print("to stdout")
    print("to stderr", file=sys.stderr)
    logging.getLogger("field").warning("a logged <warning> | [x/y]")


def test_fails():
    assert 1 + 1 == 3


@pytest.mark.skip(reason="not here")
def test_skipped():
    pass


@pytest.mark.xfail(reason="known")
def test_xfails():
    assert False


@pytest.mark.xfail(reason="known")
def test_xpasses():
    pass


def test_setup_errors(broken_setup):
    pass


def test_teardown_errors(broken_teardown):
    pass
'''


def _stages(folder, *plugin: str, workers: str) -> dict:
    report = folder / f"report{len(plugin)}{workers}.json"
    result = subprocess.run([sys.executable, "-m", "pytest", *plugin, "-p", "no:cacheprovider", "-n", workers,
                             "--json-report", "--json-report-file", str(report), "--rootdir", str(folder),
                             "-c", os.devnull, str(folder / "test_outcomes.py")],
                            cwd=folder, capture_output=True, text=True, timeout=180)
    assert result.returncode == 1, result.stdout + result.stderr  # the failing tests fail the session
    tests = json.loads(report.read_text())["tests"]
    return {test["nodeid"]: {when: _steady(test[when]) for when in ("setup", "call", "teardown") if when in test}
            for test in tests}


def _steady(stage: dict) -> dict:
    """A stage without what differs from one run to the next: its duration, which worker ran it, and its log
    records' times and thread and process ids."""
    out = {k: v for k, v in stage.items() if k != "duration"}
    if "longrepr" in out:
        out["longrepr"] = re.sub(r"\[gw\d+\]", "[gw]", out["longrepr"])
    if "log" in out:
        out["log"] = [{k: v for k, v in record.items() if k not in VOLATILE} for record in out["log"]]
    return out


@pytest.mark.parametrize("workers", ["0", "2"])
def test_the_stages_are_those_pytest_json_report_writes_alone(tmp_path, workers):
    (tmp_path / "test_outcomes.py").write_text(OUTCOMES)
    ours = _stages(tmp_path, workers=workers)
    alone = _stages(tmp_path, "-p", "no:fieldeval.plugin", workers=workers)
    assert len(alone) == 8 and ours == alone
    assert alone["test_outcomes.py::test_prints"]["call"]["stdout"] == "to stdout\n"
    assert "a logged <warning> | [x/y]" in alone["test_outcomes.py::test_prints"]["call"]["log"][0]["msg"]
    assert "assert (1 + 1) == 3" in alone["test_outcomes.py::test_fails"]["call"]["longrepr"]
    if workers != "0":  # a worker's stage names the worker, even where it passed
        assert alone["test_outcomes.py::test_passes"]["call"]["longrepr"].startswith("[gw")
    else:
        assert "longrepr" not in alone["test_outcomes.py::test_passes"]["call"]
