"""The experiment as designed (issue 21): the suite's model x hyperparameter matrix, and repeated samples.

End-to-end runs use a throwaway EBS project: a 100-case suite whose ``matrix``
names two fake llm models (each logs every call it gets: model, temperature,
case) and two temperatures. The variance split is checked on simulated data
with known within-item and between-item variances.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import yaml

from fieldeval.stats.epochs import collapse_epochs, epoch_interval, variance_split
from fieldeval.run.matrix import Combination, combinations
from tests.conftest import ROOT, TINY_ENUMS, TINY_SELECTOR

pytest_plugins = ["pytester"]

FAKES = '''
import json
import re

import llm

pytest_plugins = ["fieldeval.plugin"]


def _answer(model_id, prompt, temperature):
    n = int(re.search(r"USA: Site([0-9]+)", prompt.prompt).group(1))
    with open("calls.log", "a") as log:
        log.write(json.dumps({"model": model_id, "temperature": temperature, "case": n}) + "\\n")
    good = "cropland biome [ENVO:01000245]"
    if model_id == "fake-a":
        return good
    if model_id == "fake-c":  # a coin at temperature above 0 (sampling noise), the right answer at 0
        import random

        return good if not temperature or random.random() < 0.5 else "forest biome [ENVO:01000174]"
    return good if n % 2 == 0 else "forest biome [ENVO:01000174]"


class FakeA(llm.Model):
    model_id = "fake-a"
    can_stream = False

    class Options(llm.Options):
        temperature: float | None = None

    def execute(self, prompt, stream, response, conversation):
        yield _answer(self.model_id, prompt, prompt.options.temperature)


class FakeB(FakeA):
    model_id = "fake-b"


class FakeC(FakeA):
    model_id = "fake-c"


class Plugin:
    @llm.hookimpl
    def register_models(self, register):
        register(FakeA())
        register(FakeB())
        register(FakeC())


llm.plugins.pm.register(Plugin(), name="fake-matrix-plugin")
'''

CASES = 100


def _suite() -> dict:
    cases = []
    for n in range(CASES):
        prompt = f"Predict.\\nEnvironmental package: soil_data\\nGeographic location: USA: Site{n}\\n"
        ideal = "cropland biome [ENVO:01000245]"
        cases.append({"input": prompt, "ideal": ideal, "tags": ["soil_data", ideal],
                      "original_input": {"study_name": f"s{n % 12}", "sampleData": "soil_data",
                                         "env_broad_scale": ideal}})
    return {"name": "matrix", "template": "predict_ebs",
            "templates": {"predict_ebs": {"system": "You are an expert. Answer label [CURIE].", "prompt": "{input}"}},
            "matrix": {"hyperparameters": {"model": ["fake-a", "fake-b"], "temperature": [0.0, 0.7]}},
            "cases": cases}


ARGS = ("evals", "--ebs-suite", "suite.yaml", "--ontology", TINY_SELECTOR, "--enum-dir", str(TINY_ENUMS),
        "--retries", "0", "-p", "no:cacheprovider", "-p", "no:randomly", "--store", "none",
        "--bootstrap-resamples", "200")


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(FAKES)
    pytester.makeini("[pytest]\n")
    (pytester.path / "evals").mkdir()
    shutil.copy(ROOT / "evals" / "test_ebs.py", pytester.path / "evals" / "test_ebs.py")
    (pytester.path / "suite.yaml").write_text(yaml.safe_dump(_suite()))
    return pytester


def _run(project: pytest.Pytester, *extra: str):
    (project.path / "calls.log").unlink(missing_ok=True)
    result = project.runpytest_subprocess(*ARGS, *extra)
    report = json.loads((project.path / "reports" / "report.json").read_text())
    log = project.path / "calls.log"
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return result, report, calls


def test_the_suites_2x2_matrix_gives_four_aggregates_of_100_items_keyed_by_combination(project):
    result, report, calls = _run(project, "--matrix", "-v")
    assert result.ret == 0, result.stdout.str()[-3000:]
    entries = report["evals"]["benchmarks"]["ebs"]
    assert sorted(entries) == ["fake-a-t0", "fake-a-t0.7", "fake-b-t0", "fake-b-t0.7"]
    assert {name: entry["items"] for name, entry in entries.items()} == dict.fromkeys(entries, CASES)
    # fake-a always answers right, fake-b on even sites only: the aggregates are per combination
    assert entries["fake-a-t0.7"]["exact_match"]["value"] == 1.0
    assert entries["fake-b-t0"]["exact_match"]["value"] == 0.5
    # fake-a's two temperatures answer alike (tied with the best); fake-b's half-wrong answers are below it
    ranking = report["evals"]["tied_with_best"]["ebs"]
    assert ranking["best"] == "fake-a-t0" and ranking["tied"] == ["fake-a-t0.7"], ranking
    assert ranking["below"] == ["fake-b-t0", "fake-b-t0.7"] and ranking["family"] == 3
    result.stdout.fnmatch_lines(["ebs.ontology_score: best fake-a-t0 (*); tied with it after Holm over 3 "
                                 "comparisons: fake-a-t0.7; below it: fake-b-t0, fake-b-t0.7"])
    # each combination's calls went to its model at its temperature
    assert sorted({(c["model"], c["temperature"]) for c in calls}) == [
        ("fake-a", 0.0), ("fake-a", 0.7), ("fake-b", 0.0), ("fake-b", 0.7)]
    assert len(calls) == 4 * CASES
    result.stdout.fnmatch_lines(["*test_ebs?cropland_biome-case000-fake-a-t0.7? PASSED*"])
    # the scored table carries llm-matrix's hyperparameter columns, with the model's own name
    table = (project.path / "reports" / "ebs" / "results_envo_scored.tsv").read_text().splitlines()
    header = table[0].split("\t")
    assert header[:3] == ["hyperparameters", "model", "temperature"]
    rows = [dict(zip(header, line.split("\t"))) for line in table[1:]]
    assert {(r["hyperparameters"], r["model"], r["temperature"]) for r in rows} == {
        (f"model={m}_temperature={t}", m, t) for m in ("fake-a", "fake-b") for t in ("0.0", "0.7")}
    # `fieldeval score ebs` on the same results (its scored columns dropped) writes the same layout and scores
    import subprocess
    import sys
    from pathlib import Path

    from fieldeval.benchmarks.ebs.tables import SCORED_COLUMNS

    inputs = [c for c in header if c not in SCORED_COLUMNS]
    (project.path / "results.tsv").write_text("\n".join(
        "\t".join(row[c] for c in inputs) for row in [dict(zip(header, header)), *rows]) + "\n")
    fieldeval = Path(sys.executable).parent / "fieldeval"
    done = subprocess.run([str(fieldeval), "score", "ebs", "results.tsv", "-o", "scored", "--ontology", TINY_SELECTOR,
                           "--enum-dir", str(TINY_ENUMS)], capture_output=True, text=True, cwd=project.path)
    assert done.returncode == 0, done.stdout + done.stderr
    scored = (project.path / "scored" / "results_envo_scored.tsv").read_text().splitlines()
    assert scored[0].split("\t") == [*inputs, *SCORED_COLUMNS]
    assert header == [*inputs[:-1], *SCORED_COLUMNS, "cached"]  # the pytest table keeps `cached` last
    again = [dict(zip(scored[0].split("\t"), line.split("\t"))) for line in scored[1:]]
    assert [(r["hyperparameters"], r["case_id"], r["ontology_score"]) for r in again] == [
        (r["hyperparameters"], r["case_id"], r["ontology_score"]) for r in rows]
    # and its summary ranks the combinations, not the models
    assert "model=fake-b_temperature=0.7  (n=100)" in done.stdout


def test_model_and_temperature_override_the_suites_lists(project):
    result, report, calls = _run(project, "--matrix", "--model", "fake-b", "--temperature", "0.3")
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert list(report["evals"]["benchmarks"]["ebs"]) == ["fake-b-t0.3"]
    assert {(c["model"], c["temperature"]) for c in calls} == {("fake-b", 0.3)}


def test_epochs_ask_each_item_k_times_cached_apart_and_a_rerun_replays_them_all(project):
    args = ("--model", "fake-a", "--temperature", "0.7", "--epochs", "3")
    result, report, calls = _run(project, *args)
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert len(calls) == 3 * CASES
    assert {c["case"] for c in calls} == set(range(CASES))
    entry = report["evals"]["benchmarks"]["ebs"]["fake-a-t0.7"]
    assert entry["items"] == CASES and entry["epochs"]["k"] == 3
    assert entry["epochs"]["variance"]["within"] == 0.0  # the fake answers the same every time
    # the progress counts answers and says how many items they are
    result.stdout.fnmatch_lines([f"*ebs fake-a-t0.7: {3 * CASES}/{3 * CASES} answers ({CASES} items x 3 epochs)*"])
    import sqlite3

    keys = sqlite3.connect(project.path / "reports" / "responses.sqlite").execute(
        "SELECT COUNT(*) FROM responses").fetchone()[0]
    assert keys == 3 * CASES  # one cache key per epoch
    result, report, calls = _run(project, *args)
    assert result.ret == 0 and calls == []  # all K replayed
    assert report["evals"]["cache"]["hits"] == 3 * CASES


FLAKY = '''

class FakeFlaky(FakeA):
    """Cases 0-3 fail their first call only, case 9 every call: 4 + 3 errored epochs, 5 items with one."""
    model_id = "fake-flaky"

    def execute(self, prompt, stream, response, conversation):
        import os

        n = int(re.search(r"USA: Site([0-9]+)", prompt.prompt).group(1))
        if n == 9:
            raise RuntimeError("always down")
        if n < 4:
            try:  # the first of the case's calls, whichever epoch the pool sent first
                os.close(os.open(f"failed-{n}", os.O_CREAT | os.O_EXCL))
                raise RuntimeError("flaky")
            except FileExistsError:
                pass
        yield "cropland biome [ENVO:01000245]"


class FlakyPlugin:
    @llm.hookimpl
    def register_models(self, register):
        register(FakeFlaky())


llm.plugins.pm.register(FlakyPlugin(), name="fake-flaky-plugin")
'''


def test_errored_epochs_count_once_per_item_in_the_report_the_gate_and_the_store(project):
    # issue 35: 10 items x 3 epochs with errored epochs reported 16 items planned, each errored epoch an item
    import subprocess
    import sys
    from pathlib import Path

    suite = _suite()
    suite["cases"] = suite["cases"][:10]
    (project.path / "suite.yaml").write_text(yaml.safe_dump(suite))
    project.makeconftest(FAKES + FLAKY)
    store = project.path / "runs.db"
    result, report, _ = _run(project, "--model", "fake-flaky", "--temperature", "0.7", "--epochs", "3",
                             "--store", str(store), "--max-errors", "5")
    assert result.ret == 0, result.stdout.str()[-3000:]  # 5 errored items, 5 allowed
    entry = report["evals"]["benchmarks"]["ebs"]["fake-flaky-t0.7"]
    assert {k: entry[k] for k in ("planned", "items", "scored", "errors")} == {
        "planned": 10, "items": 10, "scored": 9, "errors": 5}
    result.stdout.fnmatch_lines(["*fieldeval errors: ebs fake-flaky-t0.7: 7 epoch(s) of 5 item(s) failed*"])
    fieldeval = Path(sys.executable).parent / "fieldeval"
    out = subprocess.run([str(fieldeval), "runs", "list", "--store", str(store), "--json"],
                         capture_output=True, text=True, cwd=project.path, check=True)
    (run,) = json.loads(out.stdout)
    assert (run["items_planned"], run["items_done"], run["items_errored"]) == (10, 10, 5)
    # again, without --max-errors: cases 0-3 replay from the cache, case 9's three epochs fail, one item
    result = project.runpytest_subprocess(*ARGS, "--model", "fake-flaky", "--temperature", "0.7", "--epochs", "3")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*the run is partial: 1 of 10 planned items errored or missing*"])


def test_errored_epochs_split_across_shards_count_once_per_item_in_the_merge(project):
    import subprocess
    import sys
    from pathlib import Path

    suite = _suite()
    suite["cases"] = suite["cases"][:10]
    (project.path / "suite.yaml").write_text(yaml.safe_dump(suite))
    project.makeconftest(FAKES + FLAKY)
    store = project.path / "runs.db"
    for group in (1, 2):  # 30 epochs in two shards: an item's epochs may fall in both
        result = project.runpytest_subprocess(*ARGS[:-4], "--model", "fake-flaky", "--temperature", "0.7",
                                              "--epochs", "3", "--store", str(store), "--splits", "2", "--group",
                                              str(group), "--run-group", "flaky", "--max-errors", "5")
        assert result.ret == 0, result.stdout.str()[-3000:]
    fieldeval = Path(sys.executable).parent / "fieldeval"
    done = subprocess.run([str(fieldeval), "runs", "merge", "flaky", "--store", str(store), "--allow-partial",
                           "--max-errors", "5", "--json"], capture_output=True, text=True, cwd=project.path)
    assert done.returncode == 0, done.stdout + done.stderr
    entry = json.loads(done.stdout)["payload"]["benchmarks"]["ebs"]["fake-flaky-t0.7"]
    assert {k: entry[k] for k in ("planned", "items", "scored", "errors")} == {  # as the unsharded run counts them
        "planned": 10, "items": 10, "scored": 9, "errors": 5}


def test_epochs_at_temperature_0_say_so_in_one_line_and_run_once(project):
    result, report, calls = _run(project, "--model", "fake-a", "--epochs", "3")
    assert result.ret == 0
    lines = [line for line in result.stdout.lines if "--epochs 3 at temperature 0" in line]
    assert len(lines) == 1 and "fake-a runs once" in lines[0]
    assert len(calls) == CASES


def test_a_bad_temperature_is_one_line_and_exit_2(project):
    result = project.runpytest_subprocess(*ARGS, "--temperature", "warm")
    assert result.ret == 2
    assert result.stderr.lines[-1] == "Exit: --temperature 'warm': not a number; pass e.g. --temperature 0.7"


def test_the_variance_split_recovers_known_within_and_between_variances():
    rng = np.random.default_rng(7)
    between, within, items, k = 0.04, 0.09, 3000, 5
    truth = rng.normal(0.6, np.sqrt(between), items)
    values = truth[:, None] + rng.normal(0, np.sqrt(within), (items, k))
    split = variance_split(values.tolist())
    assert split["within"] == pytest.approx(within, rel=0.10)
    assert split["between"] == pytest.approx(between, rel=0.10)
    assert split["within_share"] == pytest.approx(within / (within + between), rel=0.10)


def test_repeats_narrow_the_interval_where_sampling_noise_dominates():
    rng = np.random.default_rng(11)
    truth = rng.normal(0.5, 0.05, 200)  # between-item sd 0.05, within-item sd 0.5: sampling noise dominates
    one = (truth[:, None] + rng.normal(0, 0.5, (200, 1))).tolist()
    eight = (truth[:, None] + rng.normal(0, 0.5, (200, 8))).tolist()
    lo1, hi1 = epoch_interval(one, resamples=400)
    lo8, hi8 = epoch_interval(eight, resamples=400)
    assert (hi8 - lo8) < 0.5 * (hi1 - lo1)  # theory: sqrt((0.0025 + 0.25/8) / (0.0025 + 0.25)) = 0.37


def test_collapsed_epochs_take_means_of_numbers_and_the_majority_of_labels():
    rows = [{"model": "m-t0.7", "case_key": "c1", "nodeid": f"x[c1-m-t0.7-e{e}]", "epoch": e,
             "correct": e != 2, "prediction": "A" if e != 2 else "B", "score": float(e)} for e in (1, 2, 3)]
    (row,) = collapse_epochs(rows)
    assert row["prediction"] == "A" and row["correct"] == pytest.approx(2 / 3) and row["score"] == 2.0
    assert row["epochs"] == 3 and "epoch" not in row


def test_combination_ids_and_columns():
    cells, notices = combinations(["gpt-4o-mini"], {"model": ["x"], "temperature": [0.0, 0.7]}, epochs=2)
    assert [c.test_id for c in cells] == ["gpt-4o-mini-t0", "gpt-4o-mini-t0.7-e1", "gpt-4o-mini-t0.7-e2"]
    assert notices == ["fieldeval: --epochs 2 at temperature 0: the answers would be identical, so "
                       "gpt-4o-mini-t0 runs once"]
    assert Combination("gpt-4o", {"temperature": 0.0}).columns() == {
        "hyperparameters": "model=gpt-4o_temperature=0.0", "model_name": "gpt-4o", "temperature": 0.0}


def test_stored_runs_and_compare_are_keyed_by_the_combination(project):
    import subprocess
    import sys
    from pathlib import Path

    store = project.path / "runs.db"
    for run_id, extra in (("run_base", ()), ("run_more", ("--epochs", "2"))):
        result = project.runpytest_subprocess(*ARGS[:-4], "--store", str(store), "--run-id", run_id,
                                              "--bootstrap-resamples", "200", "--model", "fake-b",
                                              "--temperature", "0", "--temperature", "0.7", *extra)
        assert result.ret == 0, result.stdout.str()[-2000:]
    fieldeval = Path(sys.executable).parent / "fieldeval"
    out = subprocess.run([str(fieldeval), "runs", "compare", "run_base", "run_more", "--store", str(store), "--json"],
                         capture_output=True, text=True, cwd=project.path, check=True)
    payload = json.loads(out.stdout)
    pairs = {(d["model"], d["metric"]): d for d in payload["differences"]}
    assert {model for model, _ in pairs} == {"fake-b-t0", "fake-b-t0.7"}
    # the second run asked the t0.7 items twice: they pair as one item each (the mean of the two answers)
    assert pairs[("fake-b-t0.7", "exact_match")]["n_items"] == CASES
    assert pairs[("fake-b-t0.7", "exact_match")]["value"] == 0.0


def test_collect_only_prints_calls_tokens_and_cost_per_combination_before_anything_is_paid(project):
    import math

    from fieldeval.benchmarks.ebs import DEFAULT_MAX_TOKENS as EBS_MAX_TOKENS

    (project.path / "pyproject.toml").write_text(
        "[tool.fieldeval.prices]\n\"fake-a\" = {input_per_mtok = 2.0, output_per_mtok = 8.0}\n")
    result = project.runpytest_subprocess(*ARGS, "--matrix", "--epochs", "2", "--collect-only", "-q")
    assert result.ret == 0, result.stdout.str()[-2000:]
    assert not (project.path / "calls.log").exists()  # nothing was sent
    suite = _suite()
    system = suite["templates"]["predict_ebs"]["system"]
    tokens = sum(math.ceil((len(c["input"]) + len(system)) / 4) for c in suite["cases"])
    rows = {line.split()[1]: line.split() for line in result.stdout.lines if line.startswith("  ebs ")}
    assert sorted(rows) == ["fake-a-t0", "fake-a-t0.7", "fake-b-t0", "fake-b-t0.7"]
    # at temperature 0 one call per item; at 0.7 two epochs, two calls per item; each answer at its budget
    budget = EBS_MAX_TOKENS
    assert rows["fake-a-t0"][2:6] == [str(CASES), str(CASES), str(tokens), str(budget * CASES)]
    assert rows["fake-a-t0.7"][2:6] == [str(2 * CASES), str(2 * CASES), str(2 * tokens), str(2 * budget * CASES)]
    assert float(rows["fake-a-t0.7"][6]) == pytest.approx((2 * tokens * 2.0 + 2 * budget * CASES * 8.0) / 1e6,
                                                          abs=1e-4)
    assert rows["fake-b-t0"][6] == "-"  # no price for fake-b
    result.stdout.fnmatch_lines(["*total: 600 calls, unknown (no price for fake-b)*"])


def test_one_job_per_model_merges_as_shards_do_and_a_models_thresholds_gate_its_combinations(project):
    import subprocess
    import sys
    from pathlib import Path

    store = project.path / "runs.db"
    (project.path / "pyproject.toml").write_text('[tool.fieldeval.thresholds."fake-b"]\n"ebs.exact_match" = 0.9\n')
    for job, gated in ((1, 0), (2, 1)):  # fake-a has no gate; fake-b scores under its 0.9
        result = project.runpytest_subprocess(*ARGS[:-4], "--store", str(store), "--matrix", "--matrix-job", str(job),
                                              "--run-group", "nightly", "--bootstrap-resamples", "200")
        assert result.ret == gated, result.stdout.str()[-2000:]
        result.stdout.fnmatch_lines(["*200 passed, 200 deselected*"])
    fieldeval = Path(sys.executable).parent / "fieldeval"
    done = subprocess.run([str(fieldeval), "runs", "merge", "nightly", "--store", str(store), "--json"],
                          capture_output=True, text=True, cwd=project.path)
    assert done.returncode == 1, done.stdout + done.stderr  # fake-b's own threshold reaches its combinations
    gates = {(g["model"], g["threshold"]): g["passed"] for g in json.loads(done.stdout)["payload"]["gates"]}
    assert gates == {("fake-b-t0", 0.9): False, ("fake-b-t0.7", 0.9): False}
    out = subprocess.run([str(fieldeval), "runs", "list", "--store", str(store), "--json"],
                         capture_output=True, text=True, cwd=project.path, check=True)
    runs = json.loads(out.stdout)
    merged = [run for run in runs if run.get("status") == "completed"
              and sorted(run.get("models") or []) == ["fake-a-t0", "fake-a-t0.7", "fake-b-t0", "fake-b-t0.7"]]
    assert len(runs) == 3 and len(merged) == 1, out.stdout  # two one-model jobs, and their merge of all four


def test_a_matrix_job_past_the_last_model_is_one_line(project):
    result = project.runpytest_subprocess(*ARGS, "--matrix", "--matrix-job", "3")
    assert result.ret == 2
    assert result.stderr.lines[-1].startswith("Exit: --matrix-job 3: the matrix has 2 model(s) (fake-a, fake-b)")


def test_the_workflow_can_run_the_suites_matrix_one_job_per_model(data_dir):
    from fieldeval.benchmarks.ebs.suite import load_suite

    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "evals.yml").read_text(encoding="utf-8"))
    shard = workflow["jobs"]["shard"]
    models = load_suite(None).matrix["hyperparameters"]["model"]  # the pinned suite's matrix: one job each
    assert shard["strategy"]["matrix"]["group"] == list(range(1, len(models) + 1))
    script = "\n".join(step.get("run", "") for step in shard["steps"])
    assert '--matrix --matrix-job "$GROUP"' in script and "--run-group \"$GITHUB_RUN_ID\"" in script
    assert shard["env"]["DESIGN"] == "${{ inputs.design }}"
    assert workflow[True]["workflow_dispatch"]["inputs"]["design"]["options"] == ["splits", "matrix"]


def test_power_takes_epochs_into_account(project):
    import re
    import subprocess
    import sys
    from pathlib import Path

    store = project.path / "runs.db"
    result = project.runpytest_subprocess(*ARGS[:-4], "--store", str(store), "--run-id", "run_noisy",
                                          "--bootstrap-resamples", "200", "--model", "fake-c", "--temperature", "1",
                                          "--epochs", "4")
    assert result.ret in (0, 1), result.stdout.str()[-2000:]  # gates may fail on a coin; the run is stored
    fieldeval = Path(sys.executable).parent / "fieldeval"

    def needed(*extra: str) -> tuple[int, str]:
        done = subprocess.run([str(fieldeval), "power", "ebs", "--difference", "0.05", "--from-run", "run_noisy",
                               "--store", str(store), *extra], capture_output=True, text=True, cwd=project.path)
        assert done.returncode == 0, done.stdout + done.stderr
        return int(re.search(r"\): (\d+) items", done.stdout).group(1)), done.stdout

    as_run, out = needed()
    assert "4 answers per item in the run" in out
    more, _ = needed("--epochs", "16")
    one, _ = needed("--epochs", "1")
    assert more < as_run < one  # sampling noise dominates: more answers per item, fewer items needed


def test_a_models_own_thresholds_gate_each_of_its_combinations(project):
    """A table for fake-b reaches fake-b-t0 and fake-b-t0.7; fake-a's combinations take the "*" default."""
    (project.path / "pyproject.toml").write_text(
        '[tool.fieldeval.thresholds."*"]\n"ebs.exact_match" = 0.1\n\n'
        '[tool.fieldeval.thresholds."fake-b"]\n"ebs.exact_match" = 0.9\n')
    result, report, _ = _run(project, "--matrix")
    assert result.ret == 1, result.stdout.str()[-3000:]
    gates = {(g["model"], g["threshold"]): g["passed"] for g in report["evals"]["gates"] if g["metric"] == "ebs.exact_match"}
    assert gates == {("fake-a-t0", 0.1): True, ("fake-a-t0.7", 0.1): True,
                     ("fake-b-t0", 0.9): False, ("fake-b-t0.7", 0.9): False}
