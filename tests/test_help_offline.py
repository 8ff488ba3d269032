"""Help prints offline: ``pytest --help`` and ``--collect-only`` load no benchmark data before items are collected."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.fixture
def offline(tmp_path) -> dict[str, str]:
    """No data folder, an empty download cache, and every download sent to a closed port."""
    env = {k: v for k, v in os.environ.items() if k not in ("FIELDEVAL_DATA_DIR", "FIELDEVAL_STORE")}
    return {**env, "FIELDEVAL_CACHE_DIR": str(tmp_path / "cache"), "HTTPS_PROXY": "http://127.0.0.1:9",
            "HTTP_PROXY": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9", "NO_PROXY": ""}


def _pytest(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", *args, "-p", "no:cacheprovider"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_pytest_help_prints_in_the_project_root_with_no_data_and_no_network(offline):
    # it tried to download the EBS suite and printed a 60-line traceback (issue 20)
    done = _pytest("--help", env=offline)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "fieldeval ebs: env_broad_scale" in done.stdout and "--ibf-corpus" in done.stdout
    assert "Traceback (most recent call last)" not in done.stdout + done.stderr


def test_help_shows_words_for_values_not_environment_variable_metavars(offline):
    done = _pytest("--help", env=offline)
    assert not re.search(r"--[\w-]+=FIELDEVAL_", done.stdout), re.findall(r"--[\w-]+=FIELDEVAL_\w+", done.stdout)
    assert "--ibf-temperature=T" in done.stdout and "--ibf-max-tokens=N" in done.stdout


def test_collect_only_of_the_suites_own_tests_loads_no_benchmark_data(offline):
    done = _pytest("--collect-only", "-q", "tests/test_gate_defaults.py", env=offline)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert re.search(r"^\d+ tests collected", done.stdout, re.M), done.stdout


def test_collect_only_of_an_eval_with_bundled_data_needs_no_download(offline):
    done = _pytest("--collect-only", "-q", "evals/test_ibf.py", env=offline)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "65 tests collected" in done.stdout


@pytest.mark.parametrize("command", [[], ["score"], ["runs"], ["runs", "list"], ["models", "add"], ["serve"]])
def test_command_help_has_no_rst_markup(command):
    done = subprocess.run([sys.executable, "-m", "fieldeval.cli", *command, "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "``" not in done.stdout and ":func:" not in done.stdout and ":class:" not in done.stdout
