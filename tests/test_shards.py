"""Sharded runs: pytest-split shards of one run group written to one store, merged into one run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from fieldeval.cli import main
from fieldeval.store import open_store
from tests.conftest import ROOT, fresh_pg_store
from tests.ebs_project import ARGS, SUITE, _case, make_project

PLACES = [("Iowa", "soil_data", "cropland biome [ENVO:01000245]"),
          ("Oregon", "soil_data", "forest biome [ENVO:01000174]"),
          ("Maine", "air_data", "forest biome [ENVO:01000174]")]
# eleven scored cases and one whose model call fails, so the shards' error counts are summed too
TWELVE = {**SUITE, "cases": [_case(*PLACES[i % 3]) for i in range(11)] + [SUITE["cases"][3]]}


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("GITHUB_RUN_ID", "GITHUB_STEP_SUMMARY", "FIELDEVAL_STORE", "PYTEST_XDIST_WORKER")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def _pytest(cwd, url: str, *extra: str) -> subprocess.Popen:
    args = [sys.executable, "-m", "pytest", *ARGS, "-n", "2", "--workers-as-given", "--cache", "off", "--store", url, "-q", *extra]
    return subprocess.Popen(args, cwd=cwd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _fieldeval(cwd, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fieldeval.cli", *args], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=120)


def _finish(process: subprocess.Popen) -> str:
    out, _ = process.communicate(timeout=300)
    assert process.returncode in (0, 1), out  # 1 in the one shard with the Atlantis item, whose model call fails
    return out


def _entries(run: dict) -> dict:
    """The payload's entries without wall-clock time, which differs between any two runs."""
    out = json.loads(json.dumps(run["payload"]["benchmarks"]))
    for models in out.values():
        for entry in models.values():
            entry["totals"].pop("response_time_s")
    return out


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    make_project(pytester)
    (pytester.path / "suite.yaml").write_text(yaml.safe_dump(TWELVE))
    return pytester


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_three_concurrent_shards_merge_to_the_unsharded_run(project):
    with fresh_pg_store() as url:
        _finish(_pytest(project.path, url, "--run-id", "run_whole000"))
        shards = [_pytest(project.path, url, "--splits", "3", "--group", str(k), "--run-group", "g1",
                          "--eval-report", f"reports/shard{k}.json", "--reports-dir", f"reports/shard{k}")
                  for k in (1, 2, 3)]
        for shard in shards:
            _finish(shard)
        # the shard with the failing Atlantis item is partial, as is the unsharded run: merged as partial,
        # its one errored item allowed
        merged = _fieldeval(project.path, "runs", "merge", "g1", "--store", url, "--json", "--allow-partial",
                            "--max-errors", "1")
        assert merged.returncode == 0, merged.stderr
        merged_run = json.loads(merged.stdout)
        with open_store(url) as store:
            whole = store.get_run("run_whole000")
            runs = {run.run_id: store.get_run(run.run_id) for run in store.list_runs()}
            items = {run_id: {r["corpus_item_id"] for r in store.responses(run_id)} for run_id in runs}
    shard_ids = [r for r, run in runs.items() if run["run_group"] == "g1" and run["shard_index"] is not None]
    assert sorted(runs[r]["shard_index"] for r in shard_ids) == [1, 2, 3]
    assert sorted(runs[r]["status"] for r in shard_ids) == ["completed", "completed", "partial"]
    assert merged_run["status"] == whole["status"] == "partial"
    assert all(items[r] for r in shard_ids)  # every shard ran some items...
    assert sum(len(items[r]) for r in shard_ids) == len(items["run_whole000"]) == 11  # ...each in exactly one
    assert set().union(*(items[r] for r in shard_ids)) == items["run_whole000"]
    assert merged_run["metrics"] == whole["metrics"]  # every metric, ci95 and n
    assert _entries(merged_run) == _entries(whole)  # strata, relationship counts, items, errors, tokens
    assert merged_run["payload"]["benchmarks"]["ebs"]["fake-ebs"]["errors"] == 1
    assert (merged_run["settings_hash"], merged_run["shard_count"]) == (whole["settings_hash"], 3)
    assert merged_run["total_items"] == whole["total_items"] == 12
    assert merged_run["payload"]["audit"] == whole["payload"]["audit"]  # the gold data's findings, as unsharded


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_a_merge_applies_the_project_thresholds_and_writes_the_step_summary(project):
    with fresh_pg_store() as url:
        shards = [_pytest(project.path, url, "--splits", "2", "--group", str(k), "--run-group", "g2")
                  for k in (1, 2)]
        for shard in shards:
            _finish(shard)
        (project.path / "pyproject.toml").write_text('[tool.fieldeval.thresholds]\n"ebs.ontology_score" = 0.9\n')
        merged = _fieldeval(project.path, "runs", "merge", "g2", "--store", url, "--summary-md", "summary.md",
                            "--allow-partial")  # the shard with the failing Atlantis item is partial
        again = _fieldeval(project.path, "runs", "merge", "g2", "--store", url, "--allow-partial")
    assert merged.returncode == 1, merged.stderr
    assert "FAILED gate ebs.ontology_score for fake-ebs" in merged.stderr
    assert "merged 2 shards of run group g2" in merged.stdout
    assert "| ebs.ontology_score (point) | fake-ebs |" in (project.path / "summary.md").read_text()
    assert again.returncode == 2 and "already merged as run_" in again.stderr


# --- refusals, on stored shards made directly (no pytest run needed) -------------------------------


def _row(nodeid: str, score: float) -> dict:
    return {"benchmark": "ebs", "model": "m", "case_id": nodeid[-7:], "nodeid": nodeid, "stratum": "s",
            "ontology_score": score, "exact_match": score == 1.0, "parse_success": True, "curie_label_valid": True,
            "hierarchy_score": score, "in_template_enum": True, "relationship": "exact"}


def _save_shard(store, run_id: str, index: int, count: int, nodeids: list[str], *, seed: int = 1,
                status: str = "completed") -> None:
    settings = {"seed": seed, "resamples": 50, "models": {"ebs": ["m"]}}
    rows = [_row(n, 1.0 if i % 2 else 0.5) for i, n in enumerate(nodeids)]
    payload = {"run_id": run_id, "started_at": "2026-06-01T10:00:00Z",
               "benchmarks": {"ebs": {"m": {"items": len(rows), "errors": 0}}}}
    store.save_run(payload, {"ebs": rows}, {"run_group": "g", "shard_index": index, "shard_count": count,
                                            "settings": settings, "settings_hash": f"sha256:{seed}",
                                            "status": status})


def _merge(url: str, capsys) -> tuple[int, str]:
    status = main(["runs", "merge", "g", "--store", url])
    return status, capsys.readouterr().err


NODE = "evals/test_ebs.py::test_ebs[s-case{:03d}-m]"


def test_merging_stored_shards_recomputes_the_bootstrap_over_their_union(store_url, capsys, tmp_path, monkeypatch):
    from fieldeval.benchmarks.ebs.tables import aggregate

    monkeypatch.chdir(tmp_path)  # a project without thresholds: this checkout's "*" default would gate model m
    with open_store(store_url) as store:
        _save_shard(store, "run_a", 2, 2, [NODE.format(i) for i in range(5, 9)])
        _save_shard(store, "run_b", 1, 2, [NODE.format(i) for i in range(5)])
        assert main(["runs", "merge", "g", "--store", store_url, "--json"]) == 0
        merged = json.loads(capsys.readouterr().out)
    whole = aggregate([_row(NODE.format(i), v) for i, v in enumerate([0.5, 1.0] * 2 + [0.5] + [0.5, 1.0] * 2)],
                      seed=1, resamples=50)
    assert merged["payload"]["benchmarks"]["ebs"]["m"]["ontology_score"] == whole["ontology_score"]
    assert merged["payload"]["run_group"]["shards"] == ["run_b", "run_a"]


def test_a_missing_shard_is_refused_in_one_line(store_url, capsys):
    with open_store(store_url) as store:
        _save_shard(store, "run_a", 1, 3, [NODE.format(1)])
        _save_shard(store, "run_c", 3, 3, [NODE.format(3)])
    status, err = _merge(store_url, capsys)
    assert status == 2 and err.count("\n") == 1
    assert "shard(s) 2 of 3 missing" in err


def test_an_item_in_two_shards_is_refused_in_one_line(store_url, capsys):
    with open_store(store_url) as store:
        _save_shard(store, "run_a", 1, 2, [NODE.format(1), NODE.format(2)])
        _save_shard(store, "run_b", 2, 2, [NODE.format(2), NODE.format(3)])
    status, err = _merge(store_url, capsys)
    assert status == 2 and err.count("\n") == 1
    assert f"item {NODE.format(2)} is in shard 1 and shard 2" in err


def test_shards_with_other_settings_are_refused_in_one_line(store_url, capsys):
    with open_store(store_url) as store:
        _save_shard(store, "run_a", 1, 2, [NODE.format(1)])
        _save_shard(store, "run_b", 2, 2, [NODE.format(2)], seed=7)
    status, err = _merge(store_url, capsys)
    assert status == 2 and err.count("\n") == 1
    assert "shard 2 (run_b) ran with other settings than shard 1 (run_a): seed 7 != 1" in err


def test_a_shard_that_did_not_complete_is_refused_in_one_line(store_url, capsys):
    with open_store(store_url) as store:
        _save_shard(store, "run_a", 1, 2, [NODE.format(1)])
        _save_shard(store, "run_b", 2, 2, [NODE.format(2)], status="interrupted")
    status, err = _merge(store_url, capsys)
    assert status == 2 and err.count("\n") == 1
    assert "shard 2 (run_b) is interrupted, not completed" in err


def test_a_group_with_no_shards_is_refused_in_one_line(store_url, capsys):
    from fieldeval.store import open_store

    open_store(store_url).close()  # a store, with no run of the group
    status, err = _merge(store_url, capsys)
    assert status == 2 and "run group 'g': no shards in the store" in err
