"""One default store for pytest and every command: ``$FIELDEVAL_STORE``, else ``reports/fieldeval.db`` at the project root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fieldeval.store.location import default_store_url, project_root
from tests.conftest import ROOT


def test_the_project_root_is_the_nearest_folder_with_pyproject_toml(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'mybench'\n")
    (tmp_path / "evals" / "deep").mkdir(parents=True)
    (tmp_path / "evals" / "conftest.py").write_text("")
    assert project_root(tmp_path / "evals" / "deep") == tmp_path.resolve()


def test_without_pyproject_the_topmost_conftest_folder_is_the_root(tmp_path):
    (tmp_path / "proj" / "tests").mkdir(parents=True)
    (tmp_path / "proj" / "conftest.py").write_text("")
    (tmp_path / "proj" / "tests" / "conftest.py").write_text("")
    assert project_root(tmp_path / "proj" / "tests") == (tmp_path / "proj").resolve()


def test_fieldeval_store_wins_over_the_project_root(tmp_path, monkeypatch):
    monkeypatch.setenv("FIELDEVAL_STORE", "postgresql://db/x")
    assert default_store_url(tmp_path) == "postgresql://db/x"
    monkeypatch.delenv("FIELDEVAL_STORE")
    (tmp_path / "pyproject.toml").write_text("")
    assert default_store_url(tmp_path) == f"sqlite:///{tmp_path.resolve() / 'reports' / 'fieldeval.db'}"


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_pytest_and_runs_list_share_one_store_in_a_project_outside_the_checkout(tmp_path):
    project = tmp_path / "mybench"
    (project / "evals").mkdir(parents=True)
    (project / "pyproject.toml").write_text("[project]\nname = 'mybench'\nversion = '0'\n")
    (project / "evals" / "test_ibf.py").write_text((ROOT / "evals" / "test_ibf.py").read_text())
    lines = (ROOT / "fixtures" / "ibf" / "ibf-v1.0.jsonl").read_text(encoding="utf-8").splitlines()[:3]
    (project / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    env = {k: v for k, v in os.environ.items() if k != "FIELDEVAL_STORE"}
    ran = subprocess.run([sys.executable, "-m", "pytest", "evals", "--model", "ibf-floor", "--ibf-corpus",
                          "corpus.jsonl", "--corpus-version", "ibf-v1.0", "--run-id", "run_0000c0de", "--cache", "off",
                          "-p", "no:cacheprovider", "-q"], cwd=project, env=env, capture_output=True, text=True,
                         timeout=600)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-2000:]
    assert (project / "reports" / "fieldeval.db").is_file()
    listed = subprocess.run([sys.executable, "-m", "fieldeval.cli", "runs", "list"], cwd=project / "evals", env=env,
                            capture_output=True, text=True, timeout=300)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[0] == f"runs in sqlite:///{(project / 'reports' / 'fieldeval.db').resolve()}"
    assert "run_0000c0de" in listed.stdout
    assert not (ROOT / "reports" / "fieldeval.db").exists() or "run_0000c0de" not in _ids(ROOT)


def _ids(root: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "fieldeval.cli", "runs", "list", "--json"], cwd=root,
                          capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if k != "FIELDEVAL_STORE"})
    return done.stdout


@pytest.mark.parametrize("command", [["runs", "list"], ["models", "list"]])
@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_every_store_command_reads_the_project_root_store(tmp_path, command):
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "sub").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "FIELDEVAL_STORE"}
    done = subprocess.run([sys.executable, "-m", "fieldeval.cli", *command], cwd=tmp_path / "sub", env=env,
                          capture_output=True, text=True, timeout=300)
    # no store there yet: one line naming the file this command would read, exit 2
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert f"no store at {tmp_path.resolve() / 'reports' / 'fieldeval.db'};" in done.stderr
