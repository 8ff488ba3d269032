"""Runs you can trust, store side: honest status and counts, errored items, damaged stores, names as data."""

from __future__ import annotations

import json
import sqlite3

import pytest

from fieldeval.cli import main
from fieldeval.errors import UsageError
from fieldeval.store import PartialRunError, check_store, open_store
from fieldeval.run.summary import render_markdown, render_summary
from tests.test_store_api import ebs_run

NASTY = "bad[/]model|<script>alert(1)</script>"
ERRORS = [{"benchmark": "ebs", "model": "m", "item": "evals/test_ebs.py::test_ebs[case_2]",
           "error_class": "TimeoutError", "message": "no answer in 60 s"},
          {"benchmark": "ebs", "model": "m", "item": "evals/test_ebs.py::test_ebs[case_5]",
           "error_class": "ValueError", "message": "bad [/] markup"}]
PARTIAL = {"status": "interrupted", "items_planned": 10, "items_done": 6, "items_errored": 2, "errors": ERRORS}


@pytest.fixture
def two_runs(store_url):
    """A completed run and an interrupted one with two errored items."""
    with open_store(store_url) as store:
        store.save_run(*ebs_run("run_00000001", {"m": 0.5}),
                       {"status": "completed", "items_planned": 3, "items_done": 3, "items_errored": 0})
        store.save_run(*ebs_run("run_00000002", {"m": 0.4}), PARTIAL)
    return store_url


def test_a_run_keeps_its_status_items_and_errored_items(two_runs):
    with open_store(two_runs) as store:
        summaries = {run.run_id: run for run in store.list_runs()}
        run = store.get_run("run_00000002")
    assert (summaries["run_00000002"].status, summaries["run_00000002"].items_done) == ("interrupted", 6)
    assert (run["items_planned"], run["items_done"], run["items_errored"]) == (10, 6, 2)
    assert run["errors"][1] == {"benchmark": "ebs", "model": "m", "item_id": "evals/test_ebs.py::test_ebs[case_5]",
                                "error_class": "ValueError", "message": "bad [/] markup"}


def test_a_run_saved_without_counts_reads_them_as_none(store_url):
    with open_store(store_url) as store:
        store.save_run(*ebs_run("run_00000003", {"m": 0.5}))
        summary = store.list_runs()[0]
    assert (summary.status, summary.items_planned, summary.items_done, summary.items_errored) == (
        "completed", None, None, None)


def test_deleting_a_run_deletes_its_errored_items(two_runs):
    with open_store(two_runs) as store:
        store.delete_run("run_00000002")
        with store.engine.connect() as conn:
            assert conn.execute(store.tables.evaluation_errors.select()).all() == []


def test_compare_refuses_a_partial_run_naming_its_counts(two_runs):
    with open_store(two_runs) as store, pytest.raises(PartialRunError, match=r"run run_00000002 is interrupted "
                                                                            r"\(6 of 10 items done, 2 errored\)"):
        store.compare(["run_00000001", "run_00000002"])


def test_compare_with_allow_partial_marks_the_partial_run(two_runs):
    with open_store(two_runs) as store:
        runs = store.compare(["run_00000001", "run_00000002"], allow_partial=True)["runs"]
    assert [run.get("status") for run in runs] == [None, "interrupted"]


def test_runs_list_and_show_json_give_status_and_counts(two_runs, capsys):
    assert main(["runs", "list", "--json", "--store", two_runs]) == 0
    listed = {run["run_id"]: run for run in json.loads(capsys.readouterr().out)}
    assert {k: listed["run_00000002"][k] for k in ("status", "items_planned", "items_done", "items_errored")} == {
        "status": "interrupted", "items_planned": 10, "items_done": 6, "items_errored": 2}
    assert main(["runs", "show", "run_00000002", "--json", "--store", two_runs]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["status"] == "interrupted" and [e["error_class"] for e in shown["errors"]] == [
        "TimeoutError", "ValueError"]


def test_runs_show_lists_errored_items_per_model(two_runs, capsys):
    assert main(["runs", "show", "run_00000002", "--store", two_runs]) == 0
    out = capsys.readouterr().out
    assert "6/10 (2 errored)" in out
    assert "TimeoutError" in out and "no answer in 60 s" in out and "bad [/] markup" in out


def test_runs_compare_of_a_partial_run_is_one_line_and_exit_2(two_runs, capsys):
    assert main(["runs", "compare", "run_00000001", "run_00000002", "--store", two_runs]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--allow-partial" in err
    assert main(["runs", "compare", "run_00000001", "run_00000002", "--allow-partial", "--json",
                 "--store", two_runs]) == 0
    assert json.loads(capsys.readouterr().out)["runs"][1]["status"] == "interrupted"


# --- damaged, missing and unreachable stores ----------------------------------------------------

def _truncated(tmp_path):
    path = tmp_path / "full.db"
    with open_store(str(path)) as store:
        for i in range(40):
            store.save_run(*ebs_run(f"run_{i:08d}", {"m": 0.5}))
    data = path.read_bytes()
    broken = tmp_path / "fieldeval.db"
    broken.write_bytes(data[: len(data) // 2])
    return broken


@pytest.mark.parametrize("make, words", [
    (lambda tmp: (tmp / "fieldeval.db").write_bytes(b"not sqlite at all" * 200) and tmp / "fieldeval.db",
     "damaged or not a fieldeval store"),
    (_truncated, "damaged"),
    (lambda tmp: (tmp / "fieldeval.db").mkdir() or tmp / "fieldeval.db", "is a directory"),
    (lambda tmp: tmp / "absent.db", "no store at"),
    (lambda tmp: (tmp / "empty.db").touch() or tmp / "empty.db", "is an empty file"),
])
@pytest.mark.parametrize("argv", [["runs", "list"], ["runs", "show", "run_00000001"],
                                  ["runs", "compare", "run_00000001"], ["models", "list"]])
def test_a_read_command_on_a_bad_store_file_is_one_line_naming_it(tmp_path, capsys, make, words, argv):
    path = make(tmp_path)
    size = path.stat().st_size if path.is_file() else None
    assert main([*argv, "--store", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err and path.name in err and "Traceback" not in err
    assert (path.stat().st_size if path.is_file() else None) == size  # nothing created, nothing written


@pytest.mark.parametrize("url, words", [
    ("postgresql://::bad", "not a database URL"),
    ("postgresql://u:p4ss@127.0.0.1:1/x", "cannot open the database"),
    ("http://example.org/store", "unsupported database 'http'"),
    ("not a url", "not a store"),
    ("runs.txt", "not a store"),
])
def test_a_bad_store_url_is_one_line_with_the_password_hidden(tmp_path, monkeypatch, capsys, url, words):
    monkeypatch.chdir(tmp_path)
    assert main(["runs", "list", "--store", url]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err and "p4ss" not in err
    assert list(tmp_path.iterdir()) == []  # 'not a url' used to become a SQLite file of that name


@pytest.mark.parametrize("suffix", [".db", ".sqlite", ".sqlite3"])
def test_a_bare_path_with_a_sqlite_suffix_is_a_store(tmp_path, suffix):
    assert check_store(str(tmp_path / f"runs{suffix}"), create=True).endswith(f"runs{suffix}")


def test_check_store_creates_a_store_only_when_asked(tmp_path):
    path = tmp_path / "new.db"
    with pytest.raises(UsageError, match="no store at"):
        check_store(str(path), create=False)
    assert not path.exists()
    check_store(str(path), create=True)
    assert check_store(str(path), create=False) == str(path)


def test_check_store_finds_a_truncated_file(tmp_path):
    with pytest.raises(UsageError, match="damaged") as info:
        check_store(str(_truncated(tmp_path)), create=True)
    assert "\n" not in str(info.value)


def test_check_store_refuses_a_database_that_holds_no_store_when_reading(tmp_path):
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (x)")
    with pytest.raises(UsageError, match="no fieldeval store in"):
        check_store(str(path), create=False)


def test_check_store_on_an_unreachable_server_hides_the_password():
    with pytest.raises(UsageError, match="cannot open the database") as info:
        check_store("postgresql://u:s3cret@127.0.0.1:1/x", create=True)
    assert "s3cret" not in str(info.value) and "\n" not in str(info.value)


# --- names are data -----------------------------------------------------------------------------

def test_markup_in_names_and_labels_is_printed_as_text(tmp_path, capsys):
    # a label or model name with [/] crashed rich with MarkupError
    url = str(tmp_path / "names.db")
    with open_store(url) as store:
        store.save_run(*ebs_run("run_00000001", {NASTY: 0.5}), {"label": "[bold]x[/] | <b>", **PARTIAL,
                                                                "errors": [{**ERRORS[0], "model": NASTY}]})
        store.add_model("[/]weird|<i>", "http://127.0.0.1:9/v1")
    for argv in (["runs", "list"], ["runs", "show", "run_00000001"], ["models", "list"],
                 ["runs", "compare", "run_00000001", "--allow-partial"]):
        assert main([*argv, "--store", url]) == 0, argv
    out = capsys.readouterr().out
    assert NASTY in out and "[bold]x[/] | <b>" in out and "[/]weird|<i>" in out


def _payload(model: str) -> dict:
    entry = {"ontology_score": {"value": 0.5, "ci95": [0.4, 0.6], "n": 3}, "items": 3, "errors": 0}
    return {"run_id": "run_00000001", "ontology_version": "envo [/] <x>", "benchmarks": {"ebs": {model: entry}},
            "gates": [{"metric": "ebs.ontology_score", "gate_on": "value", "model": model, "value": 0.5,
                       "threshold": 0.4, "passed": True}]}


def test_the_markdown_summary_escapes_pipes_and_html_in_names():
    text = render_markdown(_payload(NASTY))
    assert "<script>" not in text
    assert r"| bad[/]model\|&lt;script&gt;alert(1)&lt;/script&gt; | 3 | 0 |" in text
    row = next(line for line in text.splitlines() if "alert" in line and "ebs.ontology_score" in line)
    assert row.count(" | ") == 4  # the name's pipe did not add a cell


def test_the_terminal_summary_prints_markup_in_names_as_text():
    text = render_summary(_payload(NASTY), width=400)
    assert NASTY in text and "envo [/] <x>" in text
