"""Dependencies by use: a user's install runs, stores and serves evals; test tools and the
PostgreSQL driver come with extras, and a PostgreSQL store without its driver says which one."""

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from fieldeval.errors import UsageError
from fieldeval.store.url import create_engine, resolve_url

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _names(requirements):
    return {Requirement(req).name.lower() for req in requirements}


def test_the_core_install_brings_no_test_tools_and_no_database_driver():
    core = _names(PROJECT["dependencies"])
    assert {"pytest", "pytest-xdist", "pytest-json-report", "oaklib", "llm", "pandas", "hypothesis", "syrupy"} <= core
    assert not core & {"selenium", "zizmor", "statsmodels", "psycopg", "mkdocs", "mkdocs-material"}
    extras = {name: _names(reqs) for name, reqs in PROJECT["optional-dependencies"].items()}
    assert "psycopg" in extras["postgres"] and "psycopg" in extras["test"]
    assert {"selenium", "zizmor"} <= extras["test"]
    assert "mkdocs-material" in extras["docs"]


def test_a_postgresql_store_without_the_driver_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # what an install without [postgres] has
    with pytest.raises(UsageError) as raised:
        create_engine(resolve_url("postgresql://fe:s3cret@db.example.org/fieldeval"))
    message = str(raised.value)
    assert "fieldeval[postgres]" in message and "s3cret" not in message and "\n" not in message


def test_the_cli_says_it_in_one_line_and_exits_2(tmp_path):
    script = ("import sys; sys.modules['psycopg'] = None; from fieldeval.cli import main; "
              "sys.exit(main(['runs', 'list', '--store', 'postgresql://fe:pw@127.0.0.1:1/x']))")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().count("\n") == 0 and "fieldeval[postgres]" in result.stderr
