"""The plugin's small faults (issue 36): bad option values and missing paths are one line and exit 2, every gate
line says what it means, run ids are whole at any terminal width, and every output has one file mode."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fieldeval.atomic import write_atomic
from fieldeval.cli import main
from fieldeval.run.gates import error_gates
from fieldeval.run.summary import gate_line, render_markdown
from fieldeval.store import declared_columns, open_store
from tests.ebs_project import ARGS, make_project


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    return make_project(pytester)


def _said(result) -> list[str]:
    return [line for line in result.stdout.lines + result.stderr.lines if line.strip()]


@pytest.mark.parametrize(("flag", "value", "choices"), [
    ("--cache", "reply", "use, refresh, off, replay"),
    ("--gate-on", "lowr", "point, lower"),
    ("--cluster-by", "study", "benchmark, none"),
    ("--ebs-truth", "curi", "curie, label, closest"),  # a benchmark's option
    ("--re-mode", "sumarize", "direct, summarize"),  # another installed benchmark's, not this project's
])
def test_a_value_not_among_the_choices_is_one_line_and_exit_2(project, flag, value, choices):
    result = project.runpytest_subprocess(*ARGS, flag, value)
    assert result.ret == 2, "\n".join(_said(result))
    assert _said(result) == [f"Exit: {flag} {value!r}: not a choice; choose from {choices}"]
    assert not (project.path / "calls.log").exists()


def test_help_still_lists_the_choices(project):
    result = project.runpytest_subprocess("--help", "-p", "no:cacheprovider")
    assert result.ret == 0
    out = result.stdout.str()
    assert "--cache={use,refresh,off,replay}" in out and "--re-mode={direct,summarize}" in out


@pytest.mark.parametrize("workers", [(), ("-n", "2", "--workers-as-given")])
def test_a_missing_eval_file_is_one_line_and_exit_2(project, workers):
    # under xdist the workers collected nothing and the session ended silently with exit 5
    result = project.runpytest_subprocess("evals/test_ebz.py", *ARGS[1:], *workers)
    assert result.ret == 2, "\n".join(_said(result))
    assert _said(result) == ["Exit: evals/test_ebz.py: no such file or folder; the eval files are evals/test_ebs.py"]


def test_a_missing_test_in_an_existing_file_is_left_to_pytest(project):
    result = project.runpytest_subprocess("evals/test_ebs.py::test_nope", *ARGS[1:])
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "not found" in result.stdout.str() + result.stderr.str()


def test_the_errors_gate_line_says_how_many_items_errored_and_how_many_are_allowed():
    gate, = error_gates({"ebs": {"m": {"planned": 100, "scored": 97}}}, "partial", None, "run_0000abcd")
    assert gate_line(gate) == ("FAILED gate errors: the run is partial: 3 of 100 planned items errored or missing "
                               "(at most 0 allowed; pass --max-errors 3 to let the gates judge the scored items, "
                               "or run the rest with `pytest evals/test_ebs.py --resume run_0000abcd` (it runs "
                               "only the run's own items))")
    gate, = error_gates({"ebs": {"m": {"planned": 100, "scored": 97}}}, "partial", 2)
    assert "(at most 2 allowed;" in gate_line(gate)


def test_a_gate_of_no_model_names_no_model():
    gate = {"metric": "ebs.exact_match", "model": "-", "gate_on": "point", "value": None, "threshold": 0.5,
            "passed": False, "reason": "ebs scored no items"}
    assert gate_line(gate) == "FAILED gate ebs.exact_match: ebs scored no items"


def test_the_markdown_errors_gate_shows_a_count():
    gate, = error_gates({"ebs": {"m": {"planned": 100, "scored": 97}}}, "partial", None)
    markdown = render_markdown({"run_id": "run_x", "benchmarks": {}, "gates": [gate]})
    assert "| errors (count) | - | 3 | 0 | **FAIL** |" in markdown


LONG_ID = "run_nightly_2026_05_29_shard_1"


@pytest.fixture
def long_id_store(tmp_path) -> str:
    """A SQLite store of two EBS runs, one with a 30-character id."""
    url = f"sqlite:///{tmp_path / 'ids.db'}"
    with open_store(url, columns=declared_columns(), create=True) as store:
        for run_id, model in [(LONG_ID, "phi-3-mini-4k-instruct"), ("run_3e8a1f0c9b", "mistral-7b-instruct-v0.3")]:
            entry = {m: {"value": 0.5, "ci95": [0.4, 0.6], "n": 3} for m in ("exact_match", "ontology_score")}
            payload = {"run_id": run_id, "started_at": "2026-05-29T08:14:03Z", "ontology_version": "envo",
                       "benchmarks": {"ebs": {model: {**entry, "items": 3, "errors": 0}}}}
            rows = [{"model": model, "case_id": "c1", "response_text": "x", "exact_match": 1}]
            store.save_run(payload, {"ebs": rows}, {"corpus_version": "ebs-v1", "label": f"{model} baseline"})
    return url


def _in_terminal(*argv: str, columns: int) -> str:
    """``fieldeval ARGV`` with a terminal of ``columns`` columns as its stdout; the text it shows, without colours."""
    master, slave = pty.openpty()
    done = subprocess.Popen([sys.executable, "-m", "fieldeval.cli", *argv], stdout=slave, stderr=slave,
                            env={**os.environ, "COLUMNS": str(columns)})
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert done.wait(timeout=120) == 0, out.decode()
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.decode())


def _table_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line[:1] in set("┏┃┡│└")]


@pytest.mark.parametrize("command", [["runs", "list"], ["runs", "compare", LONG_ID, "run_3e8a1f0c9b"]])
def test_run_ids_are_whole_at_80_columns(long_id_store, command):
    # rich cut them to run_3e… in a narrow terminal
    text = _in_terminal(*command, "--store", long_id_store, columns=80)
    assert LONG_ID in text and "run_3e8a1f0c9b" in text and "…" not in text
    assert all(len(line) <= 80 for line in _table_lines(text)), text


def _modes(folder: Path) -> dict[str, int]:
    return {str(path.relative_to(folder)): path.stat().st_mode & 0o777 for path in folder.rglob("*") if path.is_file()}


def test_every_output_of_a_run_has_the_mode_a_plain_write_gives(project):
    old = os.umask(0o022)
    try:
        result = project.runpytest_subprocess(*ARGS, "--cache", "off")
    finally:
        os.umask(old)
    assert result.ret == 1, "\n".join(_said(result))  # the Atlantis item errors
    modes = _modes(project.path / "reports")
    assert "report.json" in modes and "runs" in "".join(modes)
    assert {name: mode for name, mode in modes.items() if mode != 0o644} == {}


def test_an_atomic_write_honours_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        write_atomic(tmp_path / "report.json", "{}")
    finally:
        os.umask(old)
    assert (tmp_path / "report.json").stat().st_mode & 0o777 == 0o640
    assert [path.name for path in tmp_path.iterdir()] == ["report.json"]  # no temporary file left


def test_report_without_output_writes_reports_report_html(long_id_store, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["report", LONG_ID, "--store", long_id_store]) == 0
    assert (tmp_path / "reports" / "report.html").is_file() and not (tmp_path / "report.html").exists()
    assert "wrote reports/report.html" in capsys.readouterr().out


def test_a_providers_words_reach_the_session_summary_escaped():
    # an error message holding an OSC 52 clipboard write reached the terminal raw through the error lines
    from fieldeval.run.summary import terminal_lines

    payload = {"run_id": "run_0000e5c0", "benchmarks": {}, "gates": [], "audit": {}}
    hostile = "fieldeval errors: ebs m: 1 item(s) failed: HTTP 500: \x1b]52;c;ZXZpbA==\x07\x1b[2J (x1)"
    lines = [line for line, _ in terminal_lines(payload, [hostile])]
    assert "\x1b" not in "".join(lines) and "\x07" not in "".join(lines)
    assert "HTTP 500: \\x1b]52;c;ZXZpbA==\\x07\\x1b[2J (x1)" in lines[-1]
