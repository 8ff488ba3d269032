"""A run is never lost, and bad options cost nothing.

- the store goes away between the first call and the save: the session exits 2 with one line, keeps
  the run in ``reports/runs/<run_id>/unstored.json``, and ``fieldeval runs push`` (or the next
  session) stores the same run, same id, same rows;
- odd options end the session with one line and exit 2 before any model call (the fake model logs
  every call to ``calls.log``);
- a disk that fills up mid-run (a real 1 MiB tmpfs where this runs as root, else skipped) ends with
  one line and exit 2, with no half-written file and every answered call still in the cache.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import subprocess
import sys
from pathlib import Path

import psycopg  # noqa: F401  (imported before pytester's module snapshot: a later re-import would split its classes)
import pytest
import sqlalchemy.dialects.postgresql.psycopg  # noqa: F401  (the same)

from tests.ebs_project import ARGS, make_project

BREAK_STORE_CONFTEST = '''

@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session):
    """The store goes down after the last item, before the session begins to save the run."""
    import os

    import psycopg

    if os.environ.get("DROP_SCHEMA"):
        with psycopg.connect(os.environ["PG_BASE"], autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {os.environ['DROP_SCHEMA']} CASCADE")
    if os.environ.get("BREAK_SQLITE"):
        os.rename(os.environ["BREAK_SQLITE"], os.environ["BREAK_SQLITE"] + ".away")
        os.makedirs(os.environ["BREAK_SQLITE"])  # a folder where the database was: it cannot be opened
    return (yield)


def pytest_runtest_teardown(item):
    """The disk fills up once the first item is done (another process writing, say)."""
    import os

    if os.environ.get("INJECT_ENOSPC") and "case000" in item.nodeid:  # where no tmpfs can be mounted
        import errno

        import fieldeval.run.progress

        def full(*args, **kwargs):
            raise OSError(errno.ENOSPC, "No space left on device")

        fieldeval.run.progress.write_atomic = full
    if os.environ.get("FILL_DISK") and "case000" in item.nodeid:
        stat = os.statvfs(os.environ["FILL_DISK"])
        with open(os.path.join(os.environ["FILL_DISK"], "ballast"), "wb") as ballast:
            try:
                ballast.write(b"x" * (stat.f_bavail * stat.f_frsize + 65536))
                ballast.flush()
            except OSError:
                pass
'''


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    make_project(pytester)
    conftest = pytester.path / "conftest.py"
    conftest.write_text("import pytest\n" + conftest.read_text() + BREAK_STORE_CONFTEST)
    return pytester


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fieldeval.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def _error_lines(result) -> list[str]:
    return [line for line in (result.stdout.str() + "\n" + result.stderr.str()).splitlines()
            if line.startswith("fieldeval: run ")]


def test_store_gone_at_the_save_keeps_the_run_and_runs_push_stores_it(project, monkeypatch):
    from fieldeval.store import open_store
    from fieldeval.store.pending import read_unstored

    store = project.path / "db" / "store.db"
    monkeypatch.setenv("BREAK_SQLITE", str(store))
    result = project.runpytest_subprocess(*ARGS, "--cache", "off", "--run-id", "run_keep0001", "--store", str(store))
    assert result.ret == 2
    lines = _error_lines(result)
    assert len(lines) == 1 and "run_keep0001 not stored" in lines[0] and "fieldeval runs push run_keep0001" in lines[0]
    kept = project.path / "reports" / "runs" / "run_keep0001" / "unstored.json"
    rows = read_unstored(kept).rows["ebs"]  # the rows file beside it, checked against its digest
    assert len(rows) == 3  # four cases, one errored

    (store).rmdir()
    os.rename(str(store) + ".away", store)  # the store is back
    monkeypatch.delenv("BREAK_SQLITE")
    pushed = _cli("runs", "push", "run_keep0001", "--store", str(store), cwd=project.path)
    assert pushed.returncode == 0, pushed.stderr
    assert not kept.exists()
    with open_store(str(store)) as opened:
        run = opened.get_run("run_keep0001")
        assert run["status"] == "partial" and run["responses"] == 3
        stored = sorted(r["raw_response"] for r in opened.responses("run_keep0001"))
    assert stored == sorted(r["response_text"] for r in rows)  # the same rows
    again = _cli("runs", "push", "run_keep0001", "--store", str(store), cwd=project.path)
    assert again.returncode == 2 and again.stderr.count("\n") == 1  # nothing left to push: one line


def test_the_next_session_pushes_a_kept_run_on_its_own(project, monkeypatch):
    from fieldeval.store import open_store

    store = project.path / "store.db"
    monkeypatch.setenv("BREAK_SQLITE", str(store))
    assert project.runpytest_subprocess(*ARGS, "--cache", "off", "--run-id", "run_keep0002",
                                        "--store", str(store)).ret == 2
    store.rmdir()
    os.rename(str(store) + ".away", store)
    monkeypatch.delenv("BREAK_SQLITE")
    result = project.runpytest_subprocess(*ARGS, "--cache", "off", "--run-id", "run_next0003", "--store", str(store))
    assert result.ret == 1  # one item errors, as in every run of this project
    with open_store(str(store)) as opened:
        assert {run.run_id for run in opened.list_runs()} == {"run_keep0002", "run_next0003"}
        assert opened.get_run("run_keep0002")["responses"] == 3
    assert not (project.path / "reports" / "runs" / "run_keep0002" / "unstored.json").exists()


def test_a_shard_whose_run_was_not_stored_fails(project, monkeypatch):
    store = project.path / "store.db"
    monkeypatch.setenv("BREAK_SQLITE", str(store))
    result = project.runpytest_subprocess(*ARGS, "--cache", "off", "--store", str(store), "--splits", "2", "--group",
                                          "1", "--run-group", "nightly")
    assert result.ret == 2  # green otherwise: this shard's items pass
    assert len(_error_lines(result)) == 1


def test_postgresql_gone_at_the_save_then_runs_push(project, monkeypatch):
    base = os.environ.get("FIELDEVAL_TEST_PG")
    if not base:
        pytest.skip("FIELDEVAL_TEST_PG is not set")
    from fieldeval.store import open_store
    from tests.conftest import pg_schema_url

    schema = "t_" + secrets.token_hex(4)
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    url = pg_schema_url(base, schema)
    monkeypatch.setenv("PG_BASE", base)
    monkeypatch.setenv("DROP_SCHEMA", schema)  # the schema is dropped just before the save: the store is gone
    try:
        result = project.runpytest_subprocess(*ARGS, "--cache", "off", "--run-id", "run_pg000001", "--store", url)
        assert result.ret == 2
        lines = _error_lines(result)
        assert len(lines) == 1 and "not stored" in lines[0] and "fieldeval:fieldeval@" not in lines[0]
        kept = project.path / "reports" / "runs" / "run_pg000001" / "unstored.json"
        assert "fieldeval:fieldeval@" not in kept.read_text()  # the password is never written down
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        pushed = _cli("runs", "push", "run_pg000001", "--store", url, cwd=project.path)
        assert pushed.returncode == 0, pushed.stderr
        with open_store(url) as opened:
            assert opened.get_run("run_pg000001")["responses"] == 3
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@pytest.mark.parametrize(("extra", "flag"), [
    (("--seed=-1",), "--seed"),
    (("--seed", "x"), "--seed"),
    (("--run-id", "../../x"), "--run-id"),
    (("--run-id", "run_a/b"), "--run-id"),
    (("--store=",), "--store"),
    (("--rpm", "0.5"), "--rpm"),
    (("--rpm", "0"), "--rpm"),
    (("--splits", "0", "--group", "1"), "--splits"),
    (("--splits", "2", "--group", "3"), "--splits"),
    (("--reports-dir", "/proc/fieldeval-nope"), "--reports-dir"),
    (("--reports-dir", "suite.yaml"), "--reports-dir"),
    (("--eval-report", "evals"), "--eval-report"),
    (("--progress-file", "/proc/fieldeval-nope/p.json"), "--progress-file"),
    (("--cache-path", "/proc/fieldeval-nope/c.sqlite"), "--cache-path"),
])
def test_odd_options_are_one_line_and_exit_2_before_any_call(project, extra, flag):
    result = project.runpytest_subprocess(*ARGS, *extra)
    assert result.ret == 2, result.stdout.str() + "\n" + result.stderr.str()
    said = [line for line in (result.stdout.lines + result.stderr.lines) if flag in line]
    assert said, result.stdout.str() + "\n" + result.stderr.str()
    assert "Traceback" not in result.stdout.str() + "\n" + result.stderr.str()
    assert not (project.path / "calls.log").exists()
    assert not list(project.path.parent.glob("x"))  # nothing written outside the project


def test_a_progress_file_in_a_missing_folder_is_written(project):
    result = project.runpytest_subprocess(*ARGS, "--cache", "off", "--store", "none",
                                          "--progress-file", "new/folder/progress.json")
    assert result.ret == 1
    progress = json.loads((project.path / "new" / "folder" / "progress.json").read_text())
    assert (progress["total"], progress["done"], progress["errors"]) == (4, 4, 1)


@pytest.fixture
def tiny_disk(tmp_path):
    """A 1 MiB tmpfs (needs root and mount); skips where it cannot be mounted."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(disk: Path) -> None:
    """Write to ``disk`` until it is full."""
    with open(disk / "ballast", "wb", buffering=0) as ballast:
        with pytest.raises(OSError):
            while True:
                ballast.write(b"x" * 65536)


def test_a_full_disk_is_one_line_and_exit_2_before_any_call(project, tiny_disk):
    _fill(tiny_disk)
    result = project.runpytest_subprocess(*ARGS, "--reports-dir", str(tiny_disk / "reports"))
    output = result.stdout.str() + "\n" + result.stderr.str()
    assert result.ret == 2 and "--reports-dir" in output and "No space left" in output, output
    assert not (project.path / "calls.log").exists()


def test_a_disk_that_fills_up_mid_run_is_one_line_exit_2_and_keeps_the_cache(project, tiny_disk, monkeypatch):
    reports = tiny_disk / "reports"
    cache = tiny_disk / "responses.sqlite"
    args = [*ARGS, "--reports-dir", str(reports), "--eval-report", str(reports / "report.json"),
            "--cache-path", str(cache), "--store", str(tiny_disk / "store.db"),
            "--progress-file", str(tiny_disk / "progress.json")]
    assert project.runpytest_subprocess(*args, "-k", "case000").ret == 0  # files exist; one answer cached
    with sqlite3.connect(cache) as conn:
        cached_before = conn.execute("SELECT count(*) FROM responses").fetchone()[0]
    assert cached_before == 1
    monkeypatch.setenv("FILL_DISK", str(tiny_disk))
    result = project.runpytest_subprocess(*args, "--run-id", "run_full0001")
    output = result.stdout.str() + "\n" + result.stderr.str()
    assert result.ret == 2, output
    assert "Traceback" not in output and "INTERNALERROR" not in output
    said = [line for line in output.splitlines() if line.startswith("fieldeval:")]
    assert len(said) == 1 and "no space left" in said[0], said
    (tiny_disk / "ballast").unlink()
    monkeypatch.delenv("FILL_DISK")
    with sqlite3.connect(cache) as conn:  # the cache still opens, and every answer it took is there
        assert conn.execute("PRAGMA quick_check").fetchone()[0] == "ok"
        assert conn.execute("SELECT count(*) FROM responses").fetchone()[0] >= cached_before
    for path in tiny_disk.rglob("*"):  # no half-written file: every JSON file parses
        if path.suffix == ".json":
            json.loads(path.read_text())
    again = project.runpytest_subprocess(*args)
    assert again.ret == 1, again.stdout.str() + again.stderr.str()  # the next run works (one item always errors)


def test_an_injected_enospc_mid_run_is_one_line_and_exit_2(project, monkeypatch):
    monkeypatch.setenv("INJECT_ENOSPC", "1")
    result = project.runpytest_subprocess(*ARGS, "--progress-file", "progress.json", "--store", "none")
    output = result.stdout.str() + "\n" + result.stderr.str()
    assert result.ret == 2, output
    said = [line for line in output.splitlines() if line.startswith("fieldeval:")]
    assert len(said) == 1 and "no space left" in said[0] and "progress.json" in said[0], said
    assert "Traceback" not in output and "INTERNALERROR" not in output
    assert json.loads((project.path / "progress.json").read_text())["done"] == 1  # the last whole write stands
    assert json.loads((project.path / "reports" / "report.json").read_text())["evals"]["status"] == "interrupted"


def test_a_disk_that_fills_up_under_a_solver_is_a_full_disk_not_a_crash_of_the_solver():
    """A solver thread that commits the response cache may be the one to find the disk full: its item then
    stops the session with the one full-disk line, as the main thread's writes do, and is no solver crash
    with a traceback. A solver's own bug still is."""
    from fieldeval.calls.pool import SolverCrash, _outcome, _result
    from fieldeval.run.writable import out_of_space

    def cache_commit():
        raise sqlite3.OperationalError("database or disk is full")

    with pytest.raises(OSError) as caught:
        _result(*_outcome(cache_commit))
    assert out_of_space(caught.value) and "database or disk is full" in str(caught.value)

    def bug():
        return {}["missing"]

    with pytest.raises(SolverCrash, match="KeyError"):
        _result(*_outcome(bug))


class _FullDisk:
    """A connection on a full disk: every write fails, and so does the rollback after it."""

    in_transaction = True

    def __init__(self, real):
        self.real = real

    def execute(self, sql, *args):
        if sql.startswith(("INSERT", "UPDATE", "DELETE")):
            raise sqlite3.OperationalError("disk I/O error")
        if sql == "ROLLBACK":
            raise sqlite3.OperationalError("cannot rollback - no transaction is active")
        return self.real.execute(sql, *args)

    def executemany(self, *args):
        raise sqlite3.OperationalError("disk I/O error")


def test_a_full_disk_is_not_hidden_behind_a_failed_rollback(tmp_path):
    # the session's board and the batch ledger raised the ROLLBACK's error: an INTERNALERROR that hid "disk I/O error"
    from fieldeval.calls.batches.ledger import BatchLedger
    from fieldeval.calls.pool import Board
    from fieldeval.run.writable import out_of_space

    board = Board(tmp_path / "board.sqlite")
    full = _FullDisk(board._connection())
    board._connection = lambda: full
    with pytest.raises(sqlite3.OperationalError, match="disk I/O error") as caught:
        board.plan(["a", "b"])
    assert out_of_space(caught.value)
    ledger = BatchLedger(tmp_path / "cache.sqlite")
    ledger._db = _FullDisk(ledger._db)
    with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
        ledger.intend("d" * 64, "openai", "m", "http://x", ["k"])
