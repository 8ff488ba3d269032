"""MicrobioRel scoring: the normaliser, the seed's weighted F1 recipe, and the vectorised metrics."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import f1_score, precision_score, recall_score
from syrupy.extensions.json import JSONSnapshotExtension

from fieldeval.stats import resample_indices
from scorers.microbiorel import (
    RELATION_CLASSES,
    encode_labels,
    normalize_relation,
    score_relations,
    weighted_f1,
    weighted_f1_batch,
)

GOLDS = st.sampled_from(RELATION_CLASSES)
# predictions: any class, a near miss, free text or nothing
PREDS = st.one_of(st.sampled_from(RELATION_CLASSES), st.sampled_from(["none", "Increases", "bogus", ""]),
                  st.none())
PAIRS = st.lists(st.tuples(GOLDS, PREDS), min_size=1, max_size=60)


def seed_recipe(preds, golds, classes):
    """The seed's reference code, verbatim apart from counting invalid predictions as their own bucket."""
    tp = {c: 0 for c in classes}
    fp = {c: 0 for c in [*classes, "__invalid__"]}
    fn = {c: 0 for c in classes}
    support = {c: 0 for c in classes}
    for p, g in zip(preds, golds):
        p = p if p in tp else "__invalid__"
        support[g] += 1
        if p == g:
            tp[g] += 1
        else:
            fp[p] += 1
            fn[g] += 1
    total = sum(support.values())
    weighted = 0.0
    for c in classes:
        if support[c] > 0:
            prec = tp[c] / (tp[c] + fp[c]) if (tp[c] + fp[c]) > 0 else 0
            rec = tp[c] / (tp[c] + fn[c]) if (tp[c] + fn[c]) > 0 else 0
            f1_c = 2 * prec * rec / (prec + rec) if (prec + rec) > 0 else 0
            weighted += (support[c] / total) * f1_c
    return weighted


def sklearn_labels(preds):
    """Predictions as sklearn sees them: every invalid one is one label outside the classes."""
    return [p if p in RELATION_CLASSES else "__invalid__" for p in preds]


@given(PAIRS)
def test_weighted_f1_is_between_0_and_1(pairs):
    golds, preds = zip(*pairs)
    assert 0.0 <= weighted_f1(golds, preds) <= 1.0


@given(st.lists(GOLDS, min_size=1, max_size=60))
def test_weighted_f1_is_1_when_every_prediction_is_right(golds):
    assert weighted_f1(golds, golds) == 1.0


@given(PAIRS)
def test_weighted_f1_is_below_1_when_any_prediction_is_wrong(pairs):
    golds, preds = zip(*pairs)
    if any(g != p for g, p in pairs):
        assert weighted_f1(golds, preds) < 1.0


@given(PAIRS, st.randoms(use_true_random=False))
def test_weighted_f1_is_invariant_to_row_order(pairs, rng):
    shuffled = list(pairs)
    rng.shuffle(shuffled)
    assert weighted_f1(*zip(*shuffled)) == pytest.approx(weighted_f1(*zip(*pairs)), abs=1e-12)


@given(PAIRS)
def test_weighted_f1_equals_sklearn_on_labels_with_invalid_predictions(pairs):
    golds, preds = zip(*pairs)
    expected = f1_score(list(golds), sklearn_labels(preds), average="weighted", zero_division=0)
    assert weighted_f1(golds, preds) == pytest.approx(expected, abs=1e-12)


@given(PAIRS)
def test_weighted_f1_equals_the_seed_recipe(pairs):
    golds, preds = zip(*pairs)
    assert weighted_f1(golds, preds) == pytest.approx(seed_recipe(preds, golds, RELATION_CLASSES), abs=1e-12)


@given(PAIRS)
def test_all_metrics_agree_with_sklearn(pairs):
    golds, preds = list(zip(*pairs))
    golds, labels = list(golds), sklearn_labels(preds)
    scores = score_relations(golds, list(preds))
    present = sorted(set(golds))
    assert scores.weighted_precision == pytest.approx(
        precision_score(golds, labels, average="weighted", zero_division=0), abs=1e-12)
    assert scores.weighted_recall == pytest.approx(recall_score(golds, labels, average="weighted", zero_division=0))
    assert scores.macro_f1 == pytest.approx(f1_score(golds, labels, labels=present, average="macro", zero_division=0))
    assert scores.accuracy == pytest.approx(sum(g == p for g, p in zip(golds, preds)) / len(golds))
    assert scores.parse_rate == pytest.approx(sum(p in RELATION_CLASSES for p in preds) / len(preds))


def test_weighted_f1_is_not_the_f1_of_weighted_precision_and_recall():
    # the seed's pitfall: F1 per class first, then the weighted mean
    golds = ["None"] * 3 + ["causes"]
    preds = ["None", "None", "causes", "causes"]
    scores = score_relations(golds, preds)
    naive = 2 * scores.weighted_precision * scores.weighted_recall / (scores.weighted_precision + scores.weighted_recall)
    assert scores.weighted_f1 == pytest.approx(0.75 * 0.8 + 0.25 * (2 / 3))
    assert scores.weighted_f1 != pytest.approx(naive)


def test_invalid_predictions_count_as_wrong_and_lower_parse_rate():
    scores = score_relations(["None", "causes"], ["None", None])
    assert (scores.accuracy, scores.parse_rate, scores.n) == (0.5, 0.5, 2)
    assert scores.confusion_matrix["matrix"][RELATION_CLASSES.index("causes")][-1] == 1
    assert scores.confusion_matrix["columns"][-1] == "(invalid)"


def test_the_string_none_is_a_class_and_python_none_is_invalid():
    assert score_relations(["None"], ["None"]).accuracy == 1.0
    assert score_relations(["None"], [None]).accuracy == 0.0


def test_per_class_scores_cover_every_class():
    scores = score_relations(["None", "causes", "causes"], ["None", "causes", "treats"])
    assert list(scores.per_class) == list(RELATION_CLASSES)
    causes = scores.per_class["causes"]
    assert (causes.precision, causes.recall, causes.support) == (1.0, 0.5, 2)
    assert scores.per_class["treats"].support == 0


def test_gold_outside_the_classes_is_rejected():
    with pytest.raises(ValueError, match="'bogus' are not classes"):
        encode_labels(["bogus"], ["None"])


@settings(max_examples=20)
@given(PAIRS, st.integers(0, 2**32 - 1))
def test_vectorised_bootstrap_matches_a_loop_over_resamples(pairs, seed):
    golds, preds = zip(*pairs)
    codes = encode_labels(golds, preds)
    index = resample_indices(len(codes), resamples=25, seed=seed)
    looped = [weighted_f1([golds[i] for i in row], [preds[i] for i in row]) for row in index]
    assert weighted_f1_batch(codes[index]) == pytest.approx(np.array(looped), abs=1e-12)


MESSY_RESPONSES = [
    "increase",
    "  increase\n",
    "Increase.",
    "INCREASE!",
    '"increase"',
    "'increase'.",
    "`increase`",
    "\u201cincrease\u201d",
    "Relation: increase",
    "relation:increase",
    "Answer: 'increase'.",
    "Class: Answer: increase",
    '"Answer: increase"',
    "None",
    "none",
    "NONE.",
    "Answer: None",
    "None of the above",
    "No relation",
    "associated_with",
    "Associated with",
    "Associated_with;",
    "marker/mechanism",
    "Marker / Mechanism",
    "part_of?",
    "part of",
    "increases",
    "The relation is: increase",
    "Relation: increase\nBecause the paragraph says so.",
    "**increase**",
    "(increase)",
    "increase, decrease",
    "",
    "   ",
    "...",
    "Label: causes",
    "causes:",
    "Answer:",
    "Negative_correlation",
    "Physically_related_to.",
]


def test_normaliser_on_messy_responses(snapshot):
    table = [{"response": text, "prediction": normalize_relation(text)} for text in MESSY_RESPONSES]
    assert table == snapshot.use_extension(JSONSnapshotExtension)


def test_normaliser_maps_none_response_to_invalid():
    assert normalize_relation(None) is None


def test_normaliser_returns_the_canonical_spelling():
    assert normalize_relation("location_OF") == "Location_of"


# literal "None" answers, as a model writes them; the row mirrors what evals/test_microbiorel.py records
LITERAL_NONE_ANSWERS = ["None", "none", "NONE", "None.", ' "None" ', "Answer: None", "None\n"]


def test_literal_none_answer_is_the_none_class_and_its_text_is_kept(snapshot):
    # regression: the text "None" must never be confused with the Python None (invalid) nor blanked on write
    assert normalize_relation("None") == "None"
    rows = []
    for text in LITERAL_NONE_ANSWERS:
        prediction = normalize_relation(text)
        rows.append({"response_text": text, "prediction": prediction, "valid": prediction is not None,
                     "correct": prediction == "None"})
    assert all(row["response_text"] == text for row, text in zip(rows, LITERAL_NONE_ANSWERS))
    assert rows == snapshot.use_extension(JSONSnapshotExtension)
