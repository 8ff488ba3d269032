"""``GET /api/evaluations/{run_id}/responses[/{case_id}]``: a run's items a page at a time, and one item whole."""

from __future__ import annotations

import json
from datetime import datetime
from urllib.parse import quote

import pytest

from tests.test_diff import DIMS, IBF_TABLE, _ebs, _row, save_two_runs

BEARER = {"Authorization": "Bearer tok"}
PROMPTED = "run_0000c0de"
ODD_CASE = "suite/a|b[1] ?#%&+ é"  # a case id with every character a URL path treats specially
SYSTEM = "You are <b>careful</b> & exact."
PROMPT = "Answer <script>window.__xss = 1</script> now.\n\tIndented line, \"quoted\" & 'single'."
EARLIER = [{"system": None, "prompt": "Summarise <p>this</p>", "response_text": "a summary <i>of it</i>"}]
AUDIT = {"ibf": [{"kind": "hazard_with_few_items", "message": "2 of 3 hazards have fewer than 5 items <dzud>",
                  "count": 3, "cases": ["ibf_0000", "ibf_0001", "ibf_0002"]},
                 {"kind": "duplicate_question", "message": "2 items ask 1 question twice", "count": 2,
                  "cases": ["ibf_0003", "ibf_0004"]}],
         "ebs": []}
# the seed's evaluation_responses table, column for column
SPEC_FIELDS = ("response_id", "run_id", "corpus_item_id", "raw_response", "hazard_recognition", "impact_reasoning",
               "uncertainty_handling", "action_relevance", "geographic_specificity", "scored_at")


def save_prompted_run(url: str) -> None:
    """Store run_0000c0de: IBF items sent with a system text and a prompt (one with an odd case id, one
    with an earlier call), one errored IBF item, two EBS items, and the run's gold-data audit."""
    from fieldeval.benchmark import benchmarks
    from fieldeval.store import declared_columns, open_store

    sent = {"system": SYSTEM, "prompt": PROMPT}
    ibf = [_row("ibf", "m", case, **dict(zip(DIMS, dims)), **sent) for case, dims, _ in IBF_TABLE[:5]]
    ibf.append(_row("ibf", "m", ODD_CASE, **dict(zip(DIMS, [4, 3, 2, 1, 0])), **sent, earlier_calls=EARLIER))
    rows = {"ibf": ibf, "ebs": [_row("ebs", "m", f"case{i:03d}", **_ebs("exact"), **sent) for i in range(2)]}
    errors = [{"benchmark": "ibf", "model": "m", "item": "evals/test_ibf.py::t[ibf_0099-m]", "case_id": "ibf_0099",
               "error_class": "RateLimitError", "message": "429 <too many requests>"}]
    installed = benchmarks()
    payload = {"run_id": PROMPTED, "started_at": "2026-06-02T10:00:00Z", "ontology_version": "envo test",
               "benchmarks": {bench: {"m": {**installed[bench].aggregate(bench_rows, seed=1, resamples=50),
                                            "items": len(bench_rows), "errors": int(bench == "ibf")}}
                              for bench, bench_rows in rows.items()},
               "audit": AUDIT}
    with open_store(url, columns=declared_columns(), create=True) as store:
        store.save_run(payload, rows, {"label": "prompted", "errors": errors})


@pytest.fixture
def store_url(tmp_path) -> str:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    save_two_runs(url)
    save_prompted_run(url)
    return url


@pytest.fixture
def store(store_url):
    from fieldeval.store import declared_columns, open_store

    with open_store(store_url, columns=declared_columns()) as opened:
        yield opened


@pytest.fixture
def client(store_url, tmp_path):
    from fastapi.testclient import TestClient

    from fieldeval.service.app import create_app
    from tests.service_helpers import ROOT

    app = create_app(store_url, evals_dir=ROOT / "evals", token="tok", work_dir=tmp_path)
    with TestClient(app, base_url="http://127.0.0.1", headers=BEARER) as test_client:
        yield test_client


def _json(value):
    """``value`` as a JSON answer decodes it."""
    return json.loads(json.dumps(value))


def _walk(client, run_id: str, limit: int, **params) -> tuple[list[int], list[dict]]:
    totals, items, offset = [], [], 0
    while True:
        answer = client.get(f"/api/evaluations/{run_id}/responses", params={**params, "limit": limit, "offset": offset})
        assert answer.status_code == 200, answer.text
        page = answer.json()
        totals.append(page["total"])
        assert len(page["items"]) <= limit
        items += page["items"]
        offset += limit
        if offset >= page["total"]:
            return totals, items


@pytest.mark.parametrize("params", [{}, {"benchmark": "ebs"}, {"benchmark": "ebs", "model": "other"}])
def test_pages_walked_with_limit_and_offset_add_up_to_the_total_and_equal_items_page(client, store, params):
    from fieldeval.store.items import items_page

    totals, walked = _walk(client, "run_0000000b", 17, **params)
    whole = items_page(store, "run_0000000b", limit=None, **params)
    assert set(totals) == {whole["total"]} and len(walked) == whole["total"] > 17
    assert walked == _json([{k: v for k, v in item.items() if k != "row"} for item in whole["items"]])


def test_the_pages_of_a_run_with_errored_items_end_with_them(client, store):
    from fieldeval.store.items import items_page

    totals, walked = _walk(client, PROMPTED, 3)
    assert set(totals) == {9} and [item["status"] for item in walked] == ["scored"] * 8 + ["errored"]
    assert walked[-1]["error"] == {"error_class": "RateLimitError", "message": "429 <too many requests>"}
    assert walked == _json([{k: v for k, v in item.items() if k != "row"}
                            for item in items_page(store, PROMPTED, limit=None)["items"]])


def test_an_ibf_item_carries_the_specs_evaluation_responses_fields(client):
    items = client.get("/api/evaluations/run_0000000a/responses", params={"benchmark": "ibf", "limit": 1000}).json()
    assert items["total"] == len(IBF_TABLE) == len(items["items"])
    for item, (case, dims, _) in zip(items["items"], IBF_TABLE):
        assert set(SPEC_FIELDS) <= set(item) and "row" not in item
        assert isinstance(item["response_id"], int) and item["run_id"] == "run_0000000a"
        assert item["corpus_item_id"] == item["case_id"] == case
        assert item["raw_response"] == item["response_text"] == f"answer <{case}> [/]"
        assert [item[name] for name in DIMS] == dims and all(type(item[name]) is int for name in DIMS)  # SMALLINT
        assert datetime.fromisoformat(item["scored_at"].replace("Z", "+00:00")).tzinfo is not None
    assert len({item["response_id"] for item in items["items"]}) == len(IBF_TABLE)


def test_other_benchmarks_carry_their_own_score_columns_and_no_ibf_dimension(client):
    from fieldeval.store.items import score_columns

    answer = client.get("/api/evaluations/run_0000000a/responses", params={"benchmark": "ebs", "limit": 1})
    [item] = answer.json()["items"]
    assert set(score_columns("ebs")["ebs"]) <= set(item) and not set(DIMS) & set(item)
    assert item["raw_response"] == item["response_text"] and item["corpus_item_id"] == item["case_id"]


def test_limit_zero_answers_the_total_alone(client):
    assert client.get(f"/api/evaluations/{PROMPTED}/responses", params={"limit": 0}).json() == {"total": 9, "items": []}


@pytest.mark.parametrize(("params", "status", "words"), [
    ({"limit": 1001}, 400, ["limit 1001", "1000", "offset="]),
    ({"limit": -1}, 400, ["limit -1"]),
    ({"offset": -5}, 400, ["offset -5"]),
    ({"limit": "many"}, 422, ["limit"]),
])
def test_a_bad_page_is_refused_naming_the_value_and_the_fix(client, params, status, words):
    answer = client.get("/api/evaluations/run_0000000a/responses", params=params)
    assert answer.status_code == status
    assert all(word in answer.json()["message"] for word in words), answer.json()


def test_an_unknown_run_is_404_on_both_routes(client):
    for path in ("/api/evaluations/run_ffffffff/responses", "/api/evaluations/run_ffffffff/responses/case003"):
        answer = client.get(path)
        assert answer.status_code == 404 and "run_ffffffff" in answer.json()["message"]


@pytest.mark.parametrize("case_id", [ODD_CASE, "ibf_0002"])
def test_the_single_item_route_equals_item_whole(client, store, case_id):
    from fieldeval.store.items import item_whole

    answer = client.get(f"/api/evaluations/{PROMPTED}/responses/{quote(case_id, safe='')}")
    assert answer.status_code == 200, answer.text
    assert answer.json() == _json(item_whole(store, PROMPTED, case_id))
    assert (answer.json()["case_id"], answer.json()["system"], answer.json()["prompt"]) == (case_id, SYSTEM, PROMPT)


def test_the_single_item_route_gives_an_errored_item_and_earlier_calls(client, store):
    errored = client.get(f"/api/evaluations/{PROMPTED}/responses/ibf_0099").json()
    assert errored["status"] == "errored" and errored["error"]["error_class"] == "RateLimitError"
    assert errored["scores"] == {}
    odd = client.get(f"/api/evaluations/{PROMPTED}/responses/{quote(ODD_CASE, safe='')}").json()
    assert odd["earlier_calls"] == EARLIER


def test_a_case_id_of_several_models_is_400_naming_model_and_an_unknown_case_404(client, store):
    from fieldeval.store.items import item_whole

    several = client.get("/api/evaluations/run_0000000b/responses/case003")
    assert several.status_code == 400
    assert "model=" in several.json()["message"] and "ebs/m2" in several.json()["message"]
    chosen = client.get("/api/evaluations/run_0000000b/responses/case003", params={"model": "other"})
    assert chosen.json() == _json(item_whole(store, "run_0000000b", "case003", model="other"))
    unknown = client.get("/api/evaluations/run_0000000b/responses/nope", params={"model": "other"})
    assert unknown.status_code == 404 and "'nope'" in unknown.json()["message"]
    assert "model=other" in unknown.json()["message"]


def test_the_routes_beside_them_still_answer(client):
    # /api/evaluations/{run_id}, /compare and /diff sit next to the new routes: none shadows another
    assert client.get("/api/evaluations/run_0000000a").json()["run_id"] == "run_0000000a"
    compared = client.get("/api/evaluations/compare", params={"run_ids": "run_0000000a,run_0000000b"})
    assert compared.status_code == 200
    assert {entry["run_id"] for entry in compared.json()["runs"]} == {"run_0000000a", "run_0000000b"}
    diffed = client.get("/api/evaluations/diff", params={"base": "run_0000000a", "run": "run_0000000b",
                                                         "benchmark": "microbiorel"})
    assert diffed.status_code == 200
    assert client.get("/api/evaluations/compare/responses").status_code == 404  # "compare" is no run


@pytest.mark.parametrize("path", ["/api/evaluations/run_0000000a/responses",
                                  "/api/evaluations/run_0000000a/responses/ibf_0001"])
def test_both_routes_need_the_token(client, path):
    assert client.get(path, headers={"Authorization": ""}).status_code == 401
    assert client.get(path, headers={"Authorization": "Bearer not-the-token"}).status_code == 401
    assert client.get(path).status_code == 200


def test_the_openapi_schema_lists_both_routes(client):
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/api/evaluations/{run_id}/responses", "/api/evaluations/{run_id}/responses/{case_id}"} <= set(paths)
