"""Damaged files: a broken response cache is moved aside; a broken or unreachable store stops the run first."""

from __future__ import annotations

import sqlite3

import pytest

from fieldeval.calls.cache import CachedResponse, ResponseCache, cache_key
from fieldeval.errors import UsageError
from fieldeval.store import check_store
from tests.ebs_project import ARGS, make_project, run


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    return make_project(pytester)


def filled_cache(path) -> bytes:
    cache = ResponseCache(path)
    for n in range(500):
        cache.put(cache_key("m", {}, None, f"p{n}", None), "m", CachedResponse("answer " * 30, 0.1, 1, 1))
    cache.close()  # puts are committed in groups; close commits the last one
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path.read_bytes()


@pytest.mark.parametrize("damage", ["truncated", "garbage", "binary"])
def test_damaged_cache_is_moved_aside_with_one_warning(tmp_path, damage):
    path = tmp_path / "responses.sqlite"
    data = filled_cache(path)
    path.write_bytes({"truncated": data[:len(data) // 2], "garbage": b"not a cache\n" * 100,
                      "binary": bytes(range(256)) * 40}[damage])
    warnings = []
    cache = ResponseCache(path, warn=warnings.append)
    assert len(cache) == 0
    (line,) = warnings
    (aside,) = tmp_path.glob("responses.sqlite.corrupt-*[0-9]Z")
    assert line.startswith(f"fieldeval: response cache {path} is damaged (") and aside.name in line
    assert aside.read_bytes()[:100] == path.with_name(aside.name).read_bytes()[:100]
    cache.put("k", "m", CachedResponse("a", 0.1, 1, 1))
    cache.flush()
    assert ResponseCache(path, warn=warnings.append).get("k").text == "a" and len(warnings) == 1


def test_cache_path_that_is_a_folder_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match=r"response cache .*: is a folder; pass a file to --cache-path"):
        ResponseCache(tmp_path)


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_run_with_a_garbage_cache_goes_on_with_a_fresh_one(project):
    (project.path / "reports").mkdir()
    (project.path / "reports" / "responses.sqlite").write_bytes(b"\x00\xff garbage" * 500)
    result, report = run(project)
    result.assert_outcomes(passed=3, failed=1)  # the fake model's one failing case, as on a clean run
    assert len([line for line in result.stderr.lines if "is damaged" in line]) == 1
    assert report["evals"]["cache"] == {"mode": "use", "hits": 0, "misses": 3}
    assert list((project.path / "reports").glob("responses.sqlite.corrupt-*"))


def test_damaged_store_stops_the_run_before_any_model_call(project):
    (project.path / "reports").mkdir()
    store = project.path / "reports" / "fieldeval.db"
    store.write_bytes(b"\x00garbage\xff" * 300)
    result = project.runpytest_subprocess(*ARGS)
    assert result.ret == 2
    result.stderr.fnmatch_lines([f"Exit: --store 'sqlite:///{store}': the database is damaged or not a fieldeval store (file is not a database)*"])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()
    assert not (project.path / "calls.log").exists()


def test_unreachable_store_is_one_line_with_the_password_hidden(project):
    result = project.runpytest_subprocess(*ARGS, "--store", "postgresql://fe:s3cret@127.0.0.1:1/fieldeval")
    assert result.ret == 2
    result.stderr.fnmatch_lines(["Exit: --store 'postgresql*://fe:***@127.0.0.1:1/fieldeval': cannot open*"])
    assert "s3cret" not in result.stderr.str() + result.stdout.str()
    assert not (project.path / "calls.log").exists()


def test_check_store_without_create_refuses_a_missing_file(tmp_path):
    with pytest.raises(UsageError, match="no store at .*missing.db; run an evaluation first"):
        check_store(str(tmp_path / "missing.db"), create=False)
    check_store(str(tmp_path / "new.db"), create=True)
    check_store(str(tmp_path / "new.db"), create=False)


def test_gate_on_a_benchmark_that_scored_nothing_says_so(project):
    result, report = run(project, "-k", "case003", "--fail-under", "ebs.ontology_score=0.5")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["FAILED gate ebs.ontology_score for fake-ebs: ebs scored no items for fake-ebs*"])
    assert "is below the threshold" not in result.stdout.str()
    assert report["evals"]["gates"][0]["passed"] is False


@pytest.mark.parametrize("damage", [b"\x80\x6e", b"", bytes(range(256)) * 8, b"\x80\x04\x95\x10\x00\x00\x00"])
def test_a_damaged_ontology_index_is_built_again(tmp_path, monkeypatch, damage):
    # "unsupported pickle protocol" (a ValueError) ended every session in an INTERNALERROR until deleted by hand
    from fieldeval import ontology
    from tests.conftest import TINY_SELECTOR

    monkeypatch.setenv("FIELDEVAL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(ontology, "_loaded", {})
    built = ontology.load_index(TINY_SELECTOR)
    [path] = (tmp_path / "cache" / "index").glob("*.pickle")
    path.write_bytes(damage)
    monkeypatch.setattr(ontology, "_loaded", {})
    again = ontology.load_index(TINY_SELECTOR)
    assert again.label("ENVO:01000174") == built.label("ENVO:01000174") == "forest biome"
    assert ontology._read(path) is not None  # rebuilt on disk too
