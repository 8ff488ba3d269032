"""``fieldeval runs ...`` and ``fieldeval models ...`` through the fieldeval CLI."""

from __future__ import annotations

import json

import pytest

from fieldeval.cli import main
from fieldeval.store import open_store
from tests.store_columns import IBF_COLUMNS

SEED = [("run_3b9e204a", "phi-3-mini-4k", 2.60, 0.54, [3.12, 2.47, 1.83, 2.91, 2.68]),
        ("run_9c1d88f0", "mistral-7b-instruct-v0.3", 3.21, 0.72, [3.54, 3.10, 2.88, 3.22, 3.31])]
DIMENSIONS = ["hazard_recognition", "impact_reasoning", "uncertainty_handling", "action_relevance",
              "geographic_specificity"]


@pytest.fixture
def store_url(tmp_path, monkeypatch):
    """A SQLite store holding two IBF runs of the seed, also set as $FIELDEVAL_STORE, with IBF's columns declared."""
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    monkeypatch.setenv("FIELDEVAL_STORE", url)
    monkeypatch.setattr("fieldeval.store.declared_columns", lambda: IBF_COLUMNS)
    with open_store(url, columns=IBF_COLUMNS) as store:
        for run_id, model, mds, tpr, scores in SEED:
            entry = {name: {"value": value, "ci95": [value - 0.1, value + 0.1], "n": 340}
                     for name, value in [*zip(DIMENSIONS, scores), ("mean_dimension_score", mds),
                                         ("threshold_pass_rate", tpr)]}
            payload = {"run_id": run_id, "started_at": "2026-05-29T08:14:03Z", "ontology_version": None,
                       "benchmarks": {"ibf": {model: {**entry, "items": 340, "errors": 0}}}}
            rows = [{"model": model, "case_id": "ci_0814", "response_text": "pre-position supplies",
                     "hazard_recognition": 4}]
            store.save_run(payload, {"ibf": rows}, {"corpus_version": "ibf-v2.1", "label": f"{model} baseline"})
    return url


def test_runs_list_shows_every_run(store_url, capsys):
    assert main(["runs", "list"]) == 0
    out = capsys.readouterr().out
    assert "run_3b9e204a" in out and "run_9c1d88f0" in out and "ibf-v2.1" in out


def test_runs_list_filters_by_benchmark(store_url, capsys):
    assert main(["runs", "list", "--benchmark", "ebs", "--store", store_url]) == 0
    assert "no runs" in capsys.readouterr().out


def test_runs_show_prints_headline_metrics_with_intervals(store_url, capsys):
    assert main(["runs", "show", "run_3b9e204a"]) == 0
    lines = capsys.readouterr().out.splitlines()
    row = next(number for number, line in enumerate(lines) if "mean_dimension_score" in line)
    assert "2.600" in lines[row] and "(2.500-2.700)" in lines[row + 1]  # the value above its interval
    assert any("threshold_pass_rate" in line for line in lines)


def test_runs_show_gives_the_runs_wall_time_beside_the_calls_summed_time(store_url, capsys):
    # a local model's 410 s run showed only its calls' 3,149.7 s, summed over the calls in flight at once
    from datetime import datetime

    assert main(["runs", "show", "run_3b9e204a", "--json"]) == 0
    run = json.loads(capsys.readouterr().out)
    start, end = (datetime.fromisoformat(run[key].replace("Z", "+00:00")) for key in ("created_at", "completed_at"))
    assert main(["runs", "show", "run_3b9e204a"]) == 0
    out = capsys.readouterr().out
    assert f"the run's wall time: {(end - start).total_seconds():.0f} s" in out and "calls' time, summed (s)" in out


@pytest.mark.parametrize("columns", [80, 120])
def test_runs_show_keeps_the_model_and_whole_intervals_within_the_terminal(store_url, capsys, monkeypatch, columns):
    # at 250 columns the model column went missing and the intervals were cut (a row per model, a column per metric)
    import sys

    monkeypatch.setenv("COLUMNS", str(columns))  # the terminal's width, as rich reads it
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert main(["runs", "show", "run_3b9e204a"]) == 0
    import re

    out = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)  # a terminal gets colours
    assert max(map(len, out.splitlines())) <= columns
    assert "phi-3-mini-4k" in out and "(2.500-2.700)" in out and "…" not in out


def test_runs_compare_puts_two_models_side_by_side(store_url, capsys):
    assert main(["runs", "compare", "run_3b9e204a", "run_9c1d88f0"]) == 0
    out = capsys.readouterr().out
    assert "phi-3-mini-4k" in out and "mistral-7b-instruct-v0.3" in out
    line = next(line for line in out.splitlines() if "mean_dimension_score" in line)
    assert "2.600" in line and "3.210" in line


def test_runs_compare_json_prints_the_seed_payload(store_url, capsys):
    assert main(["runs", "compare", "run_3b9e204a", "run_9c1d88f0", "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert [(r["run_id"], r["model_name"], r["mean_dimension_score"], r["threshold_pass_rate"]) for r in runs] == [
        ("run_3b9e204a", "phi-3-mini-4k", 2.60, 0.54), ("run_9c1d88f0", "mistral-7b-instruct-v0.3", 3.21, 0.72)]
    assert runs[1]["scores"]["uncertainty_handling"] == 2.88


def test_runs_delete_removes_the_run(store_url, capsys):
    assert main(["runs", "delete", "run_9c1d88f0"]) == 0
    assert "1 responses" in capsys.readouterr().out
    with open_store(store_url) as store:
        assert [r.run_id for r in store.list_runs()] == ["run_3b9e204a"]


@pytest.mark.parametrize("argv", [["runs", "show", "run_deadbeef"], ["runs", "delete", "run_deadbeef"],
                                  ["runs", "compare", "run_3b9e204a", "run_deadbeef"]])
def test_an_unknown_run_id_exits_2_with_one_line(store_url, capsys, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "run 'run_deadbeef': not in the store" in err


def test_models_add_is_idempotent_and_models_list_shows_it(store_url, capsys):
    argv = ["models", "add", "phi-3-mini-4k", "--endpoint", "http://localhost:11434/v1/chat/completions",
            "--provider", "local", "--context-window", "4096", "--parameters-billion", "3.8",
            "--notes", "4-bit GGUF quantisation, CPU inference"]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert main(argv) == 0
    second = capsys.readouterr().out
    assert " registered" in first and "already registered" in second
    assert first.split()[0] == second.split()[0] and first.startswith("mdl_")
    assert main(["models", "list", "--json"]) == 0
    (record,) = json.loads(capsys.readouterr().out)
    assert (record["context_window"], record["parameters_billion"], record["provider"]) == (4096, 3.8, "local")


def test_models_add_with_a_bad_endpoint_exits_2(store_url, capsys):
    assert main(["models", "add", "x", "--endpoint", "localhost"]) == 2
    assert "--endpoint 'localhost': not a URL" in capsys.readouterr().err


def test_a_bad_store_url_exits_2(capsys):
    assert main(["runs", "list", "--store", "oracle://db"]) == 2
    assert "unsupported database 'oracle'" in capsys.readouterr().err


@pytest.mark.parametrize(("endpoint", "words"), [
    ("http://user:secret@localhost:11434/v1", "environment variable or `llm keys set`"),
    ("http://169.254.169.254/latest", "link-local"),
    ("http://[::ffff:169.254.169.254]/v1", "link-local"),
    ("file:///etc/passwd", "not an http(s) URL"),
])
def test_models_add_refuses_unsafe_endpoints(store_url, capsys, endpoint, words):
    assert main(["models", "add", "x", "--endpoint", endpoint]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1


def test_models_add_allows_loopback(store_url, capsys):
    assert main(["models", "add", "x", "--endpoint", "http://127.0.0.1:8080/v1"]) == 0
