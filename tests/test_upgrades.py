"""Upgrades strand nothing: kept runs of an older fieldeval can be pushed, a store's upgrade is said, errored items
of old runs are found by case id, a newer store refuses an older writer, a read-only role gets one line."""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import subprocess
import sys

import pytest

from fieldeval.errors import UsageError
from fieldeval.store import declared_columns, open_store
from fieldeval.store.schema import SCHEMA_VERSION
from tests.conftest import ROOT, fresh_pg_store
from tests.service_helpers import free_port
from tests.test_store_api import ebs_run


def _cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fieldeval.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd or ROOT)


def _store_with_an_errored_item(url: str) -> None:
    payload, rows = ebs_run("run_0000e001", {"m": 0.5})
    errors = [{"benchmark": "ebs", "model": "m", "item": "evals/test_ebs.py::test_ebs[forest_biome-case042-m]",
               "error_class": "RateLimitError", "message": "429", "case_id": "case042"}]
    with open_store(url, columns=declared_columns()) as store:
        store.save_run(payload, rows, {"errors": errors, "status": "partial"})


def _as_schema(path, version: int) -> None:
    """Make a SQLite store read as one an older fieldeval left at ``version``."""
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM schema_version WHERE version > ?", (version,))


def test_a_read_command_that_upgrades_the_store_says_so_once(tmp_path):
    # `runs list` took a schema-3 store to schema 8 with no output
    path = tmp_path / "store.db"
    _store_with_an_errored_item(f"sqlite:///{path}")
    _as_schema(path, SCHEMA_VERSION - 1)
    listed = _cli("runs", "list", "--store", str(path))
    assert listed.returncode == 0, listed.stderr
    assert listed.stderr.strip() == (f"fieldeval: upgraded the store {path} from schema {SCHEMA_VERSION - 1} "
                                     f"to {SCHEMA_VERSION}, once, for this version of fieldeval")
    again = _cli("runs", "list", "--store", str(path))
    assert again.returncode == 0 and again.stderr == ""


def test_an_errored_item_stored_before_its_case_id_is_found_by_it(tmp_path):
    # errored items of old runs could not be found by case id: the migration did not fill case_id in
    path = tmp_path / "store.db"
    _store_with_an_errored_item(f"sqlite:///{path}")
    with sqlite3.connect(path) as db:
        db.execute("UPDATE evaluation_errors SET case_id = NULL")
    _as_schema(path, 6)
    shown = _cli("runs", "item", "run_0000e001", "case042", "--store", str(path), "--json")
    assert shown.returncode == 0, shown.stderr
    item = json.loads(shown.stdout)
    assert (item["status"], item["error"]["error_class"]) == ("errored", "RateLimitError")


def test_a_store_upgraded_by_a_newer_fieldeval_refuses_this_ones_writes_and_still_reads(tmp_path):
    # an older version wrote into a newer store without a word
    path = tmp_path / "store.db"
    _store_with_an_errored_item(f"sqlite:///{path}")
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO schema_version VALUES (?, 'a later step', '2027-01-01 00:00:00.000000')",
                   (SCHEMA_VERSION + 1,))
    assert _cli("runs", "list", "--store", str(path)).returncode == 0
    deleted = _cli("runs", "delete", "run_0000e001", "--store", str(path))
    assert deleted.returncode == 2 and deleted.stderr.count("\n") == 1, deleted.stderr
    assert f"a newer fieldeval upgraded this store (schema {SCHEMA_VERSION + 1}" in deleted.stderr
    with pytest.raises(UsageError, match="upgrade fieldeval"):
        open_store(f"sqlite:///{path}", create=True)
    with open_store(f"sqlite:///{path}", create=False) as store:
        assert [run.run_id for run in store.list_runs()] == ["run_0000e001"]


def test_a_run_kept_without_digests_is_pushed_with_unverified_and_shown_as_such(tmp_path):
    # push refused a run kept by an older fieldeval with no override, and advised paying for the session again
    from fieldeval.store.pending import keep_unstored

    payload, rows = ebs_run("run_0000c0de", {"m": 0.5})
    folder = tmp_path / "reports" / "runs" / "run_0000c0de"
    folder.mkdir(parents=True)
    path = keep_unstored(folder, "sqlite:///x", payload, rows, {"status": "completed"})
    kept = json.loads(path.read_text())
    kept.pop("digest")  # as an older fieldeval kept it
    path.write_text(json.dumps(kept))
    store = f"sqlite:///{tmp_path / 'store.db'}"
    refused = _cli("runs", "push", str(path), "--store", store)
    assert refused.returncode == 2 and "--unverified" in refused.stderr
    pushed = _cli("runs", "push", str(path), "--store", store, "--unverified")
    assert pushed.returncode == 0, pushed.stderr
    listed = json.loads(_cli("runs", "list", "--store", store, "--json").stdout)
    assert [(run["run_id"], run["unverified"]) for run in listed] == [("run_0000c0de", True)]
    assert "completed (unverified)" in _cli("runs", "list", "--store", store).stdout


@pytest.fixture
def read_only_role():
    """``(owner URL, read-only URL, schema)`` of a fresh PostgreSQL store whose second role may only SELECT."""
    import psycopg

    role, password = "ro_" + secrets.token_hex(4), secrets.token_hex(8)
    try:
        with fresh_pg_store() as owner:
            _store_with_an_errored_item(owner)
            schema = owner.rsplit("search_path%3D", 1)[-1]
            base = owner.split("?")[0]
            with psycopg.connect(base, autocommit=True) as conn:
                conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
                conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
                conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role}")
            yield owner, owner.replace("fieldeval:fieldeval@", f"{role}:{password}@", 1), schema
    finally:  # the schema and its grants are gone: the role holds nothing
        if os.environ.get("FIELDEVAL_TEST_PG"):
            with psycopg.connect(os.environ["FIELDEVAL_TEST_PG"], autocommit=True) as conn:
                conn.execute(f"DROP ROLE IF EXISTS {role}")


def test_a_read_only_role_reads_and_gets_one_line_where_it_would_write(read_only_role):
    # serve died with a 100-line traceback (CREATE TABLE service_jobs: permission denied); on an older schema
    # every command said "start the server or fix the URL"
    import psycopg

    owner, reader, schema = read_only_role
    listed = _cli("runs", "list", "--store", reader, "--json")
    assert listed.returncode == 0, listed.stderr
    assert [run["run_id"] for run in json.loads(listed.stdout)] == ["run_0000e001"]
    served = _cli("serve", "--store", reader, "--port", str(free_port()))
    assert served.returncode == 2 and served.stderr.count("\n") == 1, served.stderr
    assert "may not change the store" in served.stderr and "Traceback" not in served.stderr
    with psycopg.connect(owner.split("?")[0], autocommit=True) as conn:  # the store as an older fieldeval left it
        conn.execute(f"DELETE FROM {schema}.schema_version WHERE version = {SCHEMA_VERSION}")
    older = _cli("runs", "list", "--store", reader)
    assert older.returncode == 2 and older.stderr.count("\n") == 1, older.stderr
    assert "may not change the store" in older.stderr and "start the server" not in older.stderr
