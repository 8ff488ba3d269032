"""The IBF rubric scorers: the seed's worked example, MDS/TPR properties, reference-scorer snapshots, the judge parser."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from syrupy.extensions.json import JSONSnapshotExtension

from fieldeval.benchmarks.ibf.baseline import floor_response
from fieldeval.benchmarks.ibf.aggregate import aggregate
from fieldeval.benchmarks.ibf.corpus import load_corpus
from fieldeval.benchmarks.ibf.prompts import render_prompt
from scorers.ibf import (
    DIMENSIONS,
    IbfScore,
    dimension_mean,
    mean_dimension_score,
    parse_judgement,
    passes_threshold,
    reading,
    run_scores,
    score_reference,
    threshold_pass_rate,
)

SEED_RESPONSE = """Humanitarian actors should prioritise pre-positioning relief supplies
in Tete and Sofala provinces and coordinate with local disaster management
authorities on evacuation route planning. Given 72-hour lead time,
cash-based pre-payments to at-risk households are feasible if systems
are in place. Key uncertainties include discharge forecast accuracy
at ±15% and the flood extent model's sensitivity to upstream dam releases,
which should be communicated clearly so local authorities can make
go/no-go decisions for early evacuation without waiting for confirmation."""

# the seed's ci_0814 (Lower Zambezi, Mozambique) with reference notes written for this project
CI_0814_REFERENCES = {
    "hazard": {"type": "riverine flood", "synonyms": ["river flood", "flood"],
               "indicators": ["peak discharge", "discharge", "m³/s"]},
    "impacts": {"societal": ["displacement of riverside households", "cholera outbreaks"],
                "agricultural": ["inundated maize fields"], "infrastructure": ["roads cut off"]},
    "uncertainties": ["upstream dam releases from Cahora Bassa", "discharge forecast error"],
    "actions": ["pre-position relief supplies", "cash transfers to at-risk households",
                "evacuate low-lying villages", "early warning messages"],
    "geography": {"country": "Mozambique", "admin1": ["Tete", "Sofala", "Zambezia"],
                  "admin2": ["Mutarara", "Caia", "Chemba"], "features": ["Lower Zambezi basin"]},
}

# the seed's three-run compare payload: model -> (five dimension means, MDS, TPR)
COMPARE = {
    "phi-3-mini-4k": ([3.12, 2.47, 1.83, 2.91, 2.68], 2.60, 0.54),
    "mistral-7b-instruct-v0.3": ([3.54, 3.10, 2.88, 3.22, 3.31], 3.21, 0.72),
    "gemma-2b-it": ([2.31, 1.77, 1.40, 2.05, 2.17], 1.94, 0.28),
}

score = st.one_of(st.none(), st.integers(0, 4))
items = st.lists(st.tuples(score, score, score, score, score), max_size=30)


# --- the seed's worked example and payload ------------------------------------------------------


def test_seed_example_item_mds_is_3_40_and_passes_tpr():
    scores = IbfScore(4, 3, 3, 4, 3, scorer="judge")
    assert round(scores.item_mds, 2) == 3.40
    assert scores.passes_threshold is True
    assert run_scores([scores.values])["mean_dimension_score"] == pytest.approx(3.40)


@pytest.mark.parametrize("model", sorted(COMPARE))
def test_compare_payload_mds_is_mean_of_the_five_means(model):
    means, mds, _ = COMPARE[model]
    assert round(mean_dimension_score(means), 2) == mds


@pytest.mark.parametrize(("model", "overall"), [("phi-3-mini-4k", "partial"), ("mistral-7b-instruct-v0.3", "strong"),
                                                ("gemma-2b-it", "unsuitable")])
def test_compare_payload_reading_bands(model, overall):
    _, mds, tpr = COMPARE[model]
    assert reading(mds, tpr)["overall"] == overall


def test_tpr_below_0_4_is_unsuitable_whatever_the_mds():
    assert reading(3.5, 0.39) == {"mds_band": "strong", "tpr_meets_minimum": False, "overall": "unsuitable"}


def test_tpr_leaves_out_items_with_an_unscored_dimension():
    assert threshold_pass_rate([[4, 3, 3, 4, 3], [1, 2, 2, 2, 2], [4, None, 4, 4, 4]]) == 0.5


def test_empty_run_has_no_means():
    assert run_scores([]) == {"scores": dict.fromkeys(DIMENSIONS), "mean_dimension_score": None,
                              "threshold_pass_rate": None, "total_items": 0}


# --- properties ---------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(items)
def test_mds_in_0_4_and_tpr_in_0_1(rows):
    result = run_scores(rows)
    assert result["mean_dimension_score"] is None or 0 <= result["mean_dimension_score"] <= 4
    assert result["threshold_pass_rate"] is None or 0 <= result["threshold_pass_rate"] <= 1
    for value in result["scores"].values():
        assert value is None or 0 <= value <= 4


@settings(max_examples=60, deadline=None)
@given(items, st.integers(1, 5))
def test_unscored_items_never_change_a_mean(rows, extra):
    padded = rows + [(None,) * 5] * extra
    assert run_scores(padded) | {"total_items": 0} == run_scores(rows) | {"total_items": 0}


@settings(max_examples=60, deadline=None)
@given(items, st.sampled_from(range(5)), score)
def test_an_unscored_value_never_changes_its_dimension_mean(rows, dim, other):
    row = [other] * 5
    row[dim] = None
    before = dimension_mean(r[dim] for r in rows)
    assert dimension_mean([*(r[dim] for r in rows), row[dim]]) == before


@settings(max_examples=25, deadline=None)
@given(items.filter(lambda rows: len(rows) > 0), st.integers(1, 3))
def test_aggregate_values_ignore_fully_unscored_items(rows, extra):
    def as_rows(data):
        return [dict(zip(DIMENSIONS, r), scorer="reference", hazard="flood") for r in data]

    base = aggregate(as_rows(rows), seed=1, resamples=20)
    padded = aggregate(as_rows(rows + [(None,) * 5] * extra), seed=1, resamples=20)
    for name in [*DIMENSIONS, "mean_dimension_score", "threshold_pass_rate"]:
        assert padded[name] == base[name]
    mds = base["mean_dimension_score"]
    if mds["value"] is not None:
        assert 0 <= mds["ci95"][0] <= mds["value"] <= mds["ci95"][1] <= 4


def test_aggregate_bootstrap_is_seeded():
    rows = [dict(zip(DIMENSIONS, r), scorer="reference") for r in [(4, 3, 3, 4, 3), (1, 2, 0, 2, 2), (2, 2, 2, 2, None)]]
    assert aggregate(rows, seed=7, resamples=200) == aggregate(rows, seed=7, resamples=200)


# --- the reference scorer -----------------------------------------------------------------------


def _first(hazard: str):
    return next(i for i in load_corpus().items if i.hazard == hazard)


SNAPSHOT_CASES = {
    "seed_ci_0814_response": (SEED_RESPONSE, CI_0814_REFERENCES),
    "empty_response": ("", CI_0814_REFERENCES),
    "refusal": ("I'm sorry, I cannot help with that request.", CI_0814_REFERENCES),
    "overconfident": ("The flood will certainly hit Mozambique. There is no uncertainty: evacuate everyone now.",
                      CI_0814_REFERENCES),
}


@pytest.mark.parametrize("case", sorted(SNAPSHOT_CASES))
def test_reference_scores_of_fixed_responses(case, snapshot):
    response, refs = SNAPSHOT_CASES[case]
    assert score_reference(response, refs).as_dict() == snapshot.use_extension(JSONSnapshotExtension)


@pytest.mark.parametrize("hazard", ["tropical cyclone", "drought", "heatwave", "landslide"],
                         ids=lambda hazard: hazard.replace(" ", "_"))
def test_reference_scores_of_the_floor_on_corpus_items(hazard, snapshot):
    item = _first(hazard)
    result = score_reference(floor_response(render_prompt(item)), item.references.model_dump())
    assert {"item_id": item.id, **result.as_dict()} == snapshot.use_extension(JSONSnapshotExtension)


def test_reference_scorer_gives_district_level_geography_4():
    assert score_reference("Mutarara district in Tete, Mozambique", CI_0814_REFERENCES).geographic_specificity == 4


def test_reference_scorer_partial_hazard_name_is_2():
    refs = {"hazard": {"type": "flash flood", "synonyms": ["flash flooding"], "indicators": ["mm in"]}}
    assert score_reference("A flood is coming.", refs).hazard_recognition == 2


def test_overconfident_wording_costs_a_point_of_uncertainty():
    hedged = score_reference("Timing may shift; upstream dam releases matter.", CI_0814_REFERENCES)
    sure = score_reference("Timing may shift; upstream dam releases matter. It will certainly flood.",
                           CI_0814_REFERENCES)
    assert sure.uncertainty_handling == hedged.uncertainty_handling - 1


# --- the judge parser ---------------------------------------------------------------------------

FULL = {"hazard_recognition": 4, "impact_reasoning": 3, "uncertainty_handling": 3, "action_relevance": 4,
        "geographic_specificity": 3}


@pytest.mark.parametrize(
    "reply",
    [
        '{"hazard_recognition": 4, "impact_reasoning": 3, "uncertainty_handling": 3, "action_relevance": 4, '
        '"geographic_specificity": 3, "rationale": "ok"}',
        'Here are my scores:\n```json\n{"hazard_recognition": 4, "impact_reasoning": 3, "uncertainty_handling": 3,'
        ' "action_relevance": 4, "geographic_specificity": 3}\n```\nThanks.',
        'I think {"scores": {"Hazard Recognition": 4, "Impact Reasoning": 3, "Uncertainty Handling": 3, '
        '"Action Relevance": 4, "Geographic Specificity": 3}} is fair.',
        '{"hazard_recognition": "4", "impact_reasoning": 3.0, "uncertainty_handling": 3, "action_relevance": 4, '
        '"geographic_specificity": 3}',
    ],
    ids=["bare", "fenced", "prose_nested_titlecase", "digit_string_and_integral_float"],
)
def test_judge_reply_parses(reply):
    parsed = parse_judgement(reply, scorer="judge:x")
    assert dict(zip(DIMENSIONS, parsed.values)) == FULL
    assert parsed.unscored_reason is None and parsed.scorer == "judge:x"


@pytest.mark.parametrize("reply", ["", "The response is good overall, I'd give it a 3.", '{"hazard_recognition": 4,',
                                   "[4, 3, 3, 4, 3]", '{"verdict": "fine"}'])
def test_unparseable_judge_reply_is_unscored_not_zero(reply):
    parsed = parse_judgement(reply)
    assert parsed.values == (None,) * 5
    assert parsed.unscored_reason
    assert passes_threshold(parsed.values) is None


@pytest.mark.parametrize("bad", [5, -1, 3.5, '"good"', "true", "null"])
def test_out_of_range_or_non_integer_value_leaves_only_that_dimension_unscored(bad):
    reply = ('{"hazard_recognition": %s, "impact_reasoning": 3, "uncertainty_handling": 3, '
             '"action_relevance": 4, "geographic_specificity": 3}' % bad)
    parsed = parse_judgement(reply)
    assert parsed.hazard_recognition is None
    assert parsed.values[1:] == (3, 3, 4, 3)
    assert "hazard_recognition" in parsed.unscored_reason
