"""``--resume`` refuses what it cannot do and never deletes: the run's own settings, one lease, one transaction."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fieldeval.errors import UsageError
from fieldeval.store import open_store
from fieldeval.store.payload import flatten_run
from tests.conftest import ROOT
from tests.test_honest_numbers import ARGS, _env, _run, project  # noqa: F401  (the project fixture)
from tests.test_store_api import ebs_run

NO_MODEL = tuple(a for i, a in enumerate(ARGS) if a != "--model" and (i == 0 or ARGS[i - 1] != "--model"))


def _pytest(project, *args: str) -> subprocess.CompletedProcess:
    store = f"sqlite:///{project.path / 'store.db'}"
    return subprocess.run([sys.executable, "-m", "pytest", *args, "--store", store], cwd=project.path, env=_env(),
                          capture_output=True, text=True, timeout=300)


def _calls(project) -> list[str]:
    log = project.path / "calls.log"
    return log.read_text().split() if log.exists() else []


def _stored(project, run_id: str) -> tuple:
    """What must not change when a resume is refused: status, counts, label, models and every response's text."""
    run = _run(project, run_id)
    with open_store(str(project.path / "store.db")) as store:
        texts = sorted((r["corpus_item_id"], r["raw_response"]) for r in store.responses(run_id))
    return run["status"], run["items_done"], run["label"], list(run["models"]), run["completed_at"], texts


@pytest.fixture
def partial(project):  # noqa: F811
    """run_flaky: 12 planned items of fake-ebs, labelled, whose 4 Maine items errored."""
    (project.path / "more").mkdir()
    (project.path / "more" / "test_ibf.py").write_text((ROOT / "evals" / "test_ibf.py").read_text())
    (project.path / "fail-Maine").touch()
    flaky = _pytest(project, *ARGS, "--run-id", "run_flaky", "--run-label", "first try")
    assert flaky.returncode == 1, flaky.stdout + flaky.stderr
    assert _run(project, "run_flaky")["status"] == "partial"
    (project.path / "fail-Maine").unlink()
    (project.path / "calls.log").unlink()
    return project


def test_resume_without_model_takes_the_runs_own_models_and_label(partial):
    resumed = _pytest(partial, *NO_MODEL, "--resume", "run_flaky")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert _calls(partial) == ["Maine"] * 4  # the errored items of the run's model, and nothing else
    run = _run(partial, "run_flaky")
    assert (run["status"], run["items_done"], run["label"], list(run["models"])) == (
        "completed", 12, "first try", ["fake-ebs"])


@pytest.mark.parametrize("extra, named", [
    (("more/test_ibf.py", "--resume", "run_flaky"), "this command selects ibf"),
    ((*ARGS, "--resume", "run_flaky", "--model", "other-model"), "--model fake-ebs, other-model"),
    ((*ARGS, "--resume", "run_flaky", "--run-label", "second"), "--run-label second (the run's: first try)"),
    ((*ARGS, "--resume", "run_flaky", "--seed", "7"), "--seed 7"),
])
def test_a_resume_that_differs_from_its_run_is_refused_and_changes_nothing(partial, extra, named):
    before = _stored(partial, "run_flaky")
    refused = _pytest(partial, *extra)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    lines = [line for line in (refused.stdout + refused.stderr).splitlines() if "--resume run_flaky" in line]
    assert len(lines) == 1 and named in lines[0], refused.stdout + refused.stderr
    assert "Traceback" not in refused.stderr
    assert _calls(partial) == []
    assert _stored(partial, "run_flaky") == before


def test_resume_of_a_completed_run_says_so_and_changes_nothing(project):  # noqa: F811
    assert _pytest(project, *ARGS, "--run-id", "run_clean").returncode == 0
    (project.path / "calls.log").unlink()
    before = _stored(project, "run_clean")
    again = _pytest(project, *NO_MODEL, "--resume", "run_clean")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "run_clean is complete: nothing to resume" in again.stdout + again.stderr
    assert _calls(project) == [] and _stored(project, "run_clean") == before


def test_a_second_resume_of_one_run_is_refused_while_the_first_holds_it(partial):
    with open_store(str(partial.path / "store.db")) as store:
        store.take_lease("run_flaky", "another-host:4242")  # a session elsewhere is resuming it
    before = _stored(partial, "run_flaky")
    refused = _pytest(partial, *NO_MODEL, "--resume", "run_flaky")
    assert refused.returncode == 2
    assert "another session is resuming it (another-host:4242" in refused.stdout + refused.stderr
    assert _calls(partial) == [] and _stored(partial, "run_flaky") == before


def test_a_lease_left_by_a_dead_process_is_taken_over(store_url):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    import socket

    with open_store(store_url) as store:
        store.take_lease("run_x", f"{socket.gethostname()}:{int(dead.stdout)}")
        store.take_lease("run_x", "me:1")  # the dead holder's lease goes
        with pytest.raises(UsageError, match="another session is resuming it"):
            store.take_lease("run_x", "me:2")
        store.release_lease("run_x", "me:1")
        store.take_lease("run_x", "me:2")


def test_a_replacement_that_fails_leaves_the_old_run_standing(store_url):
    with open_store(store_url) as store:
        store.save_run(*ebs_run("run_00000001", {"m": 0.5}), {"status": "partial"})
        store.save_run(*ebs_run("run_00000002", {"m": 0.7}))
        store.take_lease("run_00000001", "me:1")
        payload, rows = ebs_run("run_00000002", {"m": 0.9})  # its id is taken: the save fails after the delete
        flat = flatten_run(payload, rows, {}, store.columns)
        with pytest.raises(UsageError, match="already in the store"):
            store.save_flat(flat, rows, {}, replaces="run_00000001", lease="me:1")
        assert store.get_run("run_00000001")["status"] == "partial"
        assert len(store.responses("run_00000001")) == 3
        with pytest.raises(UsageError, match="no longer this session's"):
            store.save_flat(flatten_run(*ebs_run("run_00000001", {"m": 0.9}), {}, store.columns),
                            ebs_run("run_00000001", {"m": 0.9})[1], {}, replaces="run_00000001", lease="me:2")
        assert json.dumps(store.get_run("run_00000001")["metrics"]).count("0.5") >= 1


@pytest.mark.parametrize("again", [(), ("-k", "case000 or case001 or case002 or case003 or case004 or case005")])
def test_resume_completes_the_runs_own_plan_and_keeps_its_created_at(project, again):  # noqa: F811
    # with the same -k the run grew to the whole module and stayed interrupted; without one (as the failure
    # line advised) a 3-item run grew to every item of the module; either way created_at changed
    selected = ("-k", "case000 or case001 or case002 or case003 or case004 or case005")
    (project.path / "fail-Maine").touch()
    first = _pytest(project, *ARGS, *selected, "--run-id", "run_part")
    assert first.returncode == 1, first.stdout + first.stderr
    before = _run(project, "run_part")
    assert (before["status"], before["items_planned"]) == ("partial", 6)
    (project.path / "fail-Maine").unlink()
    (project.path / "calls.log").unlink()
    resumed = _pytest(project, *ARGS, *again, "--resume", "run_part")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    after = _run(project, "run_part")
    assert (after["status"], after["items_planned"], after["items_done"]) == ("completed", 6, 6)
    assert after["created_at"] == before["created_at"]
    assert all(place == "Maine" for place in _calls(project)) and _calls(project)  # only its errored items ran
