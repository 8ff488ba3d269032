"""Runs you can trust after Ctrl-C and SIGTERM: the stored run and the report say ``interrupted`` and agree.

The runs read the time a signal arrives at from the test (``TEST_CLOCK``), never from the wall clock: whether
a signal is a repeat of the last one (within a second) is the test's choice, however slow the machine.
"""

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
DEADLINE_S = 120  # generous: only a hang reaches it

TEST_CLOCK = """

import os

from fieldeval.run.signals import Interrupts

_CLOCK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "clock")
_init = Interrupts.__init__


def _test_clock():  # the time the test says it is (the file "clock"; 0 until it writes one)
    try:
        with open(_CLOCK) as clock:
            return float(clock.read())
    except (OSError, ValueError):
        return 0.0


def _init_on_test_clock(self, *args, **kwargs):
    _init(self, *args, **{**kwargs, "clock": _test_clock})


Interrupts.__init__ = _init_on_test_clock
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    made = make_slow_project(pytester, cases=PLANNED)
    with open(made.path / "conftest.py", "a") as conftest:
        conftest.write(TEST_CLOCK)
    return made


def set_clock(project: pytest.Pytester, now: float) -> None:
    """The time every signal from now on arrives at, as the runs' signal handling reads it."""
    (project.path / "clock.tmp").write_text(repr(now))
    os.replace(project.path / "clock.tmp", project.path / "clock")


def wait_until(condition, what: str, proc: subprocess.Popen) -> None:
    """Wait until ``condition()`` holds; the deadline, or the run ending first, fails the test."""
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert proc.poll() is None, f"the run ended before {what}"
        assert time.monotonic() < deadline, f"{what}: not within {DEADLINE_S} s"
        time.sleep(0.05)


def start(project: pytest.Pytester, run_id: str, *extra: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pytest", *SLOW_ARGS, "-n", "2", "--workers-as-given", "--concurrency", "1",
                             "--run-id", run_id, *extra], cwd=project.path, env={**os.environ, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def finished(project: pytest.Pytester) -> int:
    """The items the controller has counted as done (its ``--progress-file``), 0 before the first."""
    try:
        return int(json.loads((project.path / "progress.json").read_text())["done"])
    except (OSError, ValueError, KeyError):
        return 0


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
    proc = start(project, "run_0000abcd", "--progress-file", "progress.json")
    # some items over at the controller, not only some calls made: the solvers run ahead of the items
    wait_until(lambda: finished(project) >= 3, "3 items finished", proc)
    set_clock(project, 100.0)
    os.kill(proc.pid, sig)  # as `timeout` does: the process, then its whole group, at the same instant
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


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Stopped(Exception):
    pass


def _stop(code: int):
    raise Stopped(code)


def deliver(sig: signal.Signals, clock: FakeClock, at: float) -> None:
    """The installed handler, called as the interpreter calls it when ``sig`` arrives at ``at`` on the fake clock."""
    clock.now = at
    signal.getsignal(sig)(sig, None)


def test_a_repeated_signal_within_a_second_is_one_interrupt_and_the_shield_defers(capsys):
    clock = FakeClock()
    interrupts = Interrupts(clock=clock, exit=_stop)
    interrupts.install()
    try:
        with pytest.raises(KeyboardInterrupt):
            deliver(signal.SIGTERM, clock, 0.0)
        deliver(signal.SIGINT, clock, 0.5)  # the process group's copy of the same request: ignored
        interrupts.shield()
        deliver(signal.SIGINT, clock, 5.0)  # while saving: deferred, one line
        assert "SIGINT received while saving the run" in capsys.readouterr().err
        with pytest.raises(Stopped):  # sent again: stop at once
            deliver(signal.SIGINT, clock, 10.0)
    finally:
        interrupts.restore()
    assert interrupts.received == ["SIGTERM", "SIGINT", "SIGINT"]


def test_ctrl_c_pressed_every_0_6_s_while_saving_stops_at_the_third_press(capsys):
    # the regression: each ignored press moved the one-second window, so pressing faster than it never stopped
    clock = FakeClock()
    kept: list[str] = []
    interrupts = Interrupts(on_stop=lambda: kept.append("kept") or "run run_x kept in unstored.json",
                            clock=clock, exit=_stop)
    interrupts.install()
    try:
        interrupts.shield()
        deliver(signal.SIGINT, clock, 0.0)  # deferred
        deliver(signal.SIGINT, clock, 0.6)  # within a second of the first: the same press, ignored
        assert kept == []
        with pytest.raises(Stopped) as stopped:
            deliver(signal.SIGINT, clock, 1.2)  # a second after the first: stop at once
    finally:
        interrupts.restore()
    assert stopped.value.args == (130,) and kept == ["kept"]
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "fieldeval: SIGINT again while saving the run: stopped at once; run run_x kept in unstored.json"
    assert interrupts.received == ["SIGINT", "SIGINT"]


HOLD_SAVE = """

import threading

from fieldeval.store.runs import RunStore

_save = RunStore._save


def _held_save(self, *args, **kwargs):  # the store write starts, then waits far longer than the test does
    open("saving", "w").close()
    threading.Event().wait(300)
    return _save(self, *args, **kwargs)


RunStore._save = _held_save
"""


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_a_second_sigterm_while_storing_stops_at_once_and_keeps_the_run_for_push(project):
    with open(project.path / "conftest.py", "a") as conftest:
        conftest.write(HOLD_SAVE)
    out_path, err_path = project.path / "out.txt", project.path / "err.txt"
    with open(out_path, "w") as out_file, open(err_path, "w") as err_file:
        proc = subprocess.Popen([sys.executable, "-m", "pytest", *SLOW_ARGS, "--concurrency", "4",
                                 "--run-id", "run_0000abd0"], cwd=project.path, env=dict(os.environ),
                                stdout=out_file, stderr=err_file, text=True, start_new_session=True)
    try:
        wait_until(lambda: (project.path / "saving").exists(), "the store write began", proc)
        set_clock(project, 100.0)
        os.kill(proc.pid, signal.SIGTERM)  # while saving: deferred
        wait_until(lambda: "SIGTERM received while saving the run" in err_path.read_text(), "the first SIGTERM "
                   "was deferred", proc)
        set_clock(project, 110.0)  # ten seconds on: a second request, not the first one's copy
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=DEADLINE_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    out, err = out_path.read_text(), err_path.read_text()
    kept = project.path / "reports" / "runs" / "run_0000abd0" / "unstored.json"
    assert proc.returncode == 130, out + err
    assert "Traceback" not in err and "Traceback" not in out
    assert err.strip().splitlines()[-1].startswith("fieldeval: SIGTERM again while saving the run: stopped at once;")
    assert "fieldeval runs push run_0000abd0" in err and kept.is_file()
    with open_store(str(project.path / "reports" / "fieldeval.db")) as store:
        assert [run.run_id for run in store.list_runs()] == []
    (project.path / "conftest.py").write_text((project.path / "conftest.py").read_text().replace(HOLD_SAVE, ""))
    pushed = subprocess.run([sys.executable, "-m", "fieldeval.cli", "runs", "push", "run_0000abd0", "--store",
                             str(project.path / "reports" / "fieldeval.db")], cwd=project.path,
                            capture_output=True, text=True, timeout=120)
    assert pushed.returncode == 0, pushed.stderr
    with open_store(str(project.path / "reports" / "fieldeval.db")) as store:
        assert store.get_run("run_0000abd0")["responses"] == PLANNED
