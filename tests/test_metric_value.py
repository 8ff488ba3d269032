"""Every metric entry of a real report has the shape fieldeval.stats.MetricValue declares."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from typing import Any, Union, get_args, get_origin, get_type_hints

import pytest

from fieldeval.benchmark import benchmarks
from fieldeval.stats import MetricValue, mean_metric
from fieldeval.store.payload import metric_entries
from tests.conftest import ROOT


def _conforms(value: Any, hint: Any) -> bool:
    """Whether a JSON value has the type ``hint`` (the forms MetricValue uses: unions, lists, float, int, None)."""
    if get_origin(hint) in (Union, types.UnionType):
        return any(_conforms(value, arg) for arg in get_args(hint))
    if get_origin(hint) is list:
        return isinstance(value, list) and all(_conforms(v, get_args(hint)[0]) for v in value)
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    raise AssertionError(f"MetricValue uses {hint!r}: teach _conforms its JSON form")


def _problems(entry: Any) -> list[str]:
    """What keeps one entry from being a MetricValue: a missing or undeclared key, or a value of another type."""
    if not isinstance(entry, dict):
        return [f"not an object: {entry!r}"]
    hints = get_type_hints(MetricValue)
    found = [f"missing {key}" for key in sorted(MetricValue.__required_keys__ - entry.keys())]
    found += [f"undeclared {key}" for key in sorted(entry.keys() - hints.keys())]
    found += [f"{key}={entry[key]!r} is not {hints[key]}" for key in sorted(entry.keys() & hints.keys())
              if not _conforms(entry[key], hints[key])]
    found += [f"{key} is not [lo, hi]" for key in ("ci95", "ci95_within")
              if isinstance(entry.get(key), list) and len(entry[key]) != 2]
    return found


def test_the_check_finds_a_changed_shape():
    # the check must be able to fail: a renamed key, an extra one, a count that became a float
    entry = mean_metric([1, 0, 1], resamples=20)
    assert _problems(entry) == []
    assert _problems({**entry, "p_value": 0.5}) == ["undeclared p_value"]
    assert _problems({k: v for k, v in entry.items() if k != "n_clusters"}) == ["missing n_clusters"]
    assert _problems({**entry, "n": 3.0}) == ["n=3.0 is not <class 'int'>"]
    assert _problems({**entry, "ci95": [0.1]}) == ["ci95 is not [lo, hi]"]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory, data_dir) -> dict:
    """The report of one run of every bundled eval with its offline baseline (on the upstream data mirror)."""
    folder = tmp_path_factory.mktemp("metric-value")
    done = subprocess.run([sys.executable, "-m", "pytest", "evals", "-q", "-p", "no:cacheprovider", "--store", "none",
                           "--reports-dir", str(folder), "--eval-report", str(folder / "report.json"),
                           "--bootstrap-resamples", "100"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads((folder / "report.json").read_text(encoding="utf-8"))


@pytest.mark.slow  # every bundled eval, in a subprocess: once in CI (-m slow)
def test_every_metric_entry_of_a_report_is_a_metric_value(report):
    found = {}
    for bench, models in report["evals"]["benchmarks"].items():
        for model, entry in models.items():
            named = dict(metric_entries(entry))
            assert {m.name for m in benchmarks()[bench].metrics} <= named.keys(), (bench, model)
            found |= {f"{bench}.{model}.{name}": value for name, value in named.items()}
    assert {name.split(".")[0] for name in found} == {"ebs", "ibf", "microbiorel"}  # every bundled eval's
    assert any(name.count(".") > 2 for name in found)  # nested entries too (per stratum, per hazard)
    assert {name: _problems(value) for name, value in found.items() if _problems(value)} == {}
