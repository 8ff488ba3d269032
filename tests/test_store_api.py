"""The run store on SQLite (always) and PostgreSQL (when FIELDEVAL_TEST_PG is set, as in CI)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

from fieldeval.benchmark import StoreColumns
from fieldeval.errors import UsageError
from fieldeval.store import MIGRATIONS, ModelConflict, evaluation_responses, open_store
from fieldeval.store.schema import GENERIC
from tests.store_columns import IBF_COLUMNS

# The seed's compare payload (002, "Comparing runs via API"), numbers as written there.
SEED_RUNS = [
    {"run_id": "run_3b9e204a", "model_name": "phi-3-mini-4k", "mean_dimension_score": 2.60,
     "threshold_pass_rate": 0.54,
     "scores": {"hazard_recognition": 3.12, "impact_reasoning": 2.47, "uncertainty_handling": 1.83,
                "action_relevance": 2.91, "geographic_specificity": 2.68}},
    {"run_id": "run_9c1d88f0", "model_name": "mistral-7b-instruct-v0.3", "mean_dimension_score": 3.21,
     "threshold_pass_rate": 0.72,
     "scores": {"hazard_recognition": 3.54, "impact_reasoning": 3.10, "uncertainty_handling": 2.88,
                "action_relevance": 3.22, "geographic_specificity": 3.31}},
    {"run_id": "run_0a7c553e", "model_name": "gemma-2b-it", "mean_dimension_score": 1.94,
     "threshold_pass_rate": 0.28,
     "scores": {"hazard_recognition": 2.31, "impact_reasoning": 1.77, "uncertainty_handling": 1.40,
                "action_relevance": 2.05, "geographic_specificity": 2.17}},
]
DIMENSIONS = list(SEED_RUNS[0]["scores"])


def metric(value: float, n: int = 3) -> dict:
    return {"value": value, "ci95": [round(value - 0.1, 4), round(value + 0.1, 4)], "n": n}


def ibf_run(seed: dict, *, started_at: str = "2026-05-29T08:14:03Z", items: int = 3) -> tuple[dict, dict]:
    """A payload and rows for one IBF run of one model, with the seed's aggregate numbers."""
    entry = {name: metric(value, items) for name, value in seed["scores"].items()}
    entry["mean_dimension_score"] = metric(seed["mean_dimension_score"], items)
    entry["threshold_pass_rate"] = metric(seed["threshold_pass_rate"], items)
    entry.update(items=items, errors=0)
    payload = {"run_id": seed["run_id"], "started_at": started_at, "ontology_version": None,
               "benchmarks": {"ibf": {seed["model_name"]: entry}}}
    rows = [{"benchmark": "ibf", "model": seed["model_name"], "case_id": f"ci_{i:04d}",
             "response_text": f"answer {i}", "response_time_s": 0.5, "prompt_tokens": 100, "completion_tokens": 20,
             "est_cost_usd": 0.0001, "cached": i == 0, **{d: (i + k) % 5 for k, d in enumerate(DIMENSIONS)}}
            for i in range(items)]
    return payload, {"ibf": rows}


def ebs_run(run_id: str, models: dict[str, float], *, started_at: str = "2026-06-01T10:00:00Z") -> tuple[dict, dict]:
    """A payload and rows for an EBS run of several models, shaped like ebs.aggregate's output."""
    bench = {}
    rows = []
    for model, score in models.items():
        bench[model] = {
            "ontology_score": metric(score), "exact_match": metric(score / 2), "parse_success": metric(1.0),
            "curie_label_valid": metric(1.0), "hierarchy_score": metric(score), "in_template_enum": metric(0.5),
            "relationship_counts": {"exact": 1, "descendant": 1, "ancestor": 0, "unrelated": 1, "parse_failure": 0},
            "per_stratum": {"soil": {"ontology_score": metric(score), "exact_match": metric(score / 2)}},
            "items": 3, "errors": 0,
        }
        rows += [{"benchmark": "ebs", "model": model, "case_id": f"case_{i}", "response_text": "forest biome",
                  "ontology_score": score, "exact_match": 0, "stratum": "soil", "nodeid": f"evals/x.py::t[{i}]",
                  "response_time_s": 0.01, "prompt_tokens": None, "completion_tokens": None, "est_cost_usd": None,
                  "cached": False} for i in range(3)]
    return {"run_id": run_id, "started_at": started_at, "ontology_version": "envo 2024-07-01",
            "benchmarks": {"ebs": bench}}, {"ebs": rows}


@pytest.fixture
def store(store_url):
    with open_store(store_url, columns=IBF_COLUMNS) as opened:
        yield opened


def save_seed_runs(store) -> None:
    for i, seed in enumerate(SEED_RUNS):
        store.save_run(*ibf_run(seed, started_at=f"2026-05-29T08:1{i}:00Z"), {"corpus_version": "ibf-v2.1",
                                                                             "label": f"{seed['model_name']} run"})


def test_save_run_then_get_run_returns_metrics_times_and_counts(store):
    payload, rows = ibf_run(SEED_RUNS[0])
    run_id = store.save_run(payload, rows, {"label": "phi-3-mini baseline run", "corpus_version": "ibf-v2.1",
                                            "content_hash": "sha256:abc", "git_commit": "deadbeef",
                                            "completed_at": "2026-05-29T08:27:11Z"})
    run = store.get_run(run_id)
    assert run_id == "run_3b9e204a"
    assert run["label"] == "phi-3-mini baseline run"
    assert (run["status"], run["total_items"], run["responses"]) == ("completed", 3, 3)
    assert (run["created_at"], run["completed_at"]) == ("2026-05-29T08:14:03Z", "2026-05-29T08:27:11Z")
    assert run["corpus_versions"] == {"ibf": "ibf-v2.1"}
    # n_clusters comes from the saved payload: None for a payload (as this seed's) without it
    assert run["metrics"]["ibf"]["phi-3-mini-4k"]["impact_reasoning"] == {"value": 2.47, "ci95": [2.37, 2.57], "n": 3,
                                                                          "n_clusters": None}
    # the seed's evaluations columns are filled for a one-model IBF run
    assert (run["mean_dimension_score"], run["threshold_pass_rate"], run["hazard_recognition"]) == (2.60, 0.54, 3.12)
    assert run["totals"]["phi-3-mini-4k"] == {"items": 3, "cached": 1, "prompt_tokens": 300, "completion_tokens": 60,
                                              "est_cost_usd": 0.0003, "response_time_s": 1.5}
    assert run["payload"] == payload


def test_responses_keep_raw_text_scores_timing_and_tokens(store):
    store.save_run(*ibf_run(SEED_RUNS[0]))
    first = store.responses("run_3b9e204a")[0]
    assert (first["corpus_item_id"], first["raw_response"], first["cached"]) == ("ci_0000", "answer 0", True)
    assert (first["response_time_s"], first["prompt_tokens"], first["completion_tokens"]) == (0.5, 100, 20)
    assert first["hazard_recognition"] == 0 and first["impact_reasoning"] == 1
    assert first["metrics"]["geographic_specificity"] == 4


def test_nested_ebs_metrics_are_stored_with_dotted_names(store):
    store.save_run(*ebs_run("run_00000001", {"gpt-4o-mini": 0.8}))
    metrics = store.get_run("run_00000001")["metrics"]["ebs"]["gpt-4o-mini"]
    assert metrics["per_stratum.soil.ontology_score"]["value"] == 0.8
    assert "relationship_counts" not in metrics


def test_the_corpus_version_defaults_to_the_one_the_rows_share(store):
    # IBF rows carry item_id and corpus_version (evals/test_ibf.py records them)
    payload, rows = ibf_run(SEED_RUNS[0])
    rows["ibf"] = [{**{k: v for k, v in r.items() if k != "case_id"}, "item_id": f"ci_{i}", "corpus_version": "ibf-v1.0"}
                   for i, r in enumerate(rows["ibf"])]
    store.save_run(payload, rows)
    assert store.get_run("run_3b9e204a")["corpus_versions"] == {"ibf": "ibf-v1.0"}
    assert store.responses("run_3b9e204a")[1]["corpus_item_id"] == "ci_1"


def test_list_runs_filters_by_benchmark_and_corpus_version(store):
    save_seed_runs(store)
    store.save_run(*ebs_run("run_000000e1", {"gpt-4o-mini": 0.8}), {"corpus_version": {"ebs": "ebs-suite@3f2a"}})
    assert [r.run_id for r in store.list_runs()] == ["run_3b9e204a", "run_9c1d88f0", "run_0a7c553e", "run_000000e1"]
    assert [r.run_id for r in store.list_runs(benchmark="ebs")] == ["run_000000e1"]
    assert len(store.list_runs(benchmark="ibf", corpus_version="ibf-v2.1")) == 3
    assert store.list_runs(benchmark="ebs", corpus_version="ibf-v2.1") == []


def test_compare_matches_the_seed_payload_for_its_three_runs(store):
    save_seed_runs(store)
    payload = store.compare([seed["run_id"] for seed in SEED_RUNS])
    assert list(payload) == ["runs"]
    assert [{key: entry[key] for key in SEED_RUNS[0]} for entry in payload["runs"]] == SEED_RUNS
    assert all("legacy" not in entry for entry in payload["runs"])
    assert payload["runs"][1]["benchmarks"]["ibf"]["mean_dimension_score"] == 3.21


def test_compare_gives_one_entry_per_model_of_a_multi_model_run(store):
    store.save_run(*ebs_run("run_000000e1", {"gpt-4o-mini": 0.8, "ebs-baseline": 0.6}))
    entries = store.compare(["run_000000e1"])["runs"]
    assert [(e["model_name"], e["benchmarks"]["ebs"]["ontology_score"]) for e in entries] == [
        ("ebs-baseline", 0.6), ("gpt-4o-mini", 0.8)]
    assert list(entries[0]["benchmarks"]["ebs"]) == ["ontology_score", "exact_match", "hierarchy_score",
                                                     "in_template_enum", "parse_success"]
    assert "scores" not in entries[0]  # the IBF keys appear only for IBF runs


def test_runs_on_a_superseded_corpus_version_are_tagged_legacy(store):
    save_seed_runs(store)
    newer = dict(SEED_RUNS[0], run_id="run_11111111")
    store.save_run(*ibf_run(newer, started_at="2026-07-01T00:00:00Z"), {"corpus_version": "ibf-v2.2"})
    entries = store.compare(["run_3b9e204a", "run_11111111"])["runs"]
    assert [e.get("legacy", False) for e in entries] == [True, False]
    assert [r.legacy for r in store.list_runs()] == [True, True, True, False]
    assert store.get_run("run_3b9e204a")["legacy"] is True
    # a later rerun on the old corpus does not make it current again
    rerun = dict(SEED_RUNS[1], run_id="run_22222222")
    store.save_run(*ibf_run(rerun, started_at="2026-08-01T00:00:00Z"), {"corpus_version": "ibf-v2.1"})
    assert store.get_run("run_22222222")["legacy"] is True


def test_delete_run_removes_its_responses_and_nothing_else(store):
    save_seed_runs(store)
    assert store.delete_run("run_9c1d88f0") == 3
    assert [r.run_id for r in store.list_runs()] == ["run_3b9e204a", "run_0a7c553e"]
    with store.engine.connect() as conn:
        left = conn.execute(sa.select(evaluation_responses.c.run_id).distinct()).scalars().all()
    assert sorted(left) == ["run_0a7c553e", "run_3b9e204a"]
    with pytest.raises(UsageError, match="run_9c1d88f0"):
        store.get_run("run_9c1d88f0")


def test_saving_an_existing_run_id_is_refused_and_changes_nothing(store):
    payload, rows = ibf_run(SEED_RUNS[0])
    store.save_run(payload, rows, {"label": "first"})
    changed = {**payload, "benchmarks": {"ibf": {"other-model": payload["benchmarks"]["ibf"]["phi-3-mini-4k"]}}}
    with pytest.raises(UsageError, match=r"run run_3b9e204a: already in the store .*immutable"):
        store.save_run(changed, {"ibf": rows["ibf"][:1]}, {"label": "second"})
    run = store.get_run("run_3b9e204a")
    assert (run["label"], run["models"], run["responses"]) == ("first", ["phi-3-mini-4k"], 3)


def test_add_model_is_idempotent_on_name_and_endpoint(store):
    first = store.add_model("phi-3-mini-4k", "http://localhost:11434/v1/chat/completions", provider="local",
                            context_window=4096, parameters_billion=3.8, notes="4-bit GGUF quantisation")
    again = store.add_model("phi-3-mini-4k", "http://localhost:11434/v1/chat/completions", notes="changed")
    other = store.add_model("mistral-7b", "http://gpu-box:8000/v1")
    assert again == first and other.model_id != first.model_id
    assert first.model_id.startswith("mdl_") and len(first.model_id) == 12
    assert first.registered_at.endswith("Z")
    assert sorted(m.endpoint for m in store.list_models()) == ["http://gpu-box:8000/v1",
                                                               "http://localhost:11434/v1/chat/completions"]


def test_a_second_endpoint_for_a_name_is_refused_unless_replaced(store):
    first = store.add_model("phi-3-mini-4k", "http://localhost:11434/v1", provider="local")
    with pytest.raises(ModelConflict, match=r"'phi-3-mini-4k': already registered at http://localhost:11434/v1; "
                                            r"pass --replace"):
        store.register_model("phi-3-mini-4k", "http://gpu-box:8000/v1")
    replaced, changed = store.register_model("phi-3-mini-4k", "http://gpu-box:8000/v1", replace=True,
                                             key_env="GPU_BOX_KEY")
    assert changed and replaced.model_id == first.model_id  # runs that point at it keep their model
    assert [(m.endpoint, m.key_env, m.provider) for m in store.list_models()] == [
        ("http://gpu-box:8000/v1", "GPU_BOX_KEY", None)]


@pytest.mark.parametrize("key_env", ["sk-live-123", "MY KEY", ""])
def test_a_key_env_that_is_not_a_variable_name_is_refused_without_echoing_it(store, key_env):
    with pytest.raises(UsageError, match="not an environment variable name") as info:
        store.register_model("m", "http://127.0.0.1:9/v1", key_env=key_env)
    assert "sk-live" not in str(info.value)


def test_migrations_are_applied_once_and_versioned(store_url):
    with open_store(store_url) as first:
        assert first.schema_versions() == [version for version, _, _ in MIGRATIONS]
        assert first.migrate() == []
    with open_store(store_url) as second:
        assert second.schema_versions() == [version for version, _, _ in MIGRATIONS]


@pytest.mark.parametrize("call", ["get_run", "delete_run", "compare", "responses"])
def test_an_unknown_run_id_is_a_one_line_usage_error(store, call):
    argument = ["run_deadbeef"] if call == "compare" else "run_deadbeef"
    with pytest.raises(UsageError, match=r"run 'run_deadbeef': not in the store .*fieldeval runs list") as info:
        getattr(store, call)(argument)
    assert "\n" not in str(info.value)


WRITER = textwrap.dedent("""
    import pathlib, sys, time
    sys.path.insert(0, {tests!r})
    from test_store_api import ebs_run
    from fieldeval.store import open_store
    barrier = pathlib.Path({barrier!r})
    (barrier / {tag!r}).touch()
    while len(list(barrier.iterdir())) < 2:  # both imported: open and write at the same moment
        time.sleep(0.005)
    store = open_store({url!r})
    for i in range({count}):
        store.save_run(*ebs_run(f"run_{tag}{{i:07d}}", {{"m": 0.5}}), {{"label": "{tag}"}})
        store.add_model("shared", "http://127.0.0.1:9/v1")
""")


def test_two_processes_save_runs_to_one_fresh_store_at_once(store_url, tmp_path):
    tests, barrier = os.path.dirname(__file__), tmp_path / "barrier"
    barrier.mkdir()
    code = {tag: WRITER.format(tests=tests, url=store_url, count=10, tag=tag, barrier=str(barrier)) for tag in "ab"}
    writers = [subprocess.Popen([sys.executable, "-c", code[tag]],
                                stderr=subprocess.PIPE, text=True) for tag in "ab"]
    errors = [w.communicate(timeout=120)[1] for w in writers]
    assert [w.returncode for w in writers] == [0, 0], errors
    with open_store(store_url) as store:
        runs = store.list_runs()
        assert len(runs) == 20 and {r.label for r in runs} == {"a", "b"}
        assert store.schema_versions() == [version for version, _, _ in MIGRATIONS]
        assert len(store.list_models()) == 1
        with store.engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(evaluation_responses)).scalar_one() == 60


@pytest.mark.parametrize("url, message", [
    ("mysql://root@localhost/db", "unsupported database 'mysql'"),
    ("sqlite://", "needs a file"),
    ("postgresql://nobody:secret@127.0.0.1:1/none", "cannot open the database"),
])
def test_a_bad_store_url_is_a_one_line_usage_error(url, message):
    with pytest.raises(UsageError, match=message) as info:
        open_store(url)
    assert "\n" not in str(info.value) and "secret" not in str(info.value)


def test_a_bare_path_opens_a_sqlite_store(tmp_path):
    with open_store(str(tmp_path / "sub" / "runs.db")) as store:
        assert store.list_runs() == []
    assert (tmp_path / "sub" / "runs.db").is_file()


def test_a_store_made_before_the_package_opens_unchanged_and_keeps_its_ibf_columns(tmp_path):
    # the IBF columns were wired into the tables then; opening must not add or move any
    path = tmp_path / "v1.db"
    with sqlite3.connect(path) as conn:
        conn.executescript((Path(__file__).parent / "store_v1_sqlite.sql").read_text())
        conn.execute("INSERT INTO schema_version VALUES (1, 'initial schema', '2026-05-29 08:00:00.000000')")
        before = [row[1] for row in conn.execute("PRAGMA table_info(evaluations)")]
    with open_store(f"sqlite:///{path}", columns=IBF_COLUMNS) as store:
        assert store.migrate() == []
        save_seed_runs(store)
    with sqlite3.connect(path) as conn:
        after = [row[1] for row in conn.execute("PRAGMA table_info(evaluations)")]
    assert after[:len(before)] == before  # later migrations only append generic columns
    assert set(after[len(before):]) <= set(GENERIC.evaluations.c.keys())
    with open_store(f"sqlite:///{path}") as store:  # no benchmark declares anything: the columns still read back
        run = store.get_run("run_9c1d88f0")
        assert (run["mean_dimension_score"], run["uncertainty_handling"]) == (3.21, 2.88)
        assert (run["items_planned"], run["items_done"], run["items_errored"], run["errors"]) == (None, None, None, [])
        assert store.responses("run_9c1d88f0")[0]["impact_reasoning"] == 1


def test_a_column_a_newly_installed_benchmark_declares_is_added_on_open(store_url):
    with open_store(store_url, columns=IBF_COLUMNS) as store:
        save_seed_runs(store)
    toy = {**IBF_COLUMNS, "toy": StoreColumns(run=("toy_score",), response=("toy_label",))}
    for _ in range(2):  # the second open finds the columns and adds nothing
        with open_store(store_url, columns=toy) as store:
            assert store.tables.run_columns[-1] == "toy_score"
    with open_store(store_url, columns=toy) as store:
        payload = {"run_id": "run_70700001", "started_at": "2026-06-01T00:00:00Z",
                   "benchmarks": {"toy": {"m": {"toy_score": metric(0.25), "items": 1, "errors": 0}}}}
        store.save_run(payload, {"toy": [{"model": "m", "case_id": "t1", "toy_label": 3}]})
        assert store.get_run("run_70700001")["toy_score"] == 0.25
        assert store.responses("run_70700001")[0]["toy_label"] == 3
        assert store.get_run("run_3b9e204a")["toy_score"] is None
        assert store.compare(["run_70700001"])["runs"][0]["toy_score"] == 0.25


@pytest.mark.parametrize("declared", [StoreColumns(run=("label",)), StoreColumns(response=("Bad Name",))])
def test_a_declared_column_that_is_generic_or_not_an_identifier_is_refused(tmp_path, declared):
    with pytest.raises(ValueError, match="declare a new lowercase identifier"):
        open_store(str(tmp_path / "store.db"), columns={"bad": declared})


def test_response_rows_are_stored_as_sqlalchemys_own_insert_stores_them(store, monkeypatch):
    """The response rows' insert (the driver's executemany on SQLite) against SQLAlchemy's insert of the same
    rows: every column as the database holds it, times with and without fractions, a NUL and a lone surrogate."""
    from fieldeval.store import runs
    from fieldeval.store.payload import JSON_TEXT

    payload, rows = ibf_run(SEED_RUNS[0], items=5)
    items = rows["ibf"]
    items[0]["scored_at"] = "2026-05-29T08:14:03Z"
    items[1]["scored_at"] = "2026-05-29T10:14:03.25+02:00"
    items[2]["cached"] = None
    items[3].update(response_text="nul \x00 and a lone \ud800", prompt_tokens=None, est_cost_usd=None)
    meta = {"completed_at": "2026-05-29T08:27:11Z"}
    store.save_run(payload, rows, meta)

    def sqlalchemy_insert(conn, table, batches):
        for batch in batches:
            conn.execute(table.insert(), [{**{k: v for k, v in row.items() if k not in JSON_TEXT.values()},
                                           **{column: json.loads(row[text]) for column, text in JSON_TEXT.items()}}
                                          for row in batch])

    monkeypatch.setattr(runs, "insert_responses", sqlalchemy_insert)
    store.save_run({**payload, "run_id": "run_reference"}, rows, meta)
    query = sa.text("SELECT benchmark, model, corpus_item_id, raw_response, metrics, row_extra, response_time_s, "
                    "prompt_tokens, completion_tokens, est_cost_usd, cached, scored_at, hazard_recognition "
                    "FROM evaluation_responses WHERE run_id = :run ORDER BY response_id")
    parsed = (lambda value: json.loads(value) if isinstance(value, str) else value)
    with store.engine.connect() as conn:
        stored = {run: [(*r[:4], parsed(r[4]), parsed(r[5]), *r[6:]) for r in conn.execute(query, {"run": run})]
                  for run in ("run_3b9e204a", "run_reference")}
    assert len(stored["run_3b9e204a"]) == 5
    assert stored["run_3b9e204a"] == stored["run_reference"]


def _staged_rows() -> tuple[dict, list[tuple[str, str, str]], dict]:
    """An IBF and an EBS run's rows as their items report them (benchmark, node id, recorded JSON text), in an
    arrival order that is not node id order, with the values the store converts: falsy and missing ids, a
    present-but-null key, a NUL and a lone surrogate, non-ASCII, a row's own ``scored_at`` and ``nodeid``."""
    payload, rows = ibf_run(SEED_RUNS[0], items=7)
    ebs_payload, ebs = ebs_run("unused", {"ebs-baseline": 0.5})
    payload["benchmarks"].update(ebs_payload["benchmarks"])
    ibf = rows["ibf"]
    ibf[0]["scored_at"] = "2026-05-29T10:14:03.25+02:00"
    ibf[1].update(case_id="", cached=None, prompt_tokens=None)
    ibf[2].update(response_text="nul \x00 and a lone \ud800", est_cost_usd=None)
    ibf[3].update(response_text="forêt tropicale ✓", case_id=0, item_id="item-3")
    ibf[4]["nodeid"] = "its own node id"
    ibf[5]["impact_reasoning"] = 2.5  # banker's rounding to the declared small integer
    reported = [(row["benchmark"], f"evals/test_{row['benchmark']}.py::test[{name}]", json.dumps(row))
                for row, name in [*zip(ibf, ["g", "c", "a", "f", "b", "e", "d"]), *zip(ebs["ebs"], ["z", "x", "y"])]]
    return payload, reported, {"completed_at": "2026-05-29T08:27:11Z"}


def _as_the_session_parses(reported: list[tuple[str, str, str]]) -> dict[str, list[dict]]:
    rows: dict[str, list[dict]] = {}
    for bench, nodeid, text in reported:
        rows.setdefault(bench, []).append({**json.loads(text), "nodeid": nodeid})
    return {bench: sorted(found, key=lambda r: r["nodeid"]) for bench, found in rows.items()}


def _stored_responses(store, run_id: str) -> list[tuple]:
    columns = [c for c in store.tables.evaluation_responses.c if c.name not in ("response_id", "run_id")]
    with store.engine.connect() as conn:
        return [tuple(row) for row in conn.execute(
            sa.select(*columns).where(store.tables.evaluation_responses.c.run_id == run_id)
            .order_by(store.tables.evaluation_responses.c.response_id))]


def _stage_in_chunks(stage, reported: list[tuple[str, str, str]], size: int) -> None:
    """Hand the stage parsed rows, a chunk at a time, in arrival order."""
    for start in range(0, len(reported), size):
        chunk: dict[str, list[dict]] = {}
        for bench, nodeid, text in reported[start:start + size]:
            chunk.setdefault(bench, []).append({**json.loads(text), "nodeid": nodeid})
        stage.take(chunk)


def test_a_run_built_while_it_ran_is_stored_as_row_by_row_storing_stores_it(store, tmp_path, monkeypatch):
    """The stage (rows built a chunk at a time while the session runs, copied by one INSERT ... SELECT) against
    the row-by-row insert of the same rows: every column, in the same order; a stage on PostgreSQL is not used."""
    from fieldeval.store import stage as stage_module

    monkeypatch.setattr(stage_module, "STAGE_CHUNK", 3)  # several chunks, the last one when the run is saved
    copies = []
    copy_into = stage_module.ResponseStage.copy_into
    monkeypatch.setattr(stage_module.ResponseStage, "copy_into", lambda self, *a: copies.append(a) or copy_into(self, *a))
    payload, reported, meta = _staged_rows()
    stage = stage_module.ResponseStage(tmp_path / "stage.db", payload["run_id"], IBF_COLUMNS)
    assert [stage.add(*row) for row in reported] == [False, False, True] * 3 + [False]
    rows = _as_the_session_parses(reported)
    store.save_run(payload, rows, meta, staged=stage)
    store.save_run({**payload, "run_id": "run_reference"}, rows, meta)

    staged, reference = _stored_responses(store, payload["run_id"]), _stored_responses(store, "run_reference")
    assert len(staged) == 10
    assert staged == reference
    # node id order (x, y, z), not arrival order (z, x, y): EBS's case_1, case_2, case_0 come first
    assert [(r[0], r[2]) for r in staged[:4]] == [("ebs", "case_1"), ("ebs", "case_2"), ("ebs", "case_0"),
                                                  ("ibf", "ci_0002")]
    assert len(copies) == (store.engine.dialect.name == "sqlite")


def test_a_run_whose_responses_are_copied_before_its_other_rows_are_built_is_stored_whole(store, tmp_path,
                                                                                            monkeypatch):
    """A session's store copies the staged responses first and only then asks for the run's other rows (what the
    aggregates give): the stored run is what save_run stores for the same rows. A run whose other rows cannot be
    built leaves nothing in the store, its copied responses included; a stage that does not hold the run's rows
    is not used, and the rows built are inserted instead."""
    from fieldeval.store import declared_columns
    from fieldeval.store.payload import flatten_run
    from fieldeval.store.stage import ResponseStage

    payload, reported, meta = _staged_rows()
    rows = _as_the_session_parses(reported)
    counts = {name: len(r) for name, r in rows.items()}
    flat = flatten_run(payload, rows, meta, declared_columns())
    events = []
    copy_into = ResponseStage.copy_into
    monkeypatch.setattr(ResponseStage, "copy_into", lambda self, *a: events.append("copy") or copy_into(self, *a))

    def built():
        events.append("build")
        return flat

    stage = ResponseStage(tmp_path / "stage.db", payload["run_id"], IBF_COLUMNS)
    _stage_in_chunks(stage, reported, 4)
    if store.engine.dialect.name != "sqlite":  # a stage is for a SQLite store only: the rows built are inserted
        store.save_staged(stage, payload["run_id"], flat.scored_at, counts, built)
        store.save_run({**payload, "run_id": "run_reference"}, rows, meta)
        assert _stored_responses(store, payload["run_id"]) == _stored_responses(store, "run_reference")
        return

    def fails():
        raise RuntimeError("the aggregates failed")

    with pytest.raises(RuntimeError, match="the aggregates failed"):
        store.save_staged(stage, payload["run_id"], flat.scored_at, counts, fails)
    assert _stored_count(store, payload["run_id"]) == 0
    assert payload["run_id"] not in [r.run_id for r in store.list_runs()]
    events.clear()
    store.save_staged(stage, payload["run_id"], flat.scored_at, counts, built)
    store.save_run({**payload, "run_id": "run_reference"}, rows, meta)
    assert events == ["copy", "build"]
    assert len(_stored_responses(store, payload["run_id"])) == 10
    assert _stored_responses(store, payload["run_id"]) == _stored_responses(store, "run_reference")
    partial = ResponseStage(tmp_path / "partial.db", "run_partial", IBF_COLUMNS)
    _stage_in_chunks(partial, reported[1:], 4)
    store.save_staged(partial, "run_partial", flat.scored_at, counts,
                      lambda: flatten_run({**payload, "run_id": "run_partial"}, rows, meta, declared_columns()))
    assert _stored_responses(store, "run_partial") == _stored_responses(store, "run_reference")


def _stored_count(store, run_id: str) -> int:
    with store.engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(store.tables.evaluation_responses)
                            .where(store.tables.evaluation_responses.c.run_id == run_id)).scalar()


def test_a_stage_that_does_not_hold_the_rows_or_cannot_write_is_not_used(store, tmp_path):
    """A stage missing a row the session saves (a resumed run's), one whose file cannot be written, or one whose
    file is gone by the time the run is saved, leaves the run to the row-by-row insert: every row is stored
    all the same."""
    from fieldeval.store.stage import ResponseStage

    payload, reported, meta = _staged_rows()
    rows = _as_the_session_parses(reported)
    partial = ResponseStage(tmp_path / "partial.db", payload["run_id"], IBF_COLUMNS)
    _stage_in_chunks(partial, reported[1:], 4)
    assert not partial.holds(payload["run_id"], {name: len(r) for name, r in rows.items()})
    store.save_run(payload, rows, meta, staged=partial)
    broken = ResponseStage(tmp_path / "no such folder" / "stage.db", "run_broken", IBF_COLUMNS)
    _stage_in_chunks(broken, reported, 4)
    assert not broken.usable
    store.save_run({**payload, "run_id": "run_broken"}, rows, meta, staged=broken)
    gone = ResponseStage(tmp_path / "gone.db", "run_gone", IBF_COLUMNS)  # built whole, then its file removed
    _stage_in_chunks(gone, reported, 4)
    assert gone.holds("run_gone", {name: len(r) for name, r in rows.items()})
    gone.close()
    gone.path.unlink()
    store.save_run({**payload, "run_id": "run_gone"}, rows, meta, staged=gone)
    store.save_run({**payload, "run_id": "run_reference"}, rows, meta)
    reference = _stored_responses(store, "run_reference")
    assert len(reference) == 10
    for run_id in (payload["run_id"], "run_broken", "run_gone"):
        assert _stored_responses(store, run_id) == reference


def _totals_a_row_at_a_time(rows_by_benchmark: dict) -> dict:
    """A run's totals per model, the obvious way: every row in turn, time and cost added as exact fractions and
    kept in full precision (the nearest float to the exact sum)."""
    from fractions import Fraction

    totals: dict = {}
    for rows in rows_by_benchmark.values():
        for row in rows:
            total = totals.setdefault(str(row.get("model")), {"items": 0, "cached": 0, "prompt_tokens": 0,
                                                              "completion_tokens": 0, "est_cost_usd": None,
                                                              "response_time_s": 0.0})
            total["items"] += 1
            total["cached"] += bool(row.get("cached"))
            for key in ("prompt_tokens", "completion_tokens"):
                value = row.get(key)
                total[key] += 0 if value is None or isinstance(value, str) else int(round(float(value)))
            seconds = row.get("response_time_s")
            seconds = 0 if seconds is None or isinstance(seconds, str) else float(seconds)
            total["response_time_s"] = Fraction(total["response_time_s"]) + Fraction(seconds)
            cost = row.get("est_cost_usd")
            if cost is not None and not isinstance(cost, str):
                total["est_cost_usd"] = Fraction(total["est_cost_usd"] or 0) + Fraction(float(cost))
    for total in totals.values():
        for key in ("response_time_s", "est_cost_usd"):
            total[key] = None if total[key] is None else float(total[key])
    return totals


_TOTAL_VALUES = {
    "model": st.sampled_from(["m1", "m2", 3]),
    "cached": st.none() | st.booleans() | st.integers(0, 1),
    "prompt_tokens": st.none() | st.integers(0, 10**6) | st.floats(0, 1e4) | st.booleans() | st.just("12"),
    "completion_tokens": st.none() | st.integers(0, 10**6),
    "response_time_s": st.none() | st.floats(0, 100) | st.integers(0, 9) | st.just("slow"),
    "est_cost_usd": st.none() | st.floats(0, 1) | st.integers(0, 2),
}
_TOTAL_ROWS = st.lists(st.fixed_dictionaries({}, optional=_TOTAL_VALUES), max_size=30)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["ebs", "ibf", "microbiorel"]), _TOTAL_ROWS, max_size=3))
def test_a_runs_stored_totals_are_every_rows_summed_exactly(rows_by_benchmark):
    from fieldeval.store.payload import _totals

    # a few models interleaved, rows missing fields, numbers as text, floats for tokens: as summed row by row
    assert _totals(rows_by_benchmark) == _totals_a_row_at_a_time(rows_by_benchmark)
