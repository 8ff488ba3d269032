"""``fieldeval runs items`` / ``runs item`` and ``fieldeval.items_frame``: a stored run's items, checked against
the run's own scored tables and, for what was sent, against what a local server received."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import fieldeval
from fieldeval.cli import main
from tests.conftest import ROOT, TINY_ENUMS, TINY_SELECTOR
from tests.mock_openai import STATS, extra_models_yaml, serve

pytest_plugins = ["pytester"]

# benchmark -> (its scored table under reports/, the table's item id column, the columns to check value for value)
TABLES = {
    "ebs": ("ebs/results_envo_scored.tsv", "case_id",
            ["ontology_score", "exact_match", "relationship", "hop_distance", "hierarchy_score", "curie_label_valid",
             "in_template_enum", "enum_score", "parse_success", "pred_curie", "response_text"]),
    "microbiorel": ("microbiorel/predictions.tsv", "case_id", ["gold", "prediction", "correct", "valid",
                                                              "response_text"]),
    "ibf": ("ibf/scores.tsv", "item_id", ["hazard_recognition", "impact_reasoning", "uncertainty_handling",
                                          "action_relevance", "geographic_specificity", "scorer", "response_text"]),
}


@pytest.fixture(scope="module")
def offline_run(tmp_path_factory) -> tuple[str, str, Path]:
    """The offline baselines' run of every benchmark, stored in a fresh SQLite store: (run id, store, reports)."""
    where = tmp_path_factory.mktemp("offline")
    store, reports = f"sqlite:///{where / 'store.db'}", where / "reports"
    result = subprocess.run([sys.executable, "-m", "pytest", str(ROOT / "evals"), "-q", "-p", "no:cacheprovider",
                             "--rootdir", str(ROOT), "--store", store, "--reports-dir", str(reports),
                             "--cache", "off", "-n", "0"], cwd=where, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (run_id,) = [p.name for p in (reports / "runs").iterdir()]
    return run_id, store, reports


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(err: str) -> bool:
    """stderr holds one line of fieldeval's and no traceback (a library's import warnings may come before it)."""
    return sum(line.startswith("fieldeval") for line in err.splitlines()) == 1 and "Traceback" not in err


def _same(stored, cell: str) -> bool:
    """A stored value against the text of its cell in a scored table."""
    if stored is None:
        return cell == ""
    if isinstance(stored, bool):
        return cell == str(stored)
    if isinstance(stored, (int, float)):
        return math.isclose(float(stored), float(cell), rel_tol=1e-9, abs_tol=1e-12)
    return str(stored) == cell


@pytest.mark.parametrize("bench", sorted(TABLES))
def test_runs_items_json_agrees_value_for_value_with_the_scored_table(offline_run, capsys, bench):
    run_id, store, reports = offline_run
    table, id_column, columns = TABLES[bench]
    expected = pd.read_csv(reports / table, sep="\t", dtype=str, keep_default_na=False)
    code, out, _ = _cli(capsys, "runs", "items", run_id, "--benchmark", bench, "--json", "--store", store)
    assert code == 0
    items = json.loads(out)
    assert len(items) == len(expected) > 0
    assert {i["status"] for i in items} == {"scored"}
    by_id = {item["case_id"]: item for item in items}
    assert len(by_id) == len(items)  # one model: one item per case id
    for _, row in expected.iterrows():
        item = by_id[row[id_column]]
        assert item["benchmark"] == bench and item["model"] == row["model"]
        wrong = {c: (item.get(c), row[c]) for c in columns if not _same(item.get(c), row[c])}
        assert not wrong, f"{bench} {row[id_column]}: {wrong}"


def test_where_sort_and_limit_pick_the_items_pandas_picks(offline_run, capsys):
    run_id, store, reports = offline_run
    frame = pd.read_csv(reports / TABLES["ebs"][0], sep="\t")
    code, out, _ = _cli(capsys, "runs", "items", run_id, "--benchmark", "ebs", "--where",
                        "ontology_score < 0.9 and relationship != 'exact'", "--sort", "-ontology_score", "--json",
                        "--store", store)
    assert code == 0
    got = json.loads(out)
    want = frame[(frame.ontology_score < 0.9) & (frame.relationship != "exact")]
    assert sorted(i["case_id"] for i in got) == sorted(want.case_id)
    scores = [i["ontology_score"] for i in got]
    assert scores == sorted(scores, reverse=True)
    code, out, _ = _cli(capsys, "runs", "items", run_id, "--benchmark", "ebs", "--limit", "7", "--tsv",
                        "--store", store)
    lines = out.splitlines()
    assert code == 0 and len(lines) == 8  # the header and 7 items, one line each
    assert lines[0].split("\t")[:6] == ["benchmark", "model", "case_id", "cluster", "stratum", "status"]


def test_items_sort_and_filter_on_what_each_call_cost(offline_run, capsys):
    # a real model's run is read by its slowest and longest answers
    run_id, store, _ = offline_run
    code, out, _ = _cli(capsys, "runs", "items", run_id, "--benchmark", "ibf", "--json", "--store", store)
    every = json.loads(out)
    middle = sorted(item["response_time_s"] for item in every)[len(every) // 2]
    code, out, _ = _cli(capsys, "runs", "items", run_id, "--benchmark", "ibf", "--sort", "-response_time_s",
                        "--where", f"response_time_s > {middle!r}", "--json", "--store", store)
    assert code == 0
    got = json.loads(out)
    want = sorted((item for item in every if item["response_time_s"] > middle), key=lambda i: -i["response_time_s"])
    assert [item["response_time_s"] for item in got] == [item["response_time_s"] for item in want] and want


def test_runs_items_headers_break_after_underscores_not_a_letter_at_a_time(offline_run, capsys, monkeypatch):
    import re

    run_id, store, _ = offline_run
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    code, out, _ = _cli(capsys, "runs", "items", run_id, "--benchmark", "ibf", "--limit", "3", "--store", store)
    lines = re.sub(r"\x1b\[[0-9;]*m", "", out).splitlines()
    assert code == 0 and max(map(len, lines)) <= 120
    assert any(re.search(r"\bhazard_\s", line) for line in lines)  # "hazard_" above "recognition"
    assert not any(re.fullmatch(r"[\s\w]*\b[a-z]\b[\s\w]*", line) and len(line.split()) > 4 for line in lines)


def test_terminal_escapes_in_an_answer_are_shown_never_obeyed(offline_run, capsys, tmp_path):
    # an answer holding an OSC 52 clipboard write, a window title and a clear screen reached the terminal raw
    import shutil
    import sqlite3

    run_id, store, _ = offline_run
    copy = tmp_path / "store.db"
    shutil.copy(store.removeprefix("sqlite:///"), copy)
    hostile = "forest\x1b]52;c;ZXZpbA==\x07\x1b]0;pwned\x07\x1b[2J\x9b31m biome"
    with sqlite3.connect(copy) as db:
        (case,) = db.execute("SELECT corpus_item_id FROM evaluation_responses WHERE benchmark = 'ebs' "
                             "LIMIT 1").fetchone()
        db.execute("UPDATE evaluation_responses SET raw_response = ? WHERE corpus_item_id = ?", (hostile, case))
    for argv in (["runs", "item", run_id, case], ["runs", "items", run_id, "--benchmark", "ebs", "--tsv", "--where",
                                                   f"case_id == '{case}'"]):
        code, out, _ = _cli(capsys, *argv, "--store", f"sqlite:///{copy}")
        assert code == 0 and not set(out) & {"\x1b", "\x07", "\x9b"}
        assert "forest\\x1b]52" in out  # shown as text (the table cuts the rest)
    assert "\\x1b]52;c;ZXZpbA==\\x07\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m biome" in _cli(
        capsys, "runs", "item", run_id, case, "--store", f"sqlite:///{copy}")[1]


def test_items_frame_has_one_row_per_item(offline_run):
    run_id, store, reports = offline_run
    frame = fieldeval.items_frame(run_id, store)
    sizes = {bench: len(pd.read_csv(reports / table, sep="\t", dtype=str)) for bench, (table, _, _) in TABLES.items()}
    assert frame.groupby("benchmark").size().to_dict() == sizes
    assert not frame.duplicated(["benchmark", "model", "case_id"]).any()
    assert frame["prompt"].notna().all() and frame["system"].notna().all()


def test_a_bad_where_or_sort_or_run_is_one_line_and_exit_2(offline_run, capsys):
    run_id, store, _ = offline_run
    for argv, needle in [(["runs", "items", run_id, "--where", "nope < 1"], "unknown column 'nope'"),
                         (["runs", "items", run_id, "--sort", "-nope"], "--sort '-nope'"),
                         (["runs", "items", run_id, "--limit", "0"], "--limit 0"),
                         (["runs", "items", "run_00000000"], "run_00000000"),
                         (["runs", "item", run_id, "no-such-case"], "no-such-case")]:
        code, out, err = _cli(capsys, *argv, "--store", store)
        assert code == 2, argv
        assert _one_line(err) and needle in err, (argv, err)


@pytest.fixture
def http_project(pytester: pytest.Pytester, monkeypatch):
    server = serve()
    STATS.reset(0.0)
    llm_dir = pytester.path / "llm"
    llm_dir.mkdir()
    (llm_dir / "extra-openai-models.yaml").write_text(extra_models_yaml(server.server_address[1],
                                                                        ("mock-ok", "mock-500")))
    monkeypatch.setenv("LLM_USER_PATH", str(llm_dir))
    pytester.makeini("[pytest]\n")
    (pytester.path / "evals").mkdir()
    (pytester.path / "evals" / "test_ebs.py").write_text((ROOT / "evals" / "test_ebs.py").read_text())
    yield pytester
    server.shutdown()


def _case(place: str) -> dict:
    prompt = f"Predict <b>|[/]\nEnvironmental package: soil_data\nGeographic location: USA: {place}\n"
    return {"input": prompt, "ideal": "cropland biome [ENVO:01000245]", "tags": ["soil_data"],
            "original_input": {"study_name": "s", "sampleData": "soil_data",
                               "env_broad_scale": "cropland biome [ENVO:01000245]"}}


def test_runs_item_gives_back_exactly_what_the_server_received(http_project, capsys):
    import yaml

    suite = {"name": "http", "template": "predict_ebs",
             "templates": {"predict_ebs": {"system": "You are an expert. \u00e9\u00e9\n  Answer.", "prompt": "{input}"}},
             "cases": [_case(place) for place in ("Iowa", "Oregon", "Maine")]}
    (http_project.path / "suite.yaml").write_text(yaml.safe_dump(suite))
    store = f"sqlite:///{http_project.path / 'store.db'}"
    common = ("evals", "--ebs-suite", "suite.yaml", "--ontology", TINY_SELECTOR, "--enum-dir", str(TINY_ENUMS),
              "--store", store, "-p", "no:cacheprovider", "--cache", "off", "-n", "0")
    result = http_project.runpytest_subprocess(*common, "--model", "mock-ok", "--model", "mock-500",
                                               "--retries", "0", timeout=600)
    result.assert_outcomes(passed=3, failed=3)
    received = {m[-1]["content"]: m for m in STATS.messages}
    (run_id,) = [p.name for p in (http_project.path / "reports" / "runs").iterdir()]
    os.chdir(http_project.path)
    for case in ("case000", "case001", "case002"):
        code, _, err = _cli(capsys, "runs", "item", run_id, case, "--json", "--store", store)
        assert code == 2 and "--model" in err and _one_line(err)  # two models hold the case
        code, out, _ = _cli(capsys, "runs", "item", run_id, case, "--model", "mock-ok", "--json", "--store", store)
        assert code == 0
        item = json.loads(out)
        sent = received[item["prompt"]]
        assert sent == [{"role": "system", "content": item["system"]}, {"role": "user", "content": item["prompt"]}]
        assert item["status"] == "scored" and item["scores"]["pred_curie"] in ("ENVO:01000245", "ENVO:01000174")
        assert item["prompt_tokens"] == 10 and item["completion_tokens"] == 3 and item["cached"] is False
        code, out, _ = _cli(capsys, "runs", "item", run_id, case, "--model", "mock-500", "--json", "--store", store)
        errored = json.loads(out)
        assert code == 0 and errored["status"] == "errored" and errored["scores"] == {}
        assert "HTTP 500" in errored["error"]["message"]
    code, out, _ = _cli(capsys, "runs", "item", run_id, "case000", "--model", "mock-ok", "--store", store)
    assert code == 0 and "Predict <b>|[/]" in out and "You are an expert." in out  # markup-like text stays text
