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


def test_a_cli_run_of_several_benchmarks_gives_the_seed_view_of_its_ibf_part(service):
    # `pytest evals --store` stores one run of every benchmark: model_name and benchmark came out as lists and
    # corpus_version as an object, where the seed (and an API-made run) has strings
    from tests.test_store_api import SEED_RUNS, ebs_run, ibf_run

    client, url = service
    seed = SEED_RUNS[0]
    payload, rows = ibf_run(seed, items=4)
    ebs_payload, ebs_rows = ebs_run(seed["run_id"], {"ebs-baseline": 0.5})
    payload["benchmarks"].update(ebs_payload["benchmarks"])
    with open_store(url, columns=declared_columns()) as store:
        store.save_run(payload, {**rows, **ebs_rows}, {"corpus_version": {"ibf": "ibf-v1.0", "ebs": "nmdc-ebs"}})
    view = client.get(f"/api/evaluations/{seed['run_id']}").json()
    assert (view["model_name"], view["benchmark"], view["corpus_version"]) == (seed["model_name"], "ibf", "ibf-v1.0")
    assert view["scores"] == seed["scores"] and view["mean_dimension_score"] == seed["mean_dimension_score"]
    assert view["total_items"] == 4  # the IBF part's items, as the seed counts them (the run holds 7)
    assert [(e["benchmark"], e["model_name"], e["corpus_version"], e["total_items"]) for e in view["entries"]] == [
        ("ebs", "ebs-baseline", "nmdc-ebs", 3), ("ibf", seed["model_name"], "ibf-v1.0", 4)]
    assert "scores" not in view["entries"][0] and view["entries"][1]["scores"] == seed["scores"]


def test_a_run_of_one_benchmark_and_model_has_one_entry_and_string_fields(service):
    from tests.test_store_api import SEED_RUNS

    client, url = service
    save_ibf(url, SEED_RUNS[1])
    view = client.get(f"/api/evaluations/{SEED_RUNS[1]['run_id']}").json()
    assert (view["model_name"], view["benchmark"], view["corpus_version"], view["total_items"]) == (
        "mistral-7b-instruct-v0.3", "ibf", "ibf-v1.0", 3)
    [entry] = view["entries"]
    assert entry["model_name"] == view["model_name"] and entry["scores"] == view["scores"]


def test_a_run_of_several_models_and_no_seed_scores_names_none_at_the_top(service):
    from tests.test_store_api import ebs_run

    client, url = service
    with open_store(url, columns=declared_columns()) as store:
        store.save_run(*ebs_run("run_0000ebs2", {"a": 0.5, "b": 0.7}), {"corpus_version": "nmdc-ebs"})
    view = client.get("/api/evaluations/run_0000ebs2").json()
    assert (view["model_name"], view["benchmark"], view["corpus_version"]) == (None, None, None)
    assert view["total_items"] == 6 and "scores" not in view
    assert [(e["benchmark"], e["model_name"]) for e in view["entries"]] == [("ebs", "a"), ("ebs", "b")]


def test_estimated_seconds_come_from_the_models_measured_latency_and_the_batch_size(service):
    # it was 1.25 s an item for every model (81 s for any IBF job), whatever the model had measured
    from fieldeval.service.views import estimate_seconds
    from tests.test_store_api import SEED_RUNS, ibf_run

    _, url = service
    payload, rows = ibf_run(SEED_RUNS[0], items=5)
    for row, seconds in zip(rows["ibf"], [99.0, 1.0, 2.0, 3.0, 2.0]):
        row["response_time_s"] = seconds  # the first is a cached answer: its time is not the model's
    with open_store(url, columns=declared_columns()) as store:
        store.save_run(payload, rows, {"corpus_version": "ibf-v1.0"})
        assert rows["ibf"][0]["cached"] and not rows["ibf"][1]["cached"]
        # 65 items, 5 in flight: 13 rounds of the mean uncached latency, 2 s
        assert estimate_seconds(store, model=SEED_RUNS[0]["model_name"], total=65, concurrency=5) == 26
        assert estimate_seconds(store, model=SEED_RUNS[0]["model_name"], total=65, concurrency=65) == 2
        # nothing measured: the seed's pace, 340 items in 420 s at 8 in flight (9 rounds of 420 * 8 / 340 s)
        assert estimate_seconds(store, model="never-run", total=65, concurrency=8) == round(9 * 420 * 8 / 340)


def test_estimated_seconds_heed_the_models_own_concurrency_and_rpm(service, tmp_path):
    # a model capped at 2 in flight, or at 30 requests a minute, was estimated at the job's batch_size
    from fieldeval.calls.limits import ModelLimits
    from fieldeval.service.views import estimate_seconds, model_limits
    from tests.test_store_api import SEED_RUNS, ibf_run

    _, url = service
    payload, rows = ibf_run(SEED_RUNS[0], items=2)
    for row in rows["ibf"]:
        row.update(cached=False, response_time_s=2.0)
    model = SEED_RUNS[0]["model_name"]
    with open_store(url, columns=declared_columns()) as store:
        store.save_run(payload, rows, {"corpus_version": "ibf-v1.0"})
        assert estimate_seconds(store, model=model, total=65, concurrency=8) == 9 * 2
        assert estimate_seconds(store, model=model, total=65, concurrency=8, limits=ModelLimits(concurrency=2)) == 33 * 2
        # 30 a minute: the 65th call starts 128 s in and takes its 2 s
        assert estimate_seconds(store, model=model, total=65, concurrency=8, limits=ModelLimits(rpm=30)) == 130
    (tmp_path / "pyproject.toml").write_text(f'[tool.fieldeval.models."{model}"]\nconcurrency = 2\n')
    assert model_limits(tmp_path, model) == ModelLimits(concurrency=2)
    assert model_limits(tmp_path, "other") is None
    (tmp_path / "pyproject.toml").write_text("not [toml")
    assert model_limits(tmp_path, model) is None  # the job names the broken file when it runs


def test_a_jobs_batch_size_is_its_concurrency(tmp_path):
    # the seed's batch_size is the concurrent inference requests; the job ran at pytest's default instead
    from fieldeval.service.jobs import Job, Runner

    url = f"sqlite:///{tmp_path / 'store.db'}"
    with open_store(url, columns=declared_columns()) as store:
        table = JobTable(store.engine)
        add_job(url, "run_0000c0c0", "queued")
        job: Job = table.get("run_0000c0c0")
        runner = Runner(table, store_url=url, evals_dir=ROOT / "evals", work_dir=tmp_path)
        assert "--concurrency=8" in runner.command(job, tmp_path / "progress.json", url)


def test_a_model_only_answered_from_the_cache_is_estimated_at_its_cached_pace(service):
    from fieldeval.service.views import estimate_seconds
    from tests.test_store_api import SEED_RUNS, ibf_run

    _, url = service
    payload, rows = ibf_run(SEED_RUNS[0], items=2)
    for row in rows["ibf"]:
        row.update(cached=True, response_time_s=0.01)
    with open_store(url, columns=declared_columns()) as store:
        store.save_run(payload, rows, {"corpus_version": "ibf-v1.0"})
        assert estimate_seconds(store, model=SEED_RUNS[0]["model_name"], total=65, concurrency=8) == 1


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_schema_pages_load_every_script_and_style_from_the_service_itself(service, page):
    # Swagger UI and ReDoc came from a CDN: offline, /docs was a blank page
    import re

    client, _ = service
    answer = client.get(page, headers={"Authorization": ""})  # public, as the schema is
    assert answer.status_code == 200
    urls = re.findall(r"""<script[^>]*\bsrc=["']([^"']+)|<link[^>]*\bhref=["']([^"']+)""", answer.text)
    urls = [src or href for src, href in urls]
    assert any(url.endswith(".js") for url in urls), answer.text
    for url in urls:
        assert url.startswith("/") and not url.startswith("//"), f"{page} loads {url} from elsewhere"
        fetched = client.get(url, headers={"Authorization": ""})
        assert fetched.status_code == 200 and len(fetched.content) > 1000, url
    for url in re.findall(r"""(?:url|src|href)\(?\s*["']?(https?://[^"')\s]+)""", answer.text):
        pytest.fail(f"{page} still references {url}")


def test_a_server_slower_than_its_latencies_say_is_estimated_at_its_last_runs_pace(service):
    # one slot: each call waited for the one before it, so 2 s calls at 8 in flight still took 10 s an item;
    # a job of 65 was estimated at 9 rounds of 2 s (18 s) for 650 s of work
    from fieldeval.service.views import estimate_seconds
    from tests.test_store_api import SEED_RUNS, ibf_run

    _, url = service
    payload, rows = ibf_run(SEED_RUNS[0], items=5)
    payload["wall_s"] = 50.0
    for row in rows["ibf"]:
        row.update(cached=False, response_time_s=2.0)
    with open_store(url, columns=declared_columns()) as store:
        store.save_run(payload, rows, {"corpus_version": "ibf-v1.0"})
        assert estimate_seconds(store, model=SEED_RUNS[0]["model_name"], total=65, concurrency=8) == 65 * 10


def test_a_running_job_reports_its_own_pace_once_an_item_is_done(service):
    # a model nothing was known of kept the seed's guess (89 s for a 410 s job) until the end
    from datetime import datetime, timedelta, timezone

    client, url = service
    started = (datetime.now(timezone.utc) - timedelta(seconds=100)).isoformat(timespec="seconds")
    add_job(url, "run_0000a1a1", "running", started_at=started, done=0)
    view = client.get("/api/evaluations/run_0000a1a1").json()
    assert "seconds_left" not in view  # nothing measured yet
    with open_store(url, columns=declared_columns()) as store:
        JobTable(store.engine).update("run_0000a1a1", done=10)
    view = client.get("/api/evaluations/run_0000a1a1").json()
    # at least 10 s an item (100 s or more for 10 items) over 65 items, however slow this machine is; of it, the
    # 55 items left: 55/65 of the whole, to the rounding of each
    assert view["estimated_seconds"] >= 650
    assert abs(view["seconds_left"] - view["estimated_seconds"] * 55 / 65) <= 1


def test_the_api_answers_json_503_when_the_store_cannot_be_reached(service, monkeypatch):
    # a PostgreSQL store that went down mid-service: a plain-text "Internal Server Error" 500
    import sqlalchemy as sa

    from fieldeval.service import views

    client, _ = service

    def down(*args, **kwargs):
        raise sa.exc.OperationalError("SELECT 1", {}, ConnectionRefusedError("connection refused"))

    monkeypatch.setattr(views, "run_list", down)
    answer = client.get("/api/evaluations")
    assert answer.status_code == 503
    assert "the run store cannot be reached (connection refused)" in answer.json()["message"]
    assert answer.headers["X-Frame-Options"] == "DENY"
