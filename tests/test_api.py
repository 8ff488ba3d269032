"""The HTTP service end to end: a real uvicorn server, a real pytest run of the offline ``ibf-floor`` model."""

from __future__ import annotations

import pytest

from tests.service_helpers import Server

IBF_BODY = {"model_id": "ibf-floor", "corpus_version": "ibf-v1.0", "batch_size": 8, "temperature": 0.0,
            "max_tokens": 512, "label": "floor baseline run"}
DIMENSIONS = {"hazard_recognition", "impact_reasoning", "uncertainty_handling", "action_relevance",
              "geographic_specificity"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    running = Server(tmp_path_factory.mktemp("api") / "store.db").start()
    yield running
    running.stop()


def test_register_model_is_idempotent_on_name_and_endpoint(server):
    body = {"name": "phi-3-mini-4k", "provider": "local", "endpoint": "http://localhost:11434/v1/chat/completions",
            "context_window": 4096, "parameters_billion": 3.8, "notes": "4-bit GGUF quantisation, CPU inference"}
    status, first = server.call("POST", "/api/models", body)
    assert status == 201 and first["model_id"].startswith("mdl_") and set(first) == {"model_id", "name", "registered_at"}
    status, again = server.call("POST", "/api/models", body)
    assert status == 200 and again == first
    status, listed = server.call("GET", "/api/models")
    assert [m["model_id"] for m in listed if m["name"] == "phi-3-mini-4k"] == [first["model_id"]]


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_evaluation_cycle_start_poll_compare_delete(server):
    status, started = server.call("POST", "/api/evaluations", IBF_BODY)
    assert status == 202, started
    assert started["status"] == "queued" and started["total_items"] == 65 and started["estimated_seconds"] > 0
    run_id = started["run_id"]
    view, seen = server.wait_for(run_id, ("completed", "failed"))
    assert view["status"] == "completed", view
    assert view["gates_passed"] is True  # ibf-floor's MDS 1.82 clears its floor of 1.7 (pyproject.toml)
    assert set(seen) <= {"queued", "running", "completed"}
    assert view["model_name"] == "ibf-floor" and view["label"] == "floor baseline run"
    assert view["corpus_version"] == "ibf-v1.0" and view["total_items"] == 65 and view["completed_at"]
    assert set(view["scores"]) == DIMENSIONS
    assert 1.7 < view["mean_dimension_score"] < 2.0 and 0 <= view["threshold_pass_rate"] < 0.4
    mds = view["metrics"]["ibf"]["ibf-floor"]["mean_dimension_score"]
    assert mds["ci95"][0] <= mds["value"] <= mds["ci95"][1]

    _, second = server.call("POST", "/api/evaluations", {**IBF_BODY, "label": "second"})
    server.wait_for(second["run_id"], ("completed",))
    status, compared = server.call("GET", f"/api/evaluations/compare?run_ids={run_id},{second['run_id']}")
    assert status == 200
    assert [entry["run_id"] for entry in compared["runs"]] == [run_id, second["run_id"]]
    for entry in compared["runs"]:
        assert {"run_id", "model_name", "mean_dimension_score", "threshold_pass_rate", "scores"} <= set(entry)
        assert set(entry["scores"]) == DIMENSIONS
    assert "differences" not in compared  # the seed's payload, unless a base run is chosen
    status, paired = server.call("GET", f"/api/evaluations/compare?run_ids={run_id},{second['run_id']}&base={run_id}")
    assert status == 200
    mds_diff = next(d for d in paired["differences"] if d["metric"] == "mean_dimension_score")
    # the same model on the same items: the paired difference is exactly 0, over the corpus's 13 hazards
    assert (mds_diff["value"], mds_diff["ci95"], mds_diff["n_items"], mds_diff["n_clusters"]) == (0.0, [0.0, 0.0], 65, 13)
    assert (mds_diff["base_run"], mds_diff["run"]) == (run_id, second["run_id"])

    status, listed = server.call("GET", "/api/evaluations?benchmark=ibf&corpus_version=ibf-v1.0&model=ibf-floor")
    assert status == 200 and {run_id, second["run_id"]} <= {run["run_id"] for run in listed}
    _, none = server.call("GET", "/api/evaluations?corpus_version=ibf-v9")
    assert none == []

    status, deleted = server.call("DELETE", f"/api/evaluations/{run_id}")
    assert status == 200 and deleted["responses_deleted"] == 65
    assert server.call("GET", f"/api/evaluations/{run_id}")[0] == 404
    assert server.call("DELETE", f"/api/evaluations/{run_id}")[0] == 404


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_evaluation_of_a_registered_model_id_resolves_its_name(server):
    # not "ibf-floor": a registration may not shadow an installed llm model
    _, model = server.call("POST", "/api/models", {"name": "floor-at-9", "endpoint": "http://127.0.0.1:9/v1"})
    status, started = server.call("POST", "/api/evaluations", {**IBF_BODY, "model_id": model["model_id"]})
    assert status == 202
    status, view = server.call("GET", f"/api/evaluations/{started['run_id']}")
    assert view["model_id"] == model["model_id"] and view["model_name"] == "floor-at-9"
    server.wait_for(started["run_id"], ("completed", "partial", "failed"))  # every call fails: a partial run


@pytest.mark.parametrize(("body", "field"), [
    ({"model_id": "ibf-floor"}, "corpus_version"),
    ({**IBF_BODY, "corpus_version": "ibf-v0"}, "corpus_version"),
    ({**IBF_BODY, "batch_size": 0}, "batch_size"),
    ({**IBF_BODY, "temperature": "hot"}, "temperature"),
    ({**IBF_BODY, "benchmark": "mmlu"}, "benchmark"),
    ({"corpus_version": "ibf-v1.0"}, "model_id"),
])
def test_invalid_evaluation_body_is_422_naming_the_field(server, body, field):
    status, answer = server.call("POST", "/api/evaluations", body)
    assert status == 422
    assert answer["message"].startswith(f"{field}:"), answer


@pytest.mark.parametrize(("endpoint", "words"), [
    ("http://user:secret@localhost:11434/v1", "environment variable"),
    ("http://169.254.169.254/latest", "link-local"),
    ("http://[fe80::1]:8000/v1", "link-local"),
    ("ftp://models.example.org/v1", "http(s)"),
])
def test_refused_endpoint_is_422_naming_the_field(server, endpoint, words):
    status, answer = server.call("POST", "/api/models", {"name": "m", "endpoint": endpoint})
    assert status == 422 and answer["message"].startswith("endpoint:") and words in answer["message"]


def test_loopback_endpoint_is_allowed(server):
    assert server.call("POST", "/api/models", {"name": "local", "endpoint": "http://127.0.0.1:8080/v1"})[0] == 201


def test_unknown_model_and_runs_are_404(server):
    status, answer = server.call("POST", "/api/evaluations", {**IBF_BODY, "model_id": "no-such-model-xyz"})
    assert status == 404 and "no-such-model-xyz" in answer["message"]
    assert server.call("GET", "/api/evaluations/run_00000000")[0] == 404
    assert server.call("GET", "/api/evaluations/compare?run_ids=run_00000000")[0] == 404


def test_openapi_schema_lists_the_seed_endpoints(server):
    status, schema = server.call("GET", "/openapi.json")
    assert status == 200
    assert {"/api/models", "/api/evaluations", "/api/evaluations/compare", "/api/evaluations/{run_id}"} <= set(
        schema["paths"])
    assert server.call("GET", "/docs")[0] == 200


def test_requests_need_the_configured_bearer_token(tmp_path):
    server = Server(tmp_path / "store.db", token="s3cret").start()
    try:
        body = {"name": "m", "endpoint": "http://localhost:11434/v1"}
        assert server.call("POST", "/api/models", body, token=None)[0] == 401
        assert server.call("POST", "/api/models", body, token="wrong")[0] == 401
        assert server.call("DELETE", "/api/evaluations/run_00000000", token=None)[0] == 401
        assert server.call("POST", "/api/models", body, token="s3cret")[0] == 201
        assert server.call("GET", "/api/models", token=None)[0] == 401  # models name their endpoints
        assert server.call("GET", "/api/benchmarks", token=None)[0] == 200  # the benchmark list is public
    finally:
        server.stop()


def test_restart_during_a_run_marks_it_interrupted_not_lost(tmp_path):
    store = tmp_path / "store.db"
    server = Server(store).start()
    try:
        _, started = server.call("POST", "/api/evaluations", IBF_BODY)
        server.wait_for(started["run_id"], ("running",), interval=0.05)
        server.kill()
        server = Server(store, port=server.port).start()
        status, view = server.call("GET", f"/api/evaluations/{started['run_id']}")
        assert status == 200 and view["status"] == "interrupted" and view["completed_at"]
        _, listed = server.call("GET", "/api/evaluations")
        assert [run["status"] for run in listed if run["run_id"] == started["run_id"]] == ["interrupted"]
    finally:
        server.stop()


def test_register_model_refuses_an_llm_model_name_and_a_second_endpoint(server):
    status, answer = server.call("POST", "/api/models", {"name": "gpt-4o-mini", "endpoint": "http://127.0.0.1:9/v1"})
    assert status == 422 and "installed llm model" in answer["message"]
    body = {"name": "twice", "endpoint": "http://127.0.0.1:9/v1", "provider": "local"}
    assert server.call("POST", "/api/models", body)[0] == 201
    moved = {**body, "endpoint": "http://127.0.0.1:10/v1"}
    status, answer = server.call("POST", "/api/models", moved)
    assert status == 409 and "replace=true" in answer["message"]
    assert server.call("POST", "/api/models?replace=true", moved)[0] == 201
    listed = [m for m in server.call("GET", "/api/models")[1] if m["name"] == "twice"]
    assert [(m["endpoint"], m["provider"]) for m in listed] == [("http://127.0.0.1:10/v1", "local")]


def test_register_model_takes_batch_as_models_add_does(server):
    from fieldeval.store.registry import read_endpoints

    body = {"name": "batched", "endpoint": "http://127.0.0.1:11/v1", "batch": True}
    status, first = server.call("POST", "/api/models", body)
    assert status == 201, first
    assert [m["batch"] for m in server.call("GET", "/api/models")[1] if m["name"] == "batched"] == [True]
    assert server.call("POST", "/api/models", body) == (200, first)  # the same registration again
    status, answer = server.call("POST", "/api/models", {**body, "batch": False})  # batch is part of the endpoint
    assert status == 409 and "replace=true" in answer["message"]
    status, answer = server.call("POST", "/api/models", {**body, "name": "batched-text", "batch": "yes"})
    assert status == 422 and "batch" in answer["message"]
    status, _ = server.call("POST", "/api/models", {"name": "live-only", "endpoint": "http://127.0.0.1:12/v1"})
    assert status == 201
    batch_of = {row[0]: row[4] for row in read_endpoints(str(server.store))}  # what a session reads
    assert (bool(batch_of["batched"]), bool(batch_of["live-only"])) == (True, False)


def test_compare_refuses_an_interrupted_run_unless_allow_partial(server):
    from fieldeval.store import open_store
    from tests.test_store_api import ebs_run

    with open_store(str(server.store)) as store:
        store.save_run(*ebs_run("run_0000aaaa", {"m": 0.5}),
                       {"status": "interrupted", "items_planned": 9, "items_done": 3, "items_errored": 0})
    status, answer = server.call("GET", "/api/evaluations/compare?run_ids=run_0000aaaa")
    assert status == 409 and "interrupted (3 of 9 items done)" in answer["message"]
    status, answer = server.call("GET", "/api/evaluations/compare?run_ids=run_0000aaaa&allow_partial=true")
    assert status == 200 and answer["runs"][0]["status"] == "interrupted"
