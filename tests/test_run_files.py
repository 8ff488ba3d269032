"""Reports per run: reports/runs/<run_id>/, published atomically; exit codes that match; no report for --collect-only."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.ebs_project import ARGS, make_project, run


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    return make_project(pytester)


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_each_run_keeps_its_report_and_tables_and_the_newest_is_published(project):
    run(project, "--run-id", "run_00000001", "--cache", "off")
    _, second = run(project, "--run-id", "run_00000002", "--cache", "off", "-k", "not case000")
    runs = project.path / "reports" / "runs"
    assert json.loads((runs / "run_00000001" / "report.json").read_text())["evals"]["run_id"] == "run_00000001"
    assert second["evals"]["run_id"] == "run_00000002"  # reports/report.json is the newest
    published = (project.path / "reports" / "ebs" / "results_envo_scored.tsv").read_text()
    assert published == (runs / "run_00000002" / "ebs" / "results_envo_scored.tsv").read_text()
    assert len(published.splitlines()) == 3 and "case000" not in published
    status = json.loads((runs / "run_00000001" / "status.json").read_text())
    assert (status["status"], status["exitcode"]) == ("partial", 1)  # one item failed: every item ran, not all scored
    assert not [p for p in (project.path / "reports").rglob("*.tmp")]


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_two_concurrent_sessions_never_mix_their_files(project):
    procs = [subprocess.Popen([sys.executable, "-m", "pytest", *ARGS, "--cache", "off", "--run-id", run_id, *extra],
                              cwd=project.path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for run_id, extra in [("run_0000000a", ()), ("run_0000000b", ("-k", "case000 or case001"))]]
    assert [proc.wait(180) for proc in procs] == [1, 0]
    reports = project.path / "reports"
    own = {run_id: json.loads((reports / "runs" / run_id / "report.json").read_text())
           for run_id in ("run_0000000a", "run_0000000b")}
    assert {r["evals"]["benchmarks"]["ebs"]["fake-ebs"]["items"] for r in own.values()} == {4, 2}
    published = json.loads((reports / "report.json").read_text())
    newest = published["evals"]["run_id"]
    assert published == own[newest]
    table = (reports / "ebs" / "results_envo_scored.tsv").read_text()
    assert table == (reports / "runs" / newest / "ebs" / "results_envo_scored.tsv").read_text()


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_report_exitcode_counts_a_failed_gate(project):
    result, report = run(project, "-k", "not case003", "--fail-under", "ebs.ontology_score=0.7")
    assert result.ret == 1
    assert report["exitcode"] == 1  # pytest-json-report alone wrote 0 here: it ran before the gate
    assert report["evals"]["status"] == "completed"


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_collect_only_writes_no_report(project):
    _, before = run(project, "--run-id", "run_000000c0")
    result = project.runpytest_subprocess(*ARGS, "--collect-only", "-q")
    assert result.ret == 0
    after = json.loads((project.path / "reports" / "report.json").read_text())
    assert after == before
    assert [p.name for p in (project.path / "reports" / "runs").iterdir()] == ["run_000000c0"]


def test_store_gets_item_counts_and_every_failed_item(project, monkeypatch):
    from fieldeval.store import open_store

    store = project.path / "reports" / "fieldeval.db"
    monkeypatch.setenv("FIELDEVAL_STORE", str(store))
    result = project.runpytest(*ARGS, "-p", "no:xdist", "--run-id", "run_000000e4")
    result.assert_outcomes(passed=3, failed=1)
    with open_store(str(store)) as opened:
        run = opened.get_run("run_000000e4")
    assert (run["items_planned"], run["items_done"], run["items_errored"], run["responses"]) == (4, 4, 1, 3)
    assert run["errors"] == [{"benchmark": "ebs", "model": "fake-ebs",
                              "item_id": "evals/test_ebs.py::test_ebs[forest_biome-case003-fake-ebs]",
                              "error_class": "RuntimeError",
                              "message": "no response after 1 request(s): provider exploded"}]


@pytest.mark.slow  # end to end, in a subprocess: once in CI (-m slow)
def test_the_run_files_are_written_when_building_its_store_rows_fails(project, monkeypatch):
    """The store's rows are built before the files are written (its transaction then runs beside them): a failure
    there still leaves the rows file, the table and the report of every item, as when the store came after them."""
    project.makepyfile(break_git="""
        from fieldeval.run import session

        def broken(root):
            raise RuntimeError("the run's settings could not be read")

        session._git_commit = broken  # part of the run's store rows, built before the files
    """)
    monkeypatch.setenv("FIELDEVAL_STORE", str(project.path / "reports" / "fieldeval.db"))
    result = project.runpytest_subprocess(*ARGS, "-p", "break_git", "--run-id", "run_000000f1")
    assert result.ret != pytest.ExitCode.OK  # a crash of the session's end, reported as one
    assert "the run's settings could not be read" in result.stdout.str() + result.stderr.str()
    folder = project.path / "reports" / "runs" / "run_000000f1"
    assert len((folder / "rows.jsonl").read_text().splitlines()) == 3  # the three scored items (one failed)
    assert len((folder / "ebs" / "results_envo_scored.tsv").read_text().splitlines()) == 4
    assert json.loads((folder / "report.json").read_text())["evals"]["run_id"] == "run_000000f1"
