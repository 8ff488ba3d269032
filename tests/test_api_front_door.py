"""The service's answers as a client reads them: the per-run view's shape, compare of an unfinished run,
the start's time estimate, a stable ``created_at`` and the schema pages (issue 36). In process, no model calls."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from fieldeval.service.app import create_app
from fieldeval.service.jobs import JobTable
from fieldeval.store import declared_columns, open_store
from tests.conftest import ROOT

TOKEN = "tok-front-door"


@pytest.fixture
def service(tmp_path):
    """``(client, store URL)``: the app on a fresh store, its runner idle unless a test submits a job."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    app = create_app(url, evals_dir=ROOT / "evals", token=TOKEN, work_dir=tmp_path / "work")
    with TestClient(app, base_url="http://127.0.0.1", headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        yield client, url


def add_job(url: str, run_id: str, status: str, **values) -> None:
    """A job record as ``POST /api/evaluations`` leaves it, without the runner ever taking it."""
    with open_store(url, columns=declared_columns()) as store:
        JobTable(store.engine).add(run_id=run_id, benchmark="ibf", model="ibf-floor", model_id=None,
                                   corpus_version="ibf-v1.0", label=None, total=65, status=status,
                                   options={"batch_size": 8}, **values)


@pytest.mark.parametrize("status", ["queued", "running"])
def test_compare_of_an_unfinished_run_is_409_in_one_line(service, status):
    # it answered 404 "not a stored run", which reads as a wrong id; the docs promised 409
    client, url = service
    add_job(url, "run_0000beef", status)
    answer = client.get("/api/evaluations/compare?run_ids=run_0000beef")
    assert answer.status_code == 409
    message = answer.json()["message"]
    assert status in message and "run_0000beef" in message and "\n" not in message
    assert client.get("/api/evaluations/compare?run_ids=run_0000dead").status_code == 404  # unknown stays 404


def save_ibf(url: str, seed: dict, **kwargs) -> None:
    """Store an IBF run of one model, as ``pytest evals/test_ibf.py --store`` would."""
    from tests.test_store_api import ibf_run

    with open_store(url, columns=declared_columns()) as store:
        store.save_run(*ibf_run(seed, **kwargs), {"corpus_version": "ibf-v1.0"})


def test_created_at_is_the_same_in_every_view_of_one_evaluation(service):
    # the view switched from the job's time (the POST) to pytest's start once the run was stored
    from tests.test_store_api import SEED_RUNS

    client, url = service
    add_job(url, SEED_RUNS[0]["run_id"], "running", created_at="2026-05-29T08:14:03Z")
    run_id = SEED_RUNS[0]["run_id"]
    before = client.get(f"/api/evaluations/{run_id}").json()
    save_ibf(url, SEED_RUNS[0], started_at="2026-05-29T08:14:09Z")
    with open_store(url, columns=declared_columns()) as store:
        JobTable(store.engine).update(run_id, status="completed", finished_at="2026-05-29T08:27:11Z")
    after = client.get(f"/api/evaluations/{run_id}").json()
    again = client.get(f"/api/evaluations/{run_id}").json()
    [listed] = [run for run in client.get("/api/evaluations").json() if run["run_id"] == run_id]
    assert (before["status"], after["status"]) == ("running", "completed")
    assert before["created_at"] == after["created_at"] == again["created_at"] == listed["created_at"] \
        == "2026-05-29T08:14:03Z"
