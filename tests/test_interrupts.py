"""Runs you can trust after Ctrl-C and SIGTERM: the stored run and the report say ``interrupted`` and agree."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from fieldeval.run.signals import Interrupts
from fieldeval.store import open_store
from tests.ebs_project import SLOW_ARGS, make_slow_project

PLANNED = 60


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    return make_slow_project(pytester, cases=PLANNED)


def start(project: pytest.Pytester, run_id: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pytest", *SLOW_ARGS, "-n", "2", "--concurrency", "1",
                             "--run-id", run_id], cwd=project.path, env={**os.environ, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def calls(project: pytest.Pytester) -> int:
    path = project.path / "calls.log"
    return len(path.read_text().splitlines()) if path.exists() else 0


def outcome(project: pytest.Pytester, run_id: str) -> tuple[dict, dict, list]:
    """The run's own report, the published report, and the stored run with its responses (None when not stored)."""
    reports = project.path / "reports"
    own = json.loads((reports / "runs" / run_id / "report.json").read_text())
    published = json.loads((reports / "report.json").read_text())
    with open_store(str(reports / "fieldeval.db")) as store:
        stored = [(run, len(store.responses(run.run_id))) for run in store.list_runs()]
    return own, published, stored


def items(report: dict) -> int:
    return report["evals"]["benchmarks"]["ebs"]["slow-ebs"]["items"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_signal_mid_run_stores_an_interrupted_run_with_the_items_that_finished(project, sig):
    proc = start(project, "run_0000abcd")
    deadline = time.monotonic() + 120
    while calls(project) < 10 and time.monotonic() < deadline:
        time.sleep(0.1)
    os.kill(proc.pid, sig)  # as `timeout` does: the process, then its whole group
    os.killpg(proc.pid, sig)
    output, _ = proc.communicate(timeout=120)
    own, published, stored = outcome(project, "run_0000abcd")
    assert proc.returncode == 2, output
    assert own == published
    assert own["exitcode"] == 2 and own["evals"]["status"] == "interrupted"
    assert 0 < items(own) < PLANNED
    (run, responses), = stored
    assert (run.run_id, run.status, run.total_items, responses) == ("run_0000abcd", "interrupted", items(own),
                                                                    items(own))
    status = json.loads((project.path / "reports" / "runs" / "run_0000abcd" / "status.json").read_text())
    assert status["status"] == "interrupted"
    assert "Traceback" not in output


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_signal_after_every_item_finished_still_stores_the_completed_run(project, sig):
    # the regression: a KeyboardInterrupt inside sessionfinish stored no run at all
    proc = start(project, "run_0000abce", SIGNAL_AT="sessionfinish", SIGNAL_NAME=sig)
    output, _ = proc.communicate(timeout=180)
    own, published, stored = outcome(project, "run_0000abce")
    assert proc.returncode == 0, output
    assert f"fieldeval: {sig} received while saving the run; finishing the save first" in output
    assert own == published and own["evals"]["status"] == "completed" and items(own) == PLANNED
    (run, responses), = stored
    assert (run.status, run.total_items, responses) == ("completed", PLANNED, PLANNED)


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_sigterm_before_any_item_ran_reports_interrupted_and_stores_nothing(project):
    proc = start(project, "run_0000abcf", SIGNAL_AT="runtestloop", SIGNAL_NAME="SIGTERM")
    output, _ = proc.communicate(timeout=120)
    own, published, stored = outcome(project, "run_0000abcf")
    assert proc.returncode == 2, output
    assert own == published and own["exitcode"] == 2
    assert own["evals"]["status"] == "interrupted" and own["evals"]["benchmarks"] == {}
    assert stored == []


def test_a_repeated_signal_within_a_second_is_one_interrupt_and_the_shield_defers(capsys):
    interrupts = Interrupts()
    interrupts.install()
    try:
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
        os.kill(os.getpid(), signal.SIGINT)  # the process group's copy of the same request: ignored
        interrupts.shield()
        interrupts._last = float("-inf")
        os.kill(os.getpid(), signal.SIGINT)  # while saving: deferred, one line
        assert "SIGINT received while saving the run" in capsys.readouterr().err
        interrupts._last = float("-inf")
        with pytest.raises(KeyboardInterrupt):  # sent again: stop at once
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
    finally:
        interrupts.restore()
    assert interrupts.received == ["SIGTERM", "SIGINT", "SIGINT"]
