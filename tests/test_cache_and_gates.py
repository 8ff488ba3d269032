"""Runs that last: the response cache, cost columns and threshold gates, end to end."""

from __future__ import annotations

import json
import multiprocessing

import pytest
import yaml

from fieldeval.calls.cache import CachedResponse, ResponseCache, cache_key
from tests.ebs_project import make_project, run


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    return make_project(pytester)


def _cached(project: pytest.Pytester) -> int:
    """Responses committed to the project's cache file (what another process can read)."""
    import sqlite3

    path = project.path / "reports" / "responses.sqlite"
    if not path.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            return conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
    except sqlite3.Error:  # not created yet
        return 0


def calls(project: pytest.Pytester) -> list[str]:
    path = project.path / "calls.log"
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_second_identical_run_makes_no_model_calls_and_same_numbers(project):
    _, first = run(project)
    made = len(calls(project))
    _, second = run(project)
    assert made == 3 and len(calls(project)) == made  # the three answered prompts are not asked again
    assert second["evals"]["cache"] == {"mode": "use", "hits": 3, "misses": 0}
    strip = lambda payload: {m: {k: v for k, v in e.items() if k != "totals"}
                             for m, e in payload["evals"]["benchmarks"]["ebs"].items()}
    assert strip(first) == strip(second)


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_cached_items_keep_their_original_tokens_and_cost(project):
    project.path.joinpath("prices.yaml").write_text("fake-ebs: {input_per_mtok: 1.0, output_per_mtok: 10.0}\n")
    _, first = run(project, "--prices", "prices.yaml")
    _, second = run(project, "--prices", "prices.yaml")
    totals = second["evals"]["benchmarks"]["ebs"]["fake-ebs"]["totals"]
    assert totals["prompt_tokens"] == 300 and totals["completion_tokens"] == 21
    assert totals["est_cost_usd"] == pytest.approx(3 * (100 * 1.0 + 7 * 10.0) / 1e6)
    assert totals["cached_items"] == 3
    assert first["evals"]["benchmarks"]["ebs"]["fake-ebs"]["totals"]["cached_items"] == 0
    lines = (project.path / "reports" / "ebs" / "results_envo_scored.tsv").read_text().splitlines()
    header = lines[0].split("\t")
    cells = dict(zip(header, lines[1].split("\t")))
    assert [cells[c] for c in ["prompt_tokens", "completion_tokens", "est_cost_usd", "cached"]] == \
        ["100", "7", "0.00017", "True"]


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_changed_prompt_misses_the_cache(project):
    run(project)
    suite = yaml.safe_load((project.path / "suite.yaml").read_text())
    suite["cases"][0]["input"] += "Depth: 0.1\n"
    (project.path / "suite.yaml").write_text(yaml.safe_dump(suite))
    _, report = run(project)
    assert report["evals"]["cache"] == {"mode": "use", "hits": 2, "misses": 1}


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_replay_fails_only_the_item_without_a_cached_response(project):
    run(project)
    suite = yaml.safe_load((project.path / "suite.yaml").read_text())
    suite["cases"][1]["input"] += "Depth: 2\n"
    (project.path / "suite.yaml").write_text(yaml.safe_dump(suite))
    before = len(calls(project))
    result, report = run(project, "--cache", "replay")
    result.assert_outcomes(passed=2, failed=2)  # the changed case and the one that never had a response
    result.stdout.fnmatch_lines(["*no cached response for this prompt (--cache replay)*"])
    assert len(calls(project)) == before
    assert report["evals"]["benchmarks"]["ebs"]["fake-ebs"]["errors"] == 2


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_cache_off_always_calls_the_model(project):
    run(project, "--cache", "off")
    run(project, "--cache", "off")
    assert len(calls(project)) == 6


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_threshold_below_the_score_passes_and_above_fails(project):
    passing, _ = run(project, "-k", "not case003", "--fail-under", "ebs.ontology_score=0.6")
    failing, report = run(project, "-k", "not case003", "--fail-under", "ebs.ontology_score=0.7")
    assert passing.ret == 0
    passing.stdout.fnmatch_lines(["passed gate ebs.ontology_score for fake-ebs: point value 0.65 >= 0.6"])  # shown too
    assert failing.ret == 1
    failing.stdout.fnmatch_lines(["*FAILED gate ebs.ontology_score for fake-ebs: point value 0.65 is below the "
                                  "threshold 0.7*"])
    assert report["evals"]["gates"][0]["passed"] is False


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_gate_on_lower_uses_the_interval_bound(project):
    result, report = run(project, "-k", "not case003", "--fail-under", "ebs.exact_match=0.2", "--gate-on", "lower")
    assert result.ret == 1 and report["evals"]["gates"][0]["value"] == 0.0


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_thresholds_from_pyproject_and_markdown_summary(project):
    project.makepyprojecttoml("[tool.fieldeval.thresholds]\n'ebs.parse_success' = 0.9\n")
    result, _ = run(project, "-k", "not case003", "--summary-md", "summary.md")
    assert result.ret == 1
    summary = (project.path / "summary.md").read_text()
    assert "| ebs.parse_success (point) | fake-ebs | 0.667 | 0.9 | **FAIL** |" in summary


def test_unknown_gate_metric_is_one_line_exit_2(project):
    result = project.runpytest_subprocess("evals", "--fail-under", "ebs.ontolgy_score=0.5", "--ebs-suite", "suite.yaml")
    assert result.ret == 2
    result.stderr.fnmatch_lines(["Exit: threshold ebs.ontolgy_score: unknown metric 'ontolgy_score'*"])


def _writer(path: str, start: int) -> None:
    cache = ResponseCache(path)
    for n in range(start, start + 200):
        cache.put(cache_key("m", {}, None, f"prompt {n}", None), "m", CachedResponse(f"answer {n}", 0.1, 1, 1))


def test_concurrent_writers_lose_nothing(tmp_path):
    path = str(tmp_path / "responses.sqlite")
    ResponseCache(path)
    workers = [multiprocessing.get_context("spawn").Process(target=_writer, args=(path, k * 100)) for k in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert [w.exitcode for w in workers] == [0, 0, 0, 0]
    cache = ResponseCache(path)
    assert len(cache) == 500  # overlapping ranges 0-499 written by four processes
    assert cache.get(cache_key("m", {}, None, "prompt 250", None)).text == "answer 250"


def test_cache_key_covers_model_options_system_prompt_and_schema():
    base = cache_key("m", {"temperature": 0.0}, "sys", "p", None)
    variants = [cache_key("m2", {"temperature": 0.0}, "sys", "p", None),
                cache_key("m", {"temperature": 0.5}, "sys", "p", None),
                cache_key("m", {"temperature": 0.0}, "sys2", "p", None),
                cache_key("m", {"temperature": 0.0}, "sys", "p2", None),
                cache_key("m", {"temperature": 0.0}, "sys", "p", {"type": "object"})]
    assert len({base, *variants}) == 6


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_run_killed_half_way_resumes_from_the_cache(project):
    import os
    import signal
    import subprocess
    import sys
    import time

    from fieldeval.store import open_store
    from tests.ebs_project import ARGS

    (project.path / "block").touch()
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *ARGS, "--concurrency", "1"], cwd=project.path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while len(calls(project)) < 1 and time.monotonic() < deadline:  # case000 answered, case001 hangs
        time.sleep(0.2)
    while not _cached(project) and time.monotonic() < deadline:  # committed by the cache's timer, not at exit
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    assert calls(project) == [c for c in calls(project) if "Iowa" in c] and len(calls(project)) == 1
    (killed,) = (project.path / "reports" / "runs").glob("*/status.json")
    assert json.loads(killed.read_text())["status"] == "running"  # never passed off as finished
    assert not (project.path / "reports" / "report.json").exists()

    (project.path / "block").unlink()
    _, resumed = run(project)
    assert [c for c in calls(project) if "Iowa" in c] == calls(project)[:1]  # Iowa was not asked again
    assert len(calls(project)) == 3
    assert resumed["evals"]["cache"] == {"mode": "use", "hits": 1, "misses": 2}
    _, clean = run(project, "--cache", "off", "--store", "none")
    strip = lambda payload: {m: {k: v for k, v in e.items() if k != "totals"}
                             for m, e in payload["evals"]["benchmarks"]["ebs"].items()}
    assert strip(resumed) == strip(clean)
    with open_store(str(project.path / "reports" / "fieldeval.db")) as store:
        runs = store.list_runs()
        assert len(runs) == 1  # the killed session stored nothing; no duplicate rows
        assert len(store.responses(runs[0].run_id)) == 3


def test_item_cost_sums_every_call_of_the_item():
    from fieldeval import Completion, ModelClient, completion_fields

    client = ModelClient(prices={"m": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}})
    fields = completion_fields(Completion("m", "summary", 0.5, 10, 5, cached=True,
                                          est_cost_usd=client.estimate_cost("m", 10, 5), system="s", prompt="p1"),
                               Completion("m", "answer", 0.25, 20, 1, est_cost_usd=client.estimate_cost("m", 20, 1),
                                          prompt="p2"))
    assert fields == {"response_time_s": 0.75, "prompt_tokens": 30, "completion_tokens": 6,
                      "est_cost_usd": (30 * 1.0 + 6 * 2.0) / 1e6, "cached": False,
                      "system": None, "prompt": "p2",  # what the answer's call sent; the summary's comes before
                      "earlier_calls": [{"system": "s", "prompt": "p1", "response_text": "summary"}]}


def test_a_baselines_floor_does_not_gate_a_model_under_evaluation():
    # [tool.fieldeval.thresholds."ebs-baseline"] must not fail a run of another model
    from fieldeval.run.gates import gate_results
    from fieldeval.settings import load_thresholds

    gates = load_thresholds({"thresholds": {"ebs-baseline": {"ebs.ontology_score": 0.8}}}, [])
    entry = {"ontology_score": {"value": 0.5, "ci95": [0.4, 0.6], "n": 10}}
    assert gate_results(gates, {"ebs": {"gpt-4o-mini": entry}}, on="point", ran=["ebs"]) == []
    [result] = gate_results(gates, {"ebs": {"ebs-baseline": entry}}, on="point", ran=["ebs"])
    assert (result["model"], result["passed"]) == ("ebs-baseline", False)


def test_the_report_and_runs_show_give_one_run_the_same_totals_and_the_store_keeps_them_whole(project):
    # issue 35: the report rounded totals to 6 places and the store to 10, so one run had two costs
    import sqlite3
    import subprocess
    import sys
    from pathlib import Path

    project.path.joinpath("prices.yaml").write_text("fake-ebs: {input_per_mtok: 0.15, output_per_mtok: 0.6}\n")
    store = project.path / "runs.db"
    _, report = run(project, "--prices", "prices.yaml", "--store", str(store), "--run-id", "run_costs",
                    "--max-errors", "1")
    reported = report["evals"]["benchmarks"]["ebs"]["fake-ebs"]["totals"]
    fieldeval = Path(sys.executable).parent / "fieldeval"
    out = subprocess.run([str(fieldeval), "runs", "show", "run_costs", "--store", str(store), "--json"],
                         capture_output=True, text=True, cwd=project.path, check=True)
    shown = json.loads(out.stdout)["totals"]["fake-ebs"]
    cost = 3 * (100 * 0.15 + 7 * 0.6) / 1e6  # three answered items: 5.76e-05 USD
    assert reported["est_cost_usd"] == shown["est_cost_usd"] == round(cost, 6)
    for key in ("prompt_tokens", "completion_tokens", "response_time_s"):
        assert reported[key] == shown[key], key
    (kept,) = sqlite3.connect(store).execute("SELECT totals FROM evaluations").fetchone()
    assert json.loads(kept)["fake-ebs"]["est_cost_usd"] == pytest.approx(cost, rel=1e-12)  # full precision


def test_thresholds_of_a_misspelled_model_are_said_not_silently_skipped(project):
    # [tool.fieldeval.thresholds."fake-ebz"]: no gate ran and the session passed without a word
    project.makepyprojecttoml("[tool.fieldeval.thresholds.\"fake-ebz\"]\n'ebs.parse_success' = 0.9\n"
                              "[tool.fieldeval.thresholds.\"ebs-baseline\"]\n'ebs.parse_success' = 0.9\n")
    result, report = run(project, "-k", "case000")
    assert report["evals"]["unmatched_thresholds"] == [
        {"model": "fake-ebz", "gates": ["ebs.parse_success"], "models_run": ["fake-ebs"]}]  # not the baseline's
    lines = [line for line in result.stdout.str().splitlines() if "were not checked" in line]
    assert len(lines) == 1 and "'fake-ebz'" in lines[0] and "this run's models: fake-ebs" in lines[0]
