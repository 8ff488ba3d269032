"""A throwaway eval project with a fake llm model, for end-to-end runs of the EBS benchmark."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from tests.conftest import ROOT, TINY_ENUMS, TINY_SELECTOR

FAKE_CONFTEST = '''
import os
import time

import llm

pytest_plugins = ["fieldeval.plugin"]

ANSWERS = {"Iowa": "cropland biome [ENVO:01000245]", "Oregon": "coniferous forest biome [ENVO:01000196]",
           "Maine": "Forest, I would say."}


class Fake(llm.Model):
    model_id = "fake-ebs"
    can_stream = False

    class Options(llm.Options):
        temperature: float | None = None

    def execute(self, prompt, stream, response, conversation):
        if "Atlantis" in prompt.prompt:
            raise RuntimeError("provider exploded")
        while "Oregon" in prompt.prompt and os.path.exists("block"):  # a hung provider, until unblocked
            time.sleep(0.1)
        assert prompt.system.startswith("You are an expert")
        response.set_usage(input=100, output=7)
        with open("calls.log", "a") as log:
            log.write(prompt.prompt.splitlines()[-1] + "\\n")
        yield next(a for place, a in ANSWERS.items() if place in prompt.prompt)


class Plugin:
    @llm.hookimpl
    def register_models(self, register):
        register(Fake())


llm.plugins.pm.register(Plugin(), name="fake-ebs-plugin")
'''


def _case(place: str, template: str, ideal: str) -> dict:
    prompt = f"Predict.\\nEnvironmental package: {template}\\nGeographic location: USA: {place}\\n"
    return {"input": prompt, "ideal": ideal, "tags": [template, ideal],
            "original_input": {"study_name": "s", "sampleData": template, "env_broad_scale": ideal}}


SUITE = {
    "name": "tiny",
    "template": "predict_ebs",
    "templates": {"predict_ebs": {"system": "You are an expert. Answer label [CURIE].", "prompt": "{input}"}},
    "cases": [
        _case("Iowa", "soil_data", "cropland biome [ENVO:01000245]"),  # exact, in enum: 1.0
        _case("Oregon", "soil_data", "forest biome [ENVO:01000174]"),  # descendant 1 hop: 0.95
        _case("Maine", "air_data", "forest biome [ENVO:01000174]"),  # parse failure: 0
        _case("Atlantis", "soil_data", "forest biome [ENVO:01000174]"),  # model error: the item fails
    ],
}


def make_project(pytester: pytest.Pytester) -> pytest.Pytester:
    """Write the fake model, the EBS eval module and a four-case suite into a pytester folder."""
    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makeini("[pytest]\n")
    (pytester.path / "evals").mkdir()
    shutil.copy(ROOT / "evals" / "test_ebs.py", pytester.path / "evals" / "test_ebs.py")
    (pytester.path / "suite.yaml").write_text(yaml.safe_dump(SUITE))
    return pytester


ARGS = ("evals", "--model", "fake-ebs", "--ebs-suite", "suite.yaml", "--ontology", TINY_SELECTOR,
        "--enum-dir", str(TINY_ENUMS), "--retries", "0", "-p", "no:cacheprovider")


def run(project: pytest.Pytester, *extra: str):
    """Run the EBS evals with the fake model; returns the result and the JSON report."""
    result = project.runpytest_subprocess(*ARGS, *extra)
    report = json.loads((project.path / "reports" / "report.json").read_text())
    return result, report


SLOW_CONFTEST = '''
import json
import os
import signal
import time

import llm
import pytest

pytest_plugins = ["fieldeval.plugin"]


class Slow(llm.Model):
    model_id = "slow-ebs"
    can_stream = False

    def execute(self, prompt, stream, response, conversation):
        time.sleep(0.1)
        with open("calls.log", "a") as log:
            log.write(prompt.prompt.splitlines()[-1] + "\\n")
        yield json.load(open("answer.json")) if os.path.exists("answer.json") else "cropland biome [ENVO:01000245]"


class Plugin:
    @llm.hookimpl
    def register_models(self, register):
        register(Slow())


llm.plugins.pm.register(Plugin(), name="slow-ebs-plugin")


def _signal_self(config, hook):
    if os.environ.get("SIGNAL_AT") == hook and not hasattr(config, "workerinput"):
        os.kill(os.getpid(), getattr(signal, os.environ["SIGNAL_NAME"]))


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    _signal_self(session.config, "runtestloop")


def pytest_sessionfinish(session):
    _signal_self(session.config, "sessionfinish")


def pytest_terminal_summary(terminalreporter):
    _signal_self(terminalreporter.config, "terminal_summary")
'''


def make_slow_project(pytester: pytest.Pytester, cases: int = 30) -> pytest.Pytester:
    """A project whose model ``slow-ebs`` takes 0.1 s per call, over ``cases`` distinct cases."""
    pytester.makeconftest(SLOW_CONFTEST)
    pytester.makeini("[pytest]\n")
    (pytester.path / "evals").mkdir()
    shutil.copy(ROOT / "evals" / "test_ebs.py", pytester.path / "evals" / "test_ebs.py")
    suite = {**SUITE, "cases": [_case(f"Place {n}", "soil_data", "cropland biome [ENVO:01000245]")
                                for n in range(cases)]}
    (pytester.path / "suite.yaml").write_text(yaml.safe_dump(suite))
    return pytester


SLOW_ARGS = ("evals/test_ebs.py", "--model", "slow-ebs", "--ebs-suite", "suite.yaml", "--ontology", TINY_SELECTOR,
             "--enum-dir", str(TINY_ENUMS), "--retries", "0", "-p", "no:cacheprovider", "--cache", "off")
