"""Which modules of a pytest command line are eval modules, and of which benchmarks: read from their marker.

A module is an eval module when its source marks a test (or the module, through ``pytestmark``) with
``pytest.mark.fieldeval(benchmark="name")``, whatever the file is called. The controller needs the
benchmarks before collection (it loads their data, opens the store and the run's files, and under
pytest-xdist it never collects at all), so the marker is read from the source, not from collected items.
Modules are found as pytest finds them: ``python_files`` patterns, ``norecursedirs``, no virtualenvs.
"""

from __future__ import annotations

import ast
import fnmatch
import os
import re
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

from fieldeval.defaults import MARKER

# a cheap look at the bytes before any parse: most test files never mention the marker
_MENTION = re.compile(rb"\b" + MARKER.encode() + rb"\s*\(")


def marked_modules(paths: Iterable[Path], *, python_files: Sequence[str],
                   norecursedirs: Sequence[str]) -> dict[Path, tuple[str, ...]]:
    """``{module path: the benchmarks its markers name}`` for every eval module under ``paths``.

    A path that is a file is read whatever its name (pytest collects a named file); a folder is walked
    for the files ``python_files`` matches. A benchmark named by an expression the source does not fix
    (not a string, nor a module-level name bound to one) is returned as ``""``.
    """
    found: dict[Path, tuple[str, ...]] = {}
    for path in paths:
        for module in _modules(path, python_files, norecursedirs):
            names = benchmarks_marked(module)
            if names:
                found[module] = names
    return found


def test_modules(paths: Iterable[Path], *, python_files: Sequence[str], norecursedirs: Sequence[str]) -> list[Path]:
    """Every module pytest would collect under ``paths`` (a named file whatever its name), marked or not."""
    return [module for path in paths for module in _modules(path, python_files, norecursedirs)]


def benchmarks_marked(module: Path) -> tuple[str, ...]:
    """The benchmarks the ``fieldeval`` markers of one module's source name, in order (none: not an eval module)."""
    try:
        if not stat.S_ISREG(module.stat().st_mode):  # a FIFO or a device named test_x.py is not read (it may block)
            return ()
        source = module.read_bytes()
    except OSError:
        return ()
    if not _MENTION.search(source):
        return ()
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):  # pytest reports the module's own error when it collects it
        return ()
    constants = {target.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
                 and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
                 for target in node.targets if isinstance(target, ast.Name)}
    names: dict[str, None] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _is_marker(node.func):
            for keyword in node.keywords:
                if keyword.arg == "benchmark":
                    names.setdefault(_text(keyword.value, constants), None)
    return tuple(names)


def _is_marker(func: ast.expr) -> bool:
    """``pytest.mark.fieldeval`` or ``mark.fieldeval`` (``from pytest import mark``)."""
    return (isinstance(func, ast.Attribute) and func.attr == MARKER
            and ((isinstance(func.value, ast.Attribute) and func.value.attr == "mark")
                 or (isinstance(func.value, ast.Name) and func.value.id == "mark")))


def _text(value: ast.expr, constants: dict[str, str]) -> str:
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return value.value
    if isinstance(value, ast.Name):
        return constants.get(value.id, "")
    return ""


def _modules(path: Path, python_files: Sequence[str], norecursedirs: Sequence[str]) -> Iterable[Path]:
    if path.is_file():
        if path.suffix == ".py":
            yield path
        return
    if not path.is_dir():
        return
    for folder, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not _skipped(Path(folder) / d, norecursedirs))
        for name in sorted(files):
            if name.endswith(".py") and any(fnmatch.fnmatch(name, pattern) for pattern in python_files):
                yield Path(folder) / name


def _skipped(folder: Path, norecursedirs: Sequence[str]) -> bool:
    """Whether pytest leaves the folder out: ``norecursedirs``, ``__pycache__``, or a virtualenv."""
    name = folder.name
    if name == "__pycache__" or any(fnmatch.fnmatch(name, pattern) for pattern in norecursedirs):
        return True
    return (folder / "pyvenv.cfg").is_file() or (folder / "bin" / "activate").is_file() or (
        folder / "conda-meta" / "history").is_file()
