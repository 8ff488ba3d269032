"""The service sees benchmarks only through the ``Benchmark`` face: a third-party one shows up everywhere."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.service_helpers import ROOT, Server

EXAMPLE = ROOT / "docs" / "examples" / "tinybench"
pytestmark = pytest.mark.slow  # installs a package, runs the engine and a server: once in CI (-m slow)


@pytest.fixture(scope="module")
def tinybench(tmp_path_factory) -> tuple[Path, Path]:
    """The example benchmark installed into its own folder (not this venv): (project, site)."""
    folder = tmp_path_factory.mktemp("tinybench")
    project = folder / "tinybench"
    shutil.copytree(EXAMPLE, project)
    done = subprocess.run([sys.executable, "-m", "pip", "-q", "install", "--no-deps", "--target", str(folder / "site"),
                           str(project)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return project, folder / "site"


@pytest.fixture(scope="module")
def server(tinybench, tmp_path_factory):
    project, site = tinybench
    store = tmp_path_factory.mktemp("face") / "store.db"
    env = {**os.environ, "PYTHONPATH": str(site)}
    ran = subprocess.run([sys.executable, "-m", "pytest", "evals", "--store", str(store), "--cache", "off",
                          "-p", "no:cacheprovider", "--arith-cases", "4", "--run-id", "run_0000a417", "-q"],
                         cwd=project, env=env, capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    running = Server(store, path=(site,)).start()
    yield running
    running.stop()


def _page(server) -> str:
    request = urllib.request.Request(server.base + "/", headers={"Authorization": f"Bearer {server.token}"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        return answer.read().decode("utf-8")


def test_a_third_party_benchmark_is_listed_by_the_api(server):
    status, listed = server.call("GET", "/api/benchmarks")
    assert status == 200
    by_name = {b["name"]: b for b in listed}
    assert set(by_name) >= {"arith", "ebs", "ibf", "microbiorel"}
    assert by_name["arith"]["title"] == "add two numbers, exact match"
    assert [m["name"] for m in by_name["arith"]["metrics"]] == ["accuracy"]
    assert by_name["ibf"]["corpus_versions"] == ["ibf-v1.0"] and by_name["arith"]["corpus_versions"] is None


def test_a_third_party_benchmark_is_in_the_evaluation_form(server):
    page = _page(server)
    form = page[page.index('<form id="evaluate">'):page.index("</form>")]
    assert '<option value="arith">arith: add two numbers, exact match</option>' in form


def test_a_third_party_benchmarks_run_is_on_the_dashboard(server):
    page = _page(server)
    assert '<section id="arith" class="benchmark" data-bench="arith">' in page
    data = json.loads(page.split('<script type="application/json" id="fieldeval-data">')[1].split("</script>")[0])
    [entry] = data["entries"]["arith"]
    assert (entry["run_id"], entry["model"], entry["metrics"]["accuracy"]["value"]) == ("run_0000a417", "arith-baseline", 1.0)
    assert [b["headline"] for b in data["benchmarks"] if b["name"] == "arith"] == [[{"name": "accuracy", "low": 0.0, "high": 1.0}]]


def test_an_evaluation_of_a_third_party_benchmark_is_accepted_and_an_unknown_one_named(server):
    status, answer = server.call("POST", "/api/evaluations", {"model_id": "arith-baseline", "benchmark": "nope"})
    assert status == 422 and "'nope' is not an installed benchmark; choose from arith, ebs, ibf, microbiorel" in answer["message"]
    status, answer = server.call("POST", "/api/evaluations", {"model_id": "arith-baseline", "benchmark": "arith"})
    assert status == 202 and answer["total_items"] == 12, answer  # the default --arith-cases
