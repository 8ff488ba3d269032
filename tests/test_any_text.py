"""Any text a model returns (lone surrogates, NUL, a megabyte) is cached, stored and written, kept escaped."""

from __future__ import annotations

import csv
import json
import secrets

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fieldeval.benchmark import benchmarks
from fieldeval.cache import CachedResponse, ResponseCache, cache_key
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


@FEW
@given(text=ANY_TEXT)
@example(text=MEGABYTE)
@example(text=NASTY)
def test_every_benchmark_writes_any_response_into_its_tables(tmp_path_factory, text):
    folder = tmp_path_factory.mktemp("reports")
    row = {"model": "m", "case_id": "c1", "item_id": "i1", "hop_distance": None, "cached": False,
           **{column: text for column in TEXT_COLUMNS}}
    csv.field_size_limit(2**31 - 1)
    for name, bench in benchmarks().items():
        (path,) = bench.write_outputs([row], folder)
        with open(path, newline="", encoding="utf-8") as handle:  # strict: every byte is UTF-8
            header, cells = list(csv.reader(handle, delimiter="\t"))
        kept = text.encode("utf-8", "backslashreplace").decode("utf-8")  # NUL is valid UTF-8: kept as it is
        assert dict(zip(header, cells))["response_text"] == kept, name


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
