"""CI gates for real: the workflow runs the suite, never twice on dispatch, and fails shards with nothing to run."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

from tests.conftest import ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "evals.yml"


def _jobs() -> dict:
    return yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))["jobs"]


def _script(job: dict) -> str:
    return "\n".join(step.get("run", "") for step in job["steps"])


def test_dispatch_runs_the_shards_only_and_push_runs_the_full_job_only():
    jobs = _jobs()
    assert jobs["evals"]["if"] == "github.event_name != 'workflow_dispatch'"
    assert jobs["shard"]["if"] == "github.event_name == 'workflow_dispatch'"
    assert jobs["merge"]["needs"] == "shard"


def test_a_job_runs_the_projects_tests_fast_then_the_slow_cases():
    script = _script(_jobs()["tests"])
    assert ".venv/bin/pytest tests -n auto\n" in script + "\n" and "pytest tests -n auto -m slow" in script


def test_a_shard_without_provider_keys_fails_before_running_anything():
    # shards with no keys errored on every item, were stored as completed, and merged green (issue 20)
    [step] = [s for s in _jobs()["shard"]["steps"] if "--splits" in s.get("run", "")]
    script = step["run"]
    assert script.index('[ -z "$OPENAI_API_KEY" ]') < script.index("pytest evals")
    assert "exit 1" in script[:script.index("pytest evals")]


def test_slow_cases_are_a_registered_marker_left_out_by_default():
    ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "-m 'not slow'" in ini["addopts"]
    assert any(marker.startswith("slow:") for marker in ini["markers"])


def test_zizmor_finds_nothing_of_medium_severity_or_above():
    zizmor = Path(sys.executable).parent / "zizmor"
    done = subprocess.run([str(zizmor), "--offline", "--min-severity", "medium", str(WORKFLOW)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
