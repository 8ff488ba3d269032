"""A throwaway EBS project whose fake models misbehave on purpose: slow, flaky, hung, rate-limited, keyless.

Every fake appends one line per attempt to ``attempts.log`` (time, model,
place, process) and tracks the calls in flight across processes in ``inflight``
(under a file lock), so tests can check retries, waits and the
concurrency bound from the outside.
"""

from __future__ import annotations

import json

import pytest
import yaml

from tests.conftest import TINY_ENUMS, TINY_SELECTOR
from tests.ebs_project import _case

FAKES = '''
import fcntl
import json
import os
import re
import time

import llm

pytest_plugins = ["fieldeval.plugin"]

ANSWERS = {"Iowa": "cropland biome [ENVO:01000245]", "Oregon": "coniferous forest biome [ENVO:01000196]"}
DELAY = float(os.environ.get("FAKE_DELAY", "0"))


def _bump(delta):
    with open("inflight.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            state = json.load(open("inflight")) if os.path.exists("inflight") else {"now": 0, "max": 0}
            state["now"] += delta
            state["max"] = max(state["max"], state["now"])
            json.dump(state, open("inflight", "w"))
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _attempt(model, prompt):
    place = re.search(r"USA: ([A-Za-z]+-[0-9]+)", prompt).group(1)
    with open("attempts.log", "a") as log:
        log.write(json.dumps({"t": time.time(), "model": model, "place": place, "pid": os.getpid()}) + "\\n")
    return place


class HTTPError(Exception):
    """Shaped like an OpenAI SDK error: a status code and a response with headers."""

    def __init__(self, status, headers=None):
        super().__init__(f"HTTP {status}")
        self.status_code = status
        self.response = type("Response", (), {"status_code": status, "headers": headers or {}})()


class Fake(llm.Model):
    """A hosted provider's model (it names a key, as llm-anthropic's do): fieldeval shares it between threads."""

    can_stream = False
    needs_key = "fake"

    class Options(llm.Options):
        temperature: float | None = None

    def __init__(self, model_id):
        self.model_id = model_id

    def execute(self, prompt, stream, response, conversation):
        place = _attempt(self.model_id, prompt.prompt)
        _bump(+1)
        try:
            time.sleep(DELAY)
            if self.model_id == "fake-nokey":
                raise llm.NeedsKeyException("No key found - add one using 'llm keys set openai'")
            if self.model_id == "fake-hang":
                time.sleep(3600)
            if self.model_id == "fake-429":
                tries = sum(1 for line in open("attempts.log") if f'"place": "{place}"' in line)
                if tries == 1:
                    raise HTTPError(429, {"retry-after": "3"})
            if self.model_id == "fake-flaky":
                tries = sum(1 for line in open("attempts.log") if f'"place": "{place}"' in line and "flaky" in line)
                if tries == 1 and hash_of(place) % 5 == 0:  # a fifth of the items fail once
                    raise HTTPError(503)
            response.set_usage(input=10, output=3)
            yield ANSWERS.get(place.split("-")[0], "forest biome [ENVO:01000174]")
        finally:
            _bump(-1)


class LocalFake(llm.Model):
    """A model inside the process that is not thread-safe (as llama.cpp's Llama is): a second thread entering it
    spoils both answers, and is counted in ``collisions``."""

    model_id = "fake-local"
    can_stream = False
    inside = 0

    def execute(self, prompt, stream, response, conversation):
        place = _attempt(self.model_id, prompt.prompt)
        _bump(+1)
        LocalFake.inside += 1
        try:
            time.sleep(DELAY)
            spoiled = LocalFake.inside > 1
            if spoiled:
                with open("collisions", "a") as out:
                    out.write(place + "\\n")
            yield "marine biome [ENVO:00000447]" if spoiled else ANSWERS.get(place.split("-")[0],
                                                                             "forest biome [ENVO:01000174]")
        finally:
            LocalFake.inside -= 1
            _bump(-1)


def hash_of(text):
    return sum(ord(c) for c in text)


class Plugin:
    @llm.hookimpl
    def register_models(self, register):
        for name in ("fake-slow", "fake-flaky", "fake-hang", "fake-429", "fake-nokey"):
            register(Fake(name))
        register(LocalFake())


llm.plugins.pm.register(Plugin(), name="fake-calls-plugin")
'''


def make_calls_project(pytester: pytest.Pytester, cases: int) -> pytest.Pytester:
    """Write the fakes, the EBS eval module and a suite of ``cases`` cases (distinct places) into pytester."""
    from tests.conftest import ROOT

    pytester.makeconftest(FAKES)
    pytester.makeini("[pytest]\n")
    (pytester.path / "evals").mkdir()
    (pytester.path / "evals" / "test_ebs.py").write_text((ROOT / "evals" / "test_ebs.py").read_text())
    places = [("Iowa", "cropland biome [ENVO:01000245]"), ("Oregon", "forest biome [ENVO:01000174]")]
    suite = {"name": "calls", "template": "predict_ebs",
             "templates": {"predict_ebs": {"system": "You are an expert.", "prompt": "{input}"}},
             "cases": [_case(f"{places[i % 2][0]}-{i:03d}", "soil_data", places[i % 2][1]) for i in range(cases)]}
    (pytester.path / "suite.yaml").write_text(yaml.safe_dump(suite))
    return pytester


def run_calls(project: pytest.Pytester, model: str, *extra: str):
    """Run the EBS evals against one fake; returns the result and the JSON report (None when absent)."""
    args = ("evals", "--model", model, "--ebs-suite", "suite.yaml", "--ontology", TINY_SELECTOR,
            "--enum-dir", str(TINY_ENUMS), "--cache", "off", "--store", "none", "-p", "no:cacheprovider", *extra)
    result = project.runpytest_subprocess(*args, timeout=300)
    path = project.path / "reports" / "report.json"
    return result, (json.loads(path.read_text()) if path.is_file() else None)


def attempts(project: pytest.Pytester) -> list[dict]:
    """Every attempt the fakes saw, in order."""
    path = project.path / "attempts.log"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def max_in_flight(project: pytest.Pytester) -> int:
    """The most calls the fakes had in flight at once, across processes."""
    return json.loads((project.path / "inflight").read_text())["max"]
