"""The examples in the engine's and the scorers' docstrings run and print what they say (``# doctest: +SKIP``
marks the ones that need a store, a model or the pinned data)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import fieldeval
import scorers


def _examples() -> list[tuple[str, list[doctest.DocTest]]]:
    """Each module of fieldeval and scorers with examples to run, and its docstrings that hold them."""
    names = []
    for package in (fieldeval, scorers):
        names.append(package.__name__)
        for info in pkgutil.walk_packages(package.__path__, prefix=package.__name__ + "."):
            if not info.name.startswith("fieldeval.bundled"):  # copies of evals/ and data, no docstrings of ours
                names.append(info.name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    found = []
    for name in sorted(names):
        tests = [t for t in finder.find(importlib.import_module(name), name)
                 if any(not e.options.get(doctest.SKIP) for e in t.examples)]
        if tests:
            found.append((name, tests))
    return found


@pytest.mark.parametrize("tests", [pytest.param(tests, id=name) for name, tests in _examples()])
def test_the_docstring_examples_of(tests):
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    out: list[str] = []
    for test in tests:
        runner.run(test, out=out.append)
    assert runner.tries and runner.failures == 0, "".join(out)
