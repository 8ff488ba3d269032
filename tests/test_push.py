"""``runs push`` stores exactly what a session kept, or refuses; a session writes its own run folder, and its kept
file exists before the store can commit, so a kill at any moment leaves a run to push."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from fieldeval.store import open_store
from tests.test_honest_numbers import ARGS, _env, _pytest, project  # noqa: F401  (the project fixture)
from tests.test_interrupts import HOLD_SAVE


def _cli(project, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fieldeval.cli", *args], cwd=project.path, env=_env(),
                          capture_output=True, text=True, timeout=120)


def _store(project) -> str:
    return str(project.path / "store.db")


def _stored_ids(project) -> list[str]:
    with open_store(_store(project)) as store:
        return [run.run_id for run in store.list_runs()]


@pytest.fixture
def twins(project):  # noqa: F811
    """Two sessions with one --run-id: the first stored, the second (other answers) refused and kept."""
    first = _pytest(project, "--run-id", "run_twin")
    assert first.returncode == 0, first.stdout + first.stderr
    folder = project.path / "reports" / "runs" / "run_twin"
    before = {name: (folder / name).read_bytes() for name in ("rows.jsonl", "report.json", "status.json")}
    (project.path / "worse-Iowa").touch()
    second = _pytest(project, "--run-id", "run_twin")
    assert second.returncode == 2, second.stdout + second.stderr
    assert "--as run_NEW" in second.stderr
    assert {name: (folder / name).read_bytes() for name in before} == before  # the first session's files stand
    kept = project.path / "reports" / "runs" / "run_twin.2" / "unstored.json"
    assert kept.is_file()
    assert json.loads((kept.parent / "status.json").read_text())["status"] == "kept"
    return project, kept


def test_push_refuses_a_kept_run_whose_id_holds_another_run_and_keeps_the_file(twins):
    project, kept = twins
    with open_store(_store(project)) as store:
        stored = store.get_run("run_twin")
    refused = _cli(project, "runs", "push", "run_twin", "--store", _store(project))
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "holds another run of that id" in refused.stderr
    assert f"runs push {kept.relative_to(project.path)} --as" in refused.stderr
    assert kept.is_file()
    with open_store(_store(project)) as store:
        assert store.get_run("run_twin")["payload"] == stored["payload"]

    pushed = _cli(project, "runs", "push", str(kept), "--as", "run_twin_b", "--store", _store(project))
    assert pushed.returncode == 0, pushed.stderr
    assert not kept.exists()
    with open_store(_store(project)) as store:
        again = store.get_run("run_twin_b")
        texts = sorted(r["raw_response"] for r in store.responses("run_twin_b"))
    rows = [json.loads(line) for line in (kept.parent / "rows.jsonl").read_text().splitlines()]
    assert again["responses"] == 12 and texts == sorted(row["response_text"] for row in rows)
    assert sum("Forest, I would say." == text for text in texts) == 4  # the second session's own answers


def _edit(path, change) -> None:
    document = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(document))


def _metric(document: dict) -> dict:
    return document["payload"]["benchmarks"]["ebs"]["fake-ebs"]["ontology_score"]


@pytest.mark.parametrize("tamper, said", [
    (lambda kept: _edit(kept, lambda d: _metric(d).update(value=0.999)), "its metrics are not the ones"),
    (lambda kept: (kept.parent / "rows.jsonl").write_text(
        (kept.parent / "rows.jsonl").read_text().replace("cropland", "grassland", 1)), "its rows are not the ones"),
    (lambda kept: _edit(kept, lambda d: (_metric(d).update(value=0.999), d["digest"].update(
        metrics=__import__("fieldeval.store.pending", fromlist=["x"]).digest_of(d["payload"]["benchmarks"])))),
     "its metrics are not what its rows give"),
    (lambda kept: _edit(kept, lambda d: d.update(run_id="run twin", payload={**d["payload"], "run_id": "run twin"})),
     "is not a run id"),
])
def test_push_refuses_a_tampered_kept_run(twins, tamper, said):
    project, kept = twins
    tamper(kept)
    refused = _cli(project, "runs", "push", str(kept), "--as", "run_twin_b", "--store", _store(project))
    assert refused.returncode == 2, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and said in refused.stderr
    assert kept.is_file() and _stored_ids(project) == ["run_twin"]


def _saving(folder) -> bool:
    try:
        return json.loads((folder / "status.json").read_text())["status"] == "saving"
    except (OSError, ValueError, KeyError):
        return False


def _held_in_store_write(project, run_id: str) -> tuple[subprocess.Popen, object]:
    """A pytest session (its own process group) started with HOLD_SAVE, once its store write is held; its folder."""
    with open(project.path / "conftest.py", "a") as conftest:
        conftest.write(HOLD_SAVE)
    store = f"sqlite:///{_store(project)}"
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *ARGS, "--store", store, "--run-id", run_id],
                            cwd=project.path, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    folder = project.path / "reports" / "runs" / run_id
    deadline = time.monotonic() + 240
    while not _saving(folder) and proc.poll() is None and time.monotonic() < deadline:  # the store write is held
        time.sleep(0.1)
    if not _saving(folder):
        os.killpg(proc.pid, signal.SIGKILL)
    assert _saving(folder) and (project.path / "saving").exists() and (folder / "unstored.json").is_file()
    return proc, folder


@pytest.mark.slow  # end to end, a killed subprocess: once in CI (-m slow)
def test_a_session_killed_during_its_store_write_leaves_a_run_that_push_stores(project):  # noqa: F811
    proc, folder = _held_in_store_write(project, "run_killed")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert json.loads((folder / "status.json").read_text())["status"] == "saving"  # never "completed" unstored
    assert (folder / "unstored.json").is_file() and _stored_ids(project) == []
    listed = _cli(project, "runs", "list", "--store", _store(project))
    assert "its save was cut off" in listed.stdout and "run_killed" in listed.stdout, listed.stdout + listed.stderr
    (project.path / "conftest.py").write_text((project.path / "conftest.py").read_text().replace(HOLD_SAVE, ""))
    pushed = _cli(project, "runs", "push", "run_killed", "--store", _store(project))
    assert pushed.returncode == 0, pushed.stderr
    with open_store(_store(project)) as opened:
        run = opened.get_run("run_killed")
    assert (run["status"], run["responses"]) == ("completed", 12)
    assert not (folder / "unstored.json").exists()


TRUNCATE_CACHE = '''

_execute = Fake.execute


def _truncating(self, prompt, stream, response, conversation):  # the cache file is cut while the run goes
    if os.path.exists("reports/responses.sqlite"):
        try:  # answers are solved in threads: the one whose remove succeeds cuts the file, once
            os.remove("truncate-cache")
        except FileNotFoundError:
            pass
        else:
            os.truncate("reports/responses.sqlite", 0)
    yield from _execute(self, prompt, stream, response, conversation)


Fake.execute = _truncating
'''


def test_a_cache_damaged_during_the_run_is_named_in_one_line(project):  # noqa: F811
    with open(project.path / "conftest.py", "a") as conftest:
        conftest.write(TRUNCATE_CACHE)
    args = [a for a in ARGS if a not in ("--cache", "off")]
    warm = subprocess.run([sys.executable, "-m", "pytest", *args, "--store", "none", "-n", "0"], cwd=project.path,
                          env=_env(), capture_output=True, text=True, timeout=300)
    assert warm.returncode == 0 and "response cache" not in warm.stderr, warm.stdout + warm.stderr
    (project.path / "truncate-cache").touch()
    damaged = subprocess.run([sys.executable, "-m", "pytest", *args, "--store", "none", "-n", "0",
                              "--cache", "refresh"], cwd=project.path, env=_env(), capture_output=True, text=True,
                             timeout=300)
    lines = [line for line in damaged.stderr.splitlines() if "response cache" in line]
    assert damaged.returncode == 0, damaged.stdout + damaged.stderr
    assert len(lines) == 1 and "is damaged" in lines[0], damaged.stderr
    assert "Traceback" not in damaged.stderr + damaged.stdout


@pytest.mark.slow  # end to end, a held subprocess: once in CI (-m slow)
def test_a_second_session_leaves_alone_the_run_a_live_session_is_storing(project):  # noqa: F811
    """Two sessions on one reports folder (e.g. two shards of a run group): the one that ends first must not
    store the other's kept copy, which is that live session's own until it commits."""
    held, folder = _held_in_store_write(project, "run_held")
    store = f"sqlite:///{_store(project)}"
    try:
        (project.path / "conftest.py").write_text((project.path / "conftest.py").read_text().replace(HOLD_SAVE, ""))
        second = subprocess.run([sys.executable, "-m", "pytest", *ARGS, "--store", store, "--run-id", "run_other"],
                                cwd=project.path, env=_env(), capture_output=True, text=True, timeout=300)
        assert second.returncode == 0, second.stdout + second.stderr
        assert "kept by an earlier session" not in second.stdout
        assert _stored_ids(project) == ["run_other"] and (folder / "unstored.json").is_file()
        listed = _cli(project, "runs", "list", "--store", _store(project))
        assert "run_held" not in listed.stdout, listed.stdout  # not "cut off": its session is still at it
        pushed = _cli(project, "runs", "push", "run_held", "--store", _store(project))
        assert pushed.returncode == 2 and len(pushed.stderr.strip().splitlines()) == 1, pushed.stderr
        assert "still running" in pushed.stderr
    finally:
        os.killpg(held.pid, signal.SIGKILL)
        held.wait(timeout=60)
    pushed = _cli(project, "runs", "push", "run_held", "--store", _store(project))  # its session gone: it is left
    assert pushed.returncode == 0, pushed.stderr
    assert sorted(_stored_ids(project)) == ["run_held", "run_other"]
