"""The IBF judge is measured against people before it scores, refused below the floor, and asked K times (issue 35).

The judge is a local OpenAI-compatible server registered as an endpoint model: ``judge-agree`` grades a
response ``... GRADE=k`` with k on every dimension (as the people did), ``judge-disagree`` with 4 - k, and
``judge-vary`` answers the n-th call on one prompt with (n mod 3) + 1 everywhere.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from fieldeval.store import open_store
from scorers.ibf import DIMENSIONS

ROOT = Path(__file__).resolve().parents[1]


class JudgeHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    calls: dict[str, int] = {}
    lock = threading.Lock()

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        model, prompt = body.get("model", ""), json.dumps(body.get("messages", []))
        with self.lock:
            key = f"{model}|{prompt}"
            JudgeHandler.calls[key] = JudgeHandler.calls.get(key, 0) + 1
            n = JudgeHandler.calls[key]
        found = re.search(r"GRADE=(\d)", prompt)
        k = int(found.group(1)) if found else 2
        grade = {"judge-agree": k, "judge-disagree": 4 - k, "judge-vary": (n % 3) + 1}.get(model, 2)
        text = json.dumps({name: grade for name in DIMENSIONS})
        reply = {"id": "x", "object": "chat.completion", "created": 0, "model": model,
                 "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
                 "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture(scope="module")
def judge_server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), JudgeHandler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1/chat/completions"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def project(tmp_path, judge_server):
    store = tmp_path / "store.db"
    with open_store(str(store)) as opened:
        for name in ("judge-agree", "judge-disagree", "judge-vary"):
            opened.add_model(name, judge_server, provider="local")
    (tmp_path / "evals").mkdir()
    (tmp_path / "evals" / "test_ibf.py").write_text((ROOT / "evals" / "test_ibf.py").read_text())
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    lines = (ROOT / "fixtures" / "ibf" / "ibf-v1.0.jsonl").read_text(encoding="utf-8").splitlines()[:4]
    (tmp_path / "small.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    ids = [json.loads(line)["id"] for line in lines]
    graded = [{"item_id": ids[k % len(ids)], "response": f"an answer GRADE={k}",
               "grades": {name: k for name in DIMENSIONS}} for k in [0, 1, 2, 3, 4, 1, 3]]
    (tmp_path / "graded.jsonl").write_text("".join(json.dumps(g) + "\n" for g in graded))
    JudgeHandler.calls.clear()
    return tmp_path


def _pytest(project: Path, *args: str) -> subprocess.CompletedProcess:
    store = project / "store.db"
    env = {**__import__("os").environ, "FIELDEVAL_STORE": f"sqlite:///{store}"}
    return subprocess.run([sys.executable, "-m", "pytest", "evals", "-p", "no:randomly", "-p", "no:cacheprovider",
                           "--ibf-corpus", str(project / "small.jsonl"), "--store", str(store),
                           "--eval-report", str(project / "report.json"), "--bootstrap-resamples", "100", *args],
                          cwd=project, env=env, capture_output=True, text=True, timeout=300)


def _judge_calls(model: str) -> int:
    return sum(n for key, n in JudgeHandler.calls.items() if key.startswith(f"{model}|"))


def test_a_judge_that_disagrees_with_people_is_refused_in_one_line(project):
    done = _pytest(project, "--judge-model", "judge-disagree", "--judge-graded", "graded.jsonl",
                   "--judge-min-agreement", "0.5")
    assert done.returncode == 2, done.stdout + done.stderr
    said = [line for line in (done.stdout + done.stderr).splitlines() if "judge-disagree" in line]
    assert len(said) == 1 and "agrees with people at alpha -" in said[0] and "below --judge-min-agreement 0.5" in said[0]
    assert not (project / "report.json").exists()  # nothing was scored


def test_a_judge_that_agrees_scores_and_its_agreement_is_kept_with_the_run(project):
    (project / "pyproject.toml").write_text("[tool.fieldeval.judge]\nmin_agreement = 0.8\n")  # the floor from pyproject
    done = _pytest(project, "--judge-model", "judge-agree", "--judge-graded", "graded.jsonl")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    evals = json.loads((project / "report.json").read_text())["evals"]
    kept = evals["scoring"]["ibf"]["judge_agreement"]
    # 7 graded lines, two of them a second person's grades of a response already graded: 5 responses
    assert kept["judge"] == "judge-agree" and kept["n_responses"] == 5 and kept["min_agreement"] == 0.8
    assert all(dim["alpha"]["value"] == pytest.approx(1.0) for dim in kept["dimensions"].values())
    with open_store(str(project / "store.db")) as store:
        settings = store.run_settings(evals["run_id"])
    assert settings["scoring"]["ibf"]["judge_agreement"]["sha256"] == kept["sha256"]


def test_judge_epochs_take_the_median_flag_straddling_items_and_replay_from_the_cache(project):
    done = _pytest(project, "--judge-model", "judge-vary", "--judge-epochs", "3")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    entry = json.loads((project / "report.json").read_text())["evals"]["benchmarks"]["ibf"]["ibf-floor"]
    assert _judge_calls("judge-vary") == 3 * 4  # three judgements of each of the 4 answers
    # each answer was graded 2, 3 and 1 (calls 1-3): the median is 2 on every dimension
    assert entry["hazard_recognition"]["value"] == float(np.median([2, 3, 1]))
    spread = entry["judge_spread"]
    assert spread["epochs"] == 3
    assert spread["within_item_sd"]["hazard_recognition"] == pytest.approx(float(np.std([2, 3, 1])), abs=1e-6)
    assert len(spread["straddles"]) == 4  # 1 is below the pass threshold 2, 2 and 3 are not
    assert "the judge asked 3 times per response" in done.stdout
    again = _pytest(project, "--judge-model", "judge-vary", "--judge-epochs", "3")
    assert again.returncode == 0 and _judge_calls("judge-vary") == 3 * 4  # every repeat from its own cache entry


@pytest.mark.parametrize("args, said", [
    (["--judge-epochs", "0", "--judge-model", "judge-agree"], "--judge-epochs 0: must be at least 1"),
    (["--judge-graded", "graded.jsonl"], "--judge-graded graded.jsonl: needs --judge-model"),
    (["--judge-model", "judge-agree", "--judge-min-agreement", "0.5"], "--judge-min-agreement 0.5: needs --judge-graded"),
    (["--judge-model", "judge-agree", "--judge-graded", "graded.jsonl", "--judge-min-agreement", "2"],
     "--judge-min-agreement 2: Krippendorff's alpha lies between -1 and 1"),
])
def test_bad_judge_options_are_one_line_and_exit_2(project, args, said):
    done = _pytest(project, *args)
    assert done.returncode == 2
    assert said in done.stdout + done.stderr
