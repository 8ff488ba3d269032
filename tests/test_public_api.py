"""The public faces of scorers and fieldeval list exactly what they export; scorers stay pure."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import fieldeval
import scorers

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("module", [scorers, fieldeval])
def test_all_matches_the_public_names(module):
    # dir(), not vars(): fieldeval imports a public name where it is first used (module __getattr__)
    public = {name for name in dir(module) if not name.startswith("_") and name != "annotations"}
    public -= {name for name in public if type(getattr(module, name)).__name__ == "module"}
    assert sorted(module.__all__) == sorted(public)


@pytest.mark.parametrize("path", sorted((ROOT / "scorers").glob("*.py")), ids=lambda p: p.name)
def test_scorers_import_no_engine_pytest_or_io(path):
    # scorers are pure: the engine imports them, never the reverse
    tree = ast.parse(path.read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert not imported & {"pytest", "fieldeval", "os", "pathlib", "requests", "sqlite3", "llm", "pooch"}
