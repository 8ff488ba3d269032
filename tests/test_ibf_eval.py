"""IBF end to end: the judge through a fake llm model, and pytester runs of evals/test_ibf.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import llm
import pytest

from fieldeval import complete
from fieldeval.benchmarks.ibf.corpus import load_corpus
from fieldeval.benchmarks.ibf.prompts import JUDGE_SYSTEM, judge_prompt
from scorers.ibf import JUDGE_SCHEMA, parse_judgement

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]
GOOD = ('{"hazard_recognition": 3, "impact_reasoning": 2, "uncertainty_handling": 2, '
        '"action_relevance": 3, "geographic_specificity": 2, "rationale": "fine"}')


class FakeJudge(llm.Model):
    """An llm model that replies with the texts queued on it, in order."""

    model_id = "fake-ibf-judge"
    can_stream = False
    replies: list[str] = []

    def execute(self, prompt, stream, response, conversation):
        yield self.replies.pop(0)


class _Plugin:
    @llm.hookimpl
    def register_models(self, register):
        register(FakeJudge())


@pytest.fixture
def fake_judge():
    name = "fake-ibf-judge-plugin"
    llm.plugins.pm.register(_Plugin(), name=name)
    yield FakeJudge
    FakeJudge.replies.clear()
    llm.plugins.pm.unregister(name=name)


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("Sure! ```json\n" + GOOD + "\n```", (3, 2, 2, 3, 2)),
        ('{"hazard_recognition": 3, "impact_reasoning": ', (None,) * 5),  # malformed: truncated JSON
        (GOOD.replace('"impact_reasoning": 2', '"impact_reasoning": 12'), (3, None, 2, 3, 2)),  # out of range
        ("The answer is decent on every dimension; I would call it good.", (None,) * 5),  # prose only
    ],
    ids=["fenced", "malformed", "out_of_range", "prose"],
)
def test_judge_through_complete_with_a_fake_model(fake_judge, reply, expected):
    item = load_corpus().items[0]
    fake_judge.replies.append(reply)
    # a distinct response per case, so a response cache in complete() never answers for the fake
    prompt = judge_prompt(item, f"answer for {reply!r}")
    verdict = complete("fake-ibf-judge", prompt, system=JUDGE_SYSTEM, schema=JUDGE_SCHEMA)
    assert parse_judgement(verdict.text, scorer="judge:fake-ibf-judge").values == expected


def test_judge_prompt_carries_rubric_references_and_response():
    item = load_corpus().items[0]
    prompt = judge_prompt(item, "ANSWER-UNDER-TEST")
    assert "0 Absent" in prompt and item.references.geography.admin2[0] in prompt and "ANSWER-UNDER-TEST" in prompt


CONFTEST = '''
import llm

pytest_plugins = ["fieldeval.plugin"]

REPLIES = {
    "Jamuna": "I cannot grade this.",
    "Búzi": '{"hazard_recognition": 9, "impact_reasoning": 2, "uncertainty_handling": 2, '
                '"action_relevance": 2, "geographic_specificity": 2}',
}
DEFAULT = ('Scores: {"hazard_recognition": 4, "impact_reasoning": 2, "uncertainty_handling": 1, '
           '"action_relevance": 3, "geographic_specificity": 2}')


class PytesterJudge(llm.Model):
    model_id = "pytester-judge"
    can_stream = False

    def execute(self, prompt, stream, response, conversation):
        text = prompt.prompt or ""
        yield next((reply for key, reply in REPLIES.items() if key in text), DEFAULT)


class Plugin:
    @llm.hookimpl
    def register_models(self, register):
        register(PytesterJudge())


if not llm.plugins.pm.has_plugin("pytester-judge-plugin"):
    llm.plugins.pm.register(Plugin(), name="pytester-judge-plugin")
'''


@pytest.fixture
def eval_dir(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    (pytester.path / "evals").mkdir()
    shutil.copy(ROOT / "evals" / "test_ibf.py", pytester.path / "evals" / "test_ibf.py")
    return pytester


def _report(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict]:
    report = pytester.path / "report.json"
    result = pytester.runpytest("evals", "-p", "no:randomly", "--eval-report", str(report),
                                "--reports-dir", str(pytester.path / "reports"), "--bootstrap-resamples", "200", *args)
    return result, json.loads(report.read_text())["evals"]["benchmarks"]["ibf"]


def test_floor_end_to_end_on_the_whole_corpus(eval_dir):
    result, ibf = _report(eval_dir)
    result.assert_outcomes(passed=len(load_corpus().items))
    entry = ibf["ibf-floor"]
    for name in ["hazard_recognition", "impact_reasoning", "uncertainty_handling", "action_relevance",
                 "geographic_specificity", "mean_dimension_score", "threshold_pass_rate"]:
        lo, hi = entry[name]["ci95"]
        assert lo <= entry[name]["value"] <= hi
    assert entry["mean_dimension_score"]["value"] < 3 and entry["scorer"] == {"reference": len(load_corpus().items)}
    assert entry["reading"]["overall"] == "unsuitable"
    result.stdout.fnmatch_lines(["*ibf ibf-floor: MDS * TPR *"])
    assert (eval_dir.path / "reports" / "ibf" / "scores.tsv").is_file()


def test_judge_model_end_to_end_counts_unscored(eval_dir):
    corpus = eval_dir.path / "small.jsonl"
    lines = (ROOT / "fixtures" / "ibf" / "ibf-v1.0.jsonl").read_text(encoding="utf-8").splitlines()[:4]
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result, ibf = _report(eval_dir, "--ibf-corpus", str(corpus), "--judge-model", "pytester-judge")
    result.assert_outcomes(passed=4)
    entry = ibf["ibf-floor"]
    assert entry["scorer"] == {"judge:pytester-judge": 4}
    assert entry["unscored"]["hazard_recognition"] == 2 and entry["unscored"]["impact_reasoning"] == 1
    # the first four corpus items share one hazard (one cluster): no interval over new hazards can be drawn from one
    # cluster; over more items of that hazard, two items both graded 4 give 4 to 4
    assert entry["hazard_recognition"] == {"value": 4.0, "ci95": [None, None], "ci95_within": [4.0, 4.0], "n": 2,
                                           "n_clusters": 1}
    assert entry["impact_reasoning"]["value"] == 2.0 and entry["impact_reasoning"]["n"] == 3
    assert entry["threshold_pass_rate"]["n"] == 2 and entry["threshold_pass_rate"]["value"] == 0.0
    assert entry["mean_dimension_score"]["value"] == pytest.approx((4 + 2 + 1 + 3 + 2) / 5, abs=0.05)


def test_unknown_judge_model_is_a_usage_error(eval_dir):
    result = eval_dir.runpytest_subprocess("evals", "--judge-model", "no-such-judge", "--eval-report",
                                str(eval_dir.path / "r.json"))
    assert result.ret == 2
    result.stderr.fnmatch_lines(["Exit: --judge-model 'no-such-judge' is not a known llm model*"])
