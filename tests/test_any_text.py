"""Any text a model returns (lone surrogates, NUL, a megabyte) is cached, stored and written, kept escaped."""

from __future__ import annotations

import functools
import importlib.util
import json
import secrets
import sys
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fieldeval.benchmark import Benchmark, benchmarks
from fieldeval.inputs import tsv_cell
from fieldeval.calls.cache import CachedResponse, ResponseCache, cache_key
from fieldeval.store import open_store
from fieldeval.store.payload import storable
from tests.ebs_project import SLOW_ARGS, make_slow_project
from tests.conftest import fresh_pg_store

ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=40)  # surrogates (Cs) included
MEGABYTE = "\ud800 \x00 " + "x" * 1_000_000
NASTY = "a\x00b\ud800c\udfff\U0001f600\r\n\t\"'\\x00"
FEW = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def escaped(text: str) -> str:
    """What a store or a table keeps of ``text``: NUL and lone surrogates as backslash escapes."""
    return text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")


@FEW
@given(text=ANY_TEXT)
@example(text=MEGABYTE)
@example(text=NASTY)
def test_cache_returns_exactly_the_text_it_was_given(tmp_path_factory, text):
    cache = ResponseCache(tmp_path_factory.mktemp("cache") / "responses.sqlite")
    key = cache_key("m", {}, None, text, None)  # a prompt may hold the same text
    cache.put(key, "m", CachedResponse(text, 0.1, 1, 1))
    assert cache.get(key).text == text


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def store(request, tmp_path_factory):
    if request.param == "sqlite":
        with open_store(str(tmp_path_factory.mktemp("store") / "store.db")) as opened:
            yield opened
        return
    with fresh_pg_store() as url, open_store(url) as opened:
        yield opened


@FEW
@given(text=ANY_TEXT)
@example(text=MEGABYTE)
@example(text=NASTY)
def test_store_keeps_any_response_escaped(store, text):
    run_id = "run_" + secrets.token_hex(4)
    payload = {"run_id": run_id, "started_at": "2026-01-01T00:00:00+00:00",
               "benchmarks": {"ebs": {"m": {"ontology_score": {"value": 0.5, "ci95": [0, 1], "n": 1}, "items": 1}}}}
    row = {"benchmark": "ebs", "model": "m", "case_id": "c1", "response_text": text, "predicted_label": text,
           "ontology_score": 0.5}
    store.save_run(payload, {"ebs": [row]}, {"label": text})
    (stored,) = store.responses(run_id)
    assert stored["raw_response"] == escaped(text)
    assert stored["metrics"]["predicted_label"] == escaped(text)
    assert store.get_run(run_id)["label"] == escaped(text)


def test_escaping_keeps_every_ordinary_character():
    assert storable("forest biome [ENVO:01000174] \u00e9\U0001f600\\n") == "forest biome [ENVO:01000174] \u00e9\U0001f600\\n"
    assert storable({"k": ["\x00", ("\ud800",)]}) == {"k": ["\\x00", ["\\ud800"]]}


TEXT_COLUMNS = ("response_text", "judge_response", "summary_text")
BUILT_IN = ("ebs", "ibf", "microbiorel")  # an installed third-party benchmark writes rows of its own shape
TINYBENCH = Path(__file__).resolve().parents[1] / "docs" / "examples" / "tinybench" / "tinybench" / "__init__.py"
ROUND_TRIP = settings(max_examples=25, deadline=None)


@functools.cache
def _tinybench() -> Benchmark:
    """The example third-party benchmark, loaded from its source (not installed)."""
    spec = importlib.util.spec_from_file_location("tinybench_any_text", TINYBENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module.BENCHMARK


def _writers() -> list[tuple[str, Benchmark, dict, tuple[str, ...]]]:
    """(name, benchmark, row template, text columns) for every built-in benchmark and the third-party example."""
    built = {name: bench for name, bench in benchmarks().items() if name in BUILT_IN}
    assert sorted(built) == sorted(BUILT_IN)
    row = {"model": "m", "case_id": "c1", "item_id": "i1", "hop_distance": None, "cached": False}
    out = [(name, bench, row, TEXT_COLUMNS) for name, bench in sorted(built.items())]
    return out + [("tinybench", _tinybench(), {"model": "m", "case": "1+3", "correct": False}, ("answer",))]


def _read_back(path: Path):
    """The table as pandas reads it: every cell a string, nothing turned into NaN."""
    return pd.read_csv(path, sep="\t", dtype=str, keep_default_na=False, encoding="utf-8")


@ROUND_TRIP
@given(text=ANY_TEXT)
@example(text="\r")  # a bare carriage return was written unquoted: read_csv split the row in 2-4 (issue 20)
@example(text="\n")
@example(text="\r\n")
@example(text="\t")
@example(text='"')
@example(text='"quoted" and \ttab')
@example(text="\x00")
@example(text=MEGABYTE)
@example(text=NASTY)
def test_every_benchmark_table_round_trips_any_text_through_read_csv(tmp_path_factory, text):
    folder = tmp_path_factory.mktemp("reports")
    for name, bench, template, columns in _writers():
        row = {**template, **{column: text for column in columns}}
        (path,) = bench.write_outputs([row], folder / name)
        table = _read_back(path)
        assert len(table) == 1, (name, len(table))
        assert table.loc[0, "model"] == "m", name
        for column in columns:
            if column in table.columns:
                assert table.loc[0, column] == escaped(text), (name, column)
        assert columns[0] in table.columns, name


def test_a_tsv_cell_quotes_every_row_breaking_character_and_escapes_nul():
    assert [tsv_cell(t) for t in ["\r", "\n", "\t", '"', "\x00", "plain"]] == [
        '"\r"', '"\n"', '"\t"', '""""', "\\x00", "plain"]


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_a_run_whose_model_answers_nasty_text_is_cached_stored_and_written(pytester):
    project = make_slow_project(pytester, cases=2)
    (project.path / "answer.json").write_text(json.dumps(NASTY))
    for cache in ("use", "use"):  # the second run reads the answers back from the cache
        result = project.runpytest_subprocess(*[a for a in SLOW_ARGS if a not in ("--cache", "off")],
                                              "--cache", cache)
        assert result.ret == 0, result.stderr.str()
    report = json.loads((project.path / "reports" / "report.json").read_text())
    assert report["evals"]["cache"]["hits"] == 2
    table = (project.path / "reports" / "ebs" / "results_envo_scored.tsv").read_text(encoding="utf-8")
    assert "b\\ud800c\\udfff" in table
    with open_store(str(project.path / "reports" / "fieldeval.db")) as store:
        runs = store.list_runs()
        assert {r["raw_response"] for r in store.responses(runs[-1].run_id)} == {escaped(NASTY)}
