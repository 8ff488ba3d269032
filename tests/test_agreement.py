"""``fieldeval agreement ibf``: kappa, alpha and MAE of a scorer against people's grades, with item-cluster ci95."""

from __future__ import annotations

import json

import krippendorff
import llm
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sklearn.metrics import cohen_kappa_score

from fieldeval.benchmarks.ibf.agreement import (ALPHA_RANGE, KAPPA_RANGE, MAE_RANGE, GradedPair, agreement,
                                                 alpha_batch, alpha_point, dimension_agreement, kappa_batch,
                                                 kappa_point)
from fieldeval.benchmarks.ibf.corpus import load_corpus
from fieldeval.cli import main
from scorers.ibf import DIMENSIONS, score_reference

GRADES = [0, 1, 2, 3, 4]
TABLES = {  # (human, scorer) per line
    "perfect": ([0, 1, 2, 3, 4, 2, 3], [0, 1, 2, 3, 4, 2, 3]),
    "close": ([0, 1, 2, 3, 4, 2, 3, 1], [0, 2, 2, 3, 3, 1, 3, 1]),
    "constant_scorer": ([0, 1, 2, 3, 4, 2], [2, 2, 2, 2, 2, 2]),
    "no_grade_4_or_2": ([0, 1, 3, 3, 1, 0], [0, 1, 3, 1, 1, 0]),
    "reversed": ([0, 1, 3, 4, 4, 0], [4, 3, 1, 0, 0, 4]),
}


def _sklearn_kappa(human, scorer):
    return cohen_kappa_score(human, scorer, weights="quadratic", labels=GRADES)


def _package_alpha(human, scorer):
    data = np.array([[np.nan if v is None else v for v in row] for row in (human, scorer)], dtype=float)
    return krippendorff.alpha(reliability_data=data, level_of_measurement="ordinal")


def _items(n, per_item=1):
    return [f"ibf_{i // per_item:04d}" for i in range(n)]


@pytest.mark.parametrize("name", TABLES)
def test_kappa_is_scikit_learns_quadratic_weighted_kappa(name):
    human, scorer = TABLES[name]
    out = dimension_agreement(human, scorer, _items(len(human)), resamples=50)
    assert out["kappa"]["value"] == pytest.approx(_sklearn_kappa(human, scorer), abs=1e-6)


@pytest.mark.parametrize("name", TABLES)
def test_alpha_is_the_krippendorff_packages_ordinal_alpha(name):
    human, scorer = TABLES[name]
    out = dimension_agreement(human, scorer, _items(len(human)), resamples=50)
    assert out["alpha"]["value"] == pytest.approx(_package_alpha(human, scorer), abs=1e-6)


def test_perfect_agreement_is_one_with_zero_error():
    human, scorer = TABLES["perfect"]
    out = dimension_agreement(human, scorer, _items(len(human)), resamples=50)
    assert (out["kappa"]["value"], out["alpha"]["value"], out["mae"]["value"]) == (1.0, 1.0, 0.0)
    assert out["kappa"]["ci95"] == [1.0, 1.0] and out["mae"]["ci95"] == [0.0, 0.0]


def test_a_constant_scorer_has_kappa_zero_not_an_error():
    human, scorer = TABLES["constant_scorer"]
    assert dimension_agreement(human, scorer, _items(6), resamples=50)["kappa"]["value"] == 0.0


def test_kappa_counts_every_grade_of_the_scale_not_only_those_seen():
    # scikit-learn without labels weighs distances between the labels present (0, 1, 3 as 0, 1, 2)
    human, scorer = TABLES["no_grade_4_or_2"]
    value = dimension_agreement(human, scorer, _items(6), resamples=50)["kappa"]["value"]
    assert value == pytest.approx(_sklearn_kappa(human, scorer), abs=1e-6)
    assert value != pytest.approx(cohen_kappa_score(human, scorer, weights="quadratic"), abs=1e-3)


def test_a_missing_grade_leaves_out_that_line_for_kappa_and_mae_and_is_nan_for_alpha():
    human = [0, 1, None, 3, 4, 2, 1]
    scorer = [0, 2, 4, 3, 3, 2, 1]
    out = dimension_agreement(human, scorer, _items(7), resamples=50)
    kept = [i for i, h in enumerate(human) if h is not None]
    assert out["kappa"]["value"] == pytest.approx(_sklearn_kappa([human[i] for i in kept], [scorer[i] for i in kept]))
    assert out["alpha"]["value"] == pytest.approx(_package_alpha(human, scorer), abs=1e-6)
    assert out["mae"]["value"] == pytest.approx(2 / 6, abs=1e-6)
    assert sum(map(sum, out["confusion"])) == 6


def test_mae_base_rate_and_confusion_by_hand():
    human, scorer = [0, 2, 2, 4, 2], [1, 2, 4, 4, 2]
    out = dimension_agreement(human, scorer, _items(5), resamples=50)
    assert out["mae"]["value"] == pytest.approx((1 + 0 + 2 + 0 + 0) / 5)
    assert out["base_rate"] == pytest.approx(3 / 5)  # three of five human grades are 2
    assert out["confusion"] == [[0, 1, 0, 0, 0], [0, 0, 0, 0, 0], [0, 0, 2, 0, 1], [0, 0, 0, 0, 0], [0, 0, 0, 0, 1]]


def test_neither_side_varying_leaves_kappa_and_alpha_undefined():
    out = dimension_agreement([3, 3, 3, 3], [3, 3, 3, 3], _items(4), resamples=50)
    assert out["kappa"] == {"value": None, "ci95": [None, None]}
    assert out["alpha"] == {"value": None, "ci95": [None, None]}
    assert out["mae"]["value"] == 0.0 and out["base_rate"] == 1.0


def test_a_dimension_nobody_graded_is_all_none():
    out = dimension_agreement([None, None], [1, 2], _items(2), resamples=50)
    assert out["kappa"]["value"] is None and out["mae"]["value"] is None and out["base_rate"] is None
    assert out["confusion"] == [[0] * 5 for _ in range(5)]


grade_pairs = st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), min_size=2, max_size=25)


@given(grade_pairs)
def test_the_resample_statistics_at_unit_weights_are_the_libraries_values(pairs):
    data = np.array(pairs)
    ones = np.ones((1, len(data)))
    for point, batch in ((kappa_point, kappa_batch), (alpha_point, alpha_batch)):
        expected, got = point(data), batch(data, ones)[0]
        assert (np.isnan(expected) and np.isnan(got)) or got == pytest.approx(expected, abs=1e-9)


@given(grade_pairs, st.lists(st.integers(0, 3), min_size=25, max_size=25))
def test_a_resample_weight_counts_a_line_as_that_many_copies(pairs, counts):
    data = np.array(pairs)
    counts = np.array(counts[:len(data)])
    copies = np.repeat(data, counts, axis=0)
    for point, batch in ((kappa_point, kappa_batch), (alpha_point, alpha_batch)):
        expected = point(copies) if len(copies) else float("nan")
        got = batch(data, counts[None, :].astype(float))[0]
        assert (np.isnan(expected) and np.isnan(got)) or got == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("name", TABLES)
def test_each_ci95_holds_its_point_and_stays_in_the_statistics_range(name):
    human, scorer = TABLES[name]
    n = len(human)
    out = dimension_agreement(human * 3, scorer * 3, _items(3 * n), resamples=300, seed=7)
    for stat, (low, high) in (("kappa", KAPPA_RANGE), ("alpha", ALPHA_RANGE), ("mae", MAE_RANGE)):
        value, (lo, hi) = out[stat]["value"], out[stat]["ci95"]
        if value is None:
            continue
        assert low <= lo <= value <= hi <= high, (stat, out[stat])


def test_the_interval_resamples_items_with_all_their_lines():
    rng = np.random.default_rng(3)
    human = rng.integers(0, 5, 60).tolist()
    scorer = np.clip(np.array(human) + rng.integers(-1, 2, 60), 0, 4).tolist()
    apart = dimension_agreement(human, scorer, _items(60), resamples=400, seed=1)
    grouped = dimension_agreement(human, scorer, _items(60, per_item=6), resamples=400, seed=1)
    width = [out["mae"]["ci95"][1] - out["mae"]["ci95"][0] for out in (apart, grouped)]
    assert width[1] > width[0]  # ten items of six lines each are fewer draws than sixty items
    # lines of one item are one draw: there is nothing to resample
    assert dimension_agreement(human[:6], scorer[:6], ["ibf_0001"] * 6, resamples=50)["mae"]["ci95"] == [None, None]


def test_the_same_seed_gives_the_same_intervals_and_counts_responses_once():
    pairs = [GradedPair(f"ibf_{i % 4:04d}", f"answer {i % 8}", {d: i % 5 for d in DIMENSIONS},
                        {d: (i + i // 3) % 5 for d in DIMENSIONS}) for i in range(16)]
    first, second = agreement(pairs, resamples=100, seed=5), agreement(pairs, resamples=100, seed=5)
    assert first == second
    assert (first["n_responses"], first["n_items"]) == (8, 4)


# --- the command ------------------------------------------------------------------------------------------------

CORPUS = load_corpus()
ITEMS = CORPUS.items[:6]


def _lines(n_people=2):
    """Two responses per item for six items, each graded by ``n_people`` people (the reference scorer's grade,
    nudged), so that grades vary."""
    out = []
    for k, item in enumerate(ITEMS):
        for response in (f"A {item.hazard} is forecast in {item.references.geography.country}.",
                         f"{item.context.alert} Evacuate people from {item.references.geography.admin2[0]}."):
            score = score_reference(response, item.references.model_dump())
            for person in range(n_people):
                grades = {d: min(4, max(0, v + (person + k + i) % 3 - 1))
                          for i, (d, v) in enumerate(zip(DIMENSIONS, score.values))}
                out.append({"item_id": item.id, "response": response, "grades": grades})
    return out


def _write(tmp_path, lines, *, name="graded.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def _run(capsys, *args):
    code = main(["agreement", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_json_has_exactly_the_documented_keys(tmp_path, capsys):
    code, out, _ = _run(capsys, "ibf", _write(tmp_path, _lines()), "--json", "--resamples", "100")
    assert code == 0
    payload = json.loads(out)
    assert set(payload) == {"n_responses", "n_items", "scorer", "dimensions"}
    assert (payload["n_responses"], payload["n_items"], payload["scorer"]) == (12, 6, "reference")
    assert list(payload["dimensions"]) == list(DIMENSIONS)
    for dim in payload["dimensions"].values():
        assert set(dim) == {"kappa", "alpha", "mae", "base_rate", "confusion"}
        for stat in ("kappa", "alpha", "mae"):
            assert set(dim[stat]) == {"value", "ci95"} and len(dim[stat]["ci95"]) == 2
        assert len(dim["confusion"]) == 5 and all(len(row) == 5 for row in dim["confusion"])
        assert sum(map(sum, dim["confusion"])) == 24


def test_the_command_scores_with_the_reference_scorer(tmp_path, capsys):
    lines = _lines(n_people=1)
    for line in lines:  # the person agrees with the reference scorer exactly
        item = next(i for i in ITEMS if i.id == line["item_id"])
        line["grades"] = dict(zip(DIMENSIONS, score_reference(line["response"], item.references.model_dump()).values))
    _, out, _ = _run(capsys, "ibf", _write(tmp_path, lines), "--json", "--resamples", "50")
    for dim in json.loads(out)["dimensions"].values():
        assert dim["mae"]["value"] == 0.0
        assert all(count == 0 for h, row in enumerate(dim["confusion"]) for s, count in enumerate(row) if h != s)


def test_the_text_report_names_each_dimension_and_its_statistics(tmp_path, capsys):
    code, out, _ = _run(capsys, "ibf", _write(tmp_path, _lines()), "--resamples", "100")
    assert code == 0
    assert "24 graded lines, 12 responses, 6 items" in out
    for name in DIMENSIONS:
        assert f"  {name} (24 lines)" in out
    assert "kappa (quadratic)" in out and "alpha (ordinal)" in out and "base rate" in out


def test_an_undefined_kappa_prints_not_defined_and_one_note(tmp_path, capsys):
    lines = []
    for item in ITEMS[:3]:
        grades = dict(zip(DIMENSIONS, score_reference("", item.references.model_dump()).values))  # all 0
        lines.append({"item_id": item.id, "response": "", "grades": grades})
    code, out, _ = _run(capsys, "ibf", _write(tmp_path, lines), "--resamples", "50")
    assert code == 0
    assert "kappa (quadratic)  not defined" in out and "alpha (ordinal)    not defined" in out
    assert sum("kappa and alpha not defined" in line for line in out.splitlines()) == len(DIMENSIONS)
    code, out, err = _run(capsys, "ibf", _write(tmp_path, lines), "--json", "--resamples", "50")
    assert json.loads(out)["dimensions"]["hazard_recognition"]["kappa"] == {"value": None, "ci95": [None, None]}
    assert err.count("note: hazard_recognition") == 1


def test_a_null_or_absent_grade_skips_that_dimension_only(tmp_path, capsys):
    lines = _lines()
    lines[0]["grades"]["impact_reasoning"] = None
    del lines[1]["grades"]["impact_reasoning"]
    _, out, _ = _run(capsys, "ibf", _write(tmp_path, lines), "--json", "--resamples", "50")
    totals = {name: sum(map(sum, dim["confusion"])) for name, dim in json.loads(out)["dimensions"].items()}
    assert totals["impact_reasoning"] == 22 and totals["hazard_recognition"] == 24


def test_a_bom_prefixed_file_reads_as_without_one(tmp_path, capsys):
    plain = _write(tmp_path, _lines())
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes().replace(b"\n", b"\r\n"))
    outputs = [_run(capsys, "ibf", path, "--json", "--resamples", "50") for path in (plain, bom)]
    assert outputs[0][0] == outputs[1][0] == 0 and outputs[0][1] == outputs[1][1]


class FakeAgreementJudge(llm.Model):
    """An llm model that grades every response 3, 2, 1, 4, 0."""

    model_id = "fake-agreement-judge"
    can_stream = False
    calls: list[str] = []

    def execute(self, prompt, stream, response, conversation):
        self.calls.append(prompt.prompt)
        yield ('{"hazard_recognition": 3, "impact_reasoning": 2, "uncertainty_handling": 1, '
               '"action_relevance": 4, "geographic_specificity": 0, "rationale": "fixed"}')


class _Plugin:
    @llm.hookimpl
    def register_models(self, register):
        register(FakeAgreementJudge())


@pytest.fixture
def fake_judge():
    name = "fake-agreement-judge-plugin"
    llm.plugins.pm.register(_Plugin(), name=name)
    yield FakeAgreementJudge
    FakeAgreementJudge.calls.clear()
    llm.plugins.pm.unregister(name=name)


def test_a_judge_model_gives_the_judges_grades(tmp_path, capsys, fake_judge):
    code, out, _ = _run(capsys, "ibf", _write(tmp_path, _lines()), "--judge-model", "fake-agreement-judge",
                        "--json", "--resamples", "50")
    assert code == 0
    payload = json.loads(out)
    assert payload["scorer"] == "judge:fake-agreement-judge"
    assert len(fake_judge.calls) == 12  # one call per distinct response, not per graded line
    for name, judged in zip(DIMENSIONS, (3, 2, 1, 4, 0)):
        confusion = payload["dimensions"][name]["confusion"]
        assert all(count == 0 for row in confusion for s, count in enumerate(row) if s != judged)
        assert payload["dimensions"][name]["kappa"]["value"] == 0.0  # a constant rater


def _bad_lines(tmp_path, text: str | bytes, name="graded.jsonl"):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def _line(**fields):
    base = {"item_id": ITEMS[0].id, "response": "text", "grades": {"hazard_recognition": 2}}
    return json.dumps({k: v for k, v in (base | fields).items() if v is not ...})


HOSTILE = {
    "empty": ("", "empty"),
    "binary": (b"\x00\x01\x02garbage", "binary"),
    "malformed": (_line() + "\n{not json\n", "line 2"),
    "not_an_object": ("[1, 2]\n", "line 1"),
    "no_grades": (_line(grades=...) + "\n", "no grades"),
    "empty_grades": (_line(grades={}) + "\n", "no grades"),
    "all_null": (_line(grades={"hazard_recognition": None}) + "\n", "every grade is null"),
    "out_of_range": (_line() + "\n" + _line(grades={"impact_reasoning": 5}) + "\n",
                     "line 2: grades.impact_reasoning 5"),
    "negative": (_line(grades={"impact_reasoning": -1}) + "\n", "is not an integer 0-4"),
    "float": (_line(grades={"impact_reasoning": 2.5}) + "\n", "is not an integer 0-4"),
    "string": (_line(grades={"impact_reasoning": "3"}) + "\n", "is not an integer 0-4"),
    "boolean": (_line(grades={"impact_reasoning": True}) + "\n", "is not an integer 0-4"),
    "unknown_dimension": (_line(grades={"hazard_recogniton": 2}) + "\n", "not a rubric dimension"),
    "unknown_item": ("\n" + _line() + "\n" + _line(item_id="ibf_9999") + "\n", "line 3: item_id 'ibf_9999'"),
    "no_item_id": (_line(item_id=...) + "\n", "no item_id"),
    "no_response": (_line(response=...) + "\n", "no response"),
}


def _one_line_exit_2(code, err):
    lines = [line for line in err.splitlines() if line.startswith("fieldeval")]
    assert code == 2 and len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("case", HOSTILE)
def test_hostile_graded_files_end_in_one_line_and_exit_2(tmp_path, capsys, case):
    text, expected = HOSTILE[case]
    code, out, err = _run(capsys, "ibf", _bad_lines(tmp_path, text))
    assert expected in _one_line_exit_2(code, err) and out == ""


def test_a_missing_file_ends_in_one_line_and_exit_2(tmp_path, capsys):
    code, _, err = _run(capsys, "ibf", tmp_path / "nope.jsonl")
    assert "no such file" in _one_line_exit_2(code, err)


def test_a_folder_ends_in_one_line_and_exit_2(tmp_path, capsys):
    code, _, err = _run(capsys, "ibf", tmp_path)
    assert "folder" in _one_line_exit_2(code, err)


def test_another_benchmark_names_the_choices(tmp_path, capsys):
    code, _, err = _run(capsys, "ebs", _write(tmp_path, _lines()))
    assert "choose ibf" in _one_line_exit_2(code, err)


def test_an_unknown_judge_model_ends_in_one_line_and_exit_2(tmp_path, capsys):
    code, _, err = _run(capsys, "ibf", _write(tmp_path, _lines()), "--judge-model", "no-such-judge-model")
    assert "--judge-model" in _one_line_exit_2(code, err)


def test_zero_resamples_ends_in_one_line_and_exit_2(tmp_path, capsys):
    code, _, err = _run(capsys, "ibf", _write(tmp_path, _lines()), "--resamples", "0")
    assert "--resamples 0" in _one_line_exit_2(code, err)
