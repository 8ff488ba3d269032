"""The API names a registered model's ``model_id`` for its runs (it came back null, issue 20)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from fieldeval.service.app import create_app
from fieldeval.store import declared_columns, open_store
from tests.conftest import ROOT


def test_a_run_of_a_registered_model_carries_its_model_id_in_the_view_and_the_list(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    app = create_app(url, evals_dir=ROOT / "evals", token="tok-model-id", work_dir=tmp_path)
    with TestClient(app, base_url="http://127.0.0.1", headers={"Authorization": "Bearer tok-model-id"}) as client:
        registered = client.post("/api/models", json={"name": "phi", "endpoint": "http://127.0.0.1:9/v1"}).json()
        with open_store(url, columns=declared_columns()) as store:
            store.save_run({"run_id": "run_0000000a", "started_at": "2026-01-01T00:00:00+00:00",
                            "benchmarks": {"ebs": {"phi": {"ontology_score": {"value": 0.5, "ci95": [0, 1], "n": 1},
                                                           "items": 1, "errors": 0}}}},
                           {"ebs": [{"benchmark": "ebs", "model": "phi", "case_id": "c1", "nodeid": "n1"}]}, {})
        assert client.get("/api/evaluations/run_0000000a").json()["model_id"] == registered["model_id"]
        [listed] = client.get("/api/evaluations").json()
        assert listed["model_id"] == registered["model_id"]
