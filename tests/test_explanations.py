"""Each benchmark's item explanation agrees with the score it explains (rows made by the real scorers)."""

from __future__ import annotations

import dataclasses
import json
import re
from collections import deque

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fieldeval.benchmark import benchmarks
from fieldeval.benchmarks.ebs.explain import explain_ebs
from fieldeval.benchmarks.ibf.corpus import load_corpus
from fieldeval.benchmarks.ibf.explain import explain_ibf
from fieldeval.benchmarks.microbiorel.explain import explain_microbiorel
from fieldeval.store.items import explanation
from scorers.ebs import score_ebs
from scorers.ibf import DIMENSIONS, judge_rationale, parse_judgement, score_reference
from scorers.ibf_lexicon import ACTION_WORDS, HAZARD_DESCRIPTORS, HEDGE_WORDS, IMPACT_OBJECTS
from scorers.microbiorel import RELATION_CLASSES, normalize_relation

FOREST = "forest biome [ENVO:01000174]"
TINY_TERMS = {  # fixtures/ontology/tiny.obo, written out: CURIE -> (label, is_a parents)
    "ENVO:00000428": ("biome", ()),
    "ENVO:00000446": ("terrestrial biome", ("ENVO:00000428",)),
    "ENVO:01000174": ("forest biome", ("ENVO:00000446",)),
    "ENVO:01000196": ("coniferous forest biome", ("ENVO:01000174",)),
    "ENVO:01000211": ("temperate coniferous forest biome", ("ENVO:01000196", "ENVO:01000174")),
    "ENVO:01000250": ("subpolar coniferous forest biome", ("ENVO:01000196",)),
    "ENVO:00002030": ("aquatic biome", ("ENVO:00000428",)),
    "ENVO:00000447": ("marine biome", ("ENVO:00002030",)),
    "ENVO:01000245": ("cropland biome", ("ENVO:00000446",)),
}
UNKNOWN_CURIE = "ENVO:07777777"


def _hops_up(start: str, target: str) -> int | None:
    """The shortest is_a path from ``start`` up to ``target`` in :data:`TINY_TERMS` (None: not above it)."""
    queue, seen = deque([(start, 0)]), {start}
    while queue:
        node, dist = queue.popleft()
        if node == target:
            return dist
        for parent in TINY_TERMS.get(node, ("", ()))[1]:
            if parent not in seen:
                seen.add(parent)
                queue.append((parent, dist + 1))
    return None


def _ebs_row(response: str, ideal: str, template: str, index, enums) -> dict:
    """A stored EBS row as evals/test_ebs.py records it (the keys the explanation reads)."""
    score = score_ebs(response, ideal, index=index, allowed=enums.get(template))
    return {"sampleData": template, "case_ideal": ideal, "response_text": response, "truth_rule": "curie",
            "truth_conflict": False, **dataclasses.asdict(score)}


# --- EBS ----------------------------------------------------------------------------------------

CURIES = st.sampled_from([*TINY_TERMS, UNKNOWN_CURIE])
LABELS = st.text(alphabet="abcdefghij ", min_size=1, max_size=12).map(str.strip).filter(bool)


@st.composite
def ebs_predictions(draw) -> tuple[str, str, str | None, bool]:
    """(response, predicted CURIE, stated label, whether it is strict ``label [CURIE]``)."""
    curie = draw(CURIES)
    label = draw(st.one_of(st.just(TINY_TERMS.get(curie, ("moon biome",))[0]), LABELS))
    label = draw(st.sampled_from([label, label.upper()]))
    shape = draw(st.sampled_from(["strict", "quoted", "prose", "empty"]))
    if shape == "strict":
        return f"{label} [{curie}]", curie, label, True
    if shape == "quoted":
        return f'"__{label} [{curie}]"', curie, label, True
    if shape == "prose":
        return f"It is most likely {label} ({curie}).", curie, label, False
    return "", curie, None, False


@given(prediction=ebs_predictions(), truth=st.sampled_from(sorted(TINY_TERMS)),
       template=st.sampled_from(["soil_data", "water_data", "air_data"]))
def test_ebs_explanation_agrees_with_the_relationship_and_the_score(prediction, truth, template, tiny_index,
                                                                    tiny_enums):
    response, curie, label, strict = prediction
    ideal = f"{TINY_TERMS[truth][0]} [{truth}]"
    row = _ebs_row(response, ideal, template, tiny_index, tiny_enums)
    text = explain_ebs(row)
    if not strict:
        assert "not a strict 'label [CURIE]' value" in text and "Ontology score 0." in text
        assert "ancestor" not in text and "the truth itself" not in text
        return
    up, down = _hops_up(truth, curie), _hops_up(curie, truth)
    truth_term = f"{TINY_TERMS[truth][0]!r} [{truth}]"
    if curie == truth:
        expected, hierarchy = "the truth itself", 1.0
    elif up is not None:
        expected, hierarchy = f"an ancestor of the truth {truth_term} at {up} hop", 1 - 0.15 * up
    elif down is not None:
        expected, hierarchy = f"a descendant of the truth {truth_term} at {down} hop", 1 - 0.1 * down
    else:
        expected, hierarchy = "unrelated to the truth", 0.0
    assert expected in text
    assert ("ancestor" in text) == (up is not None and curie != truth)
    assert ("the truth itself" in text) == row["exact_match"]
    assert f"hierarchy {round(max(hierarchy, 0.0), 4):g};" in text
    valid = curie in TINY_TERMS and TINY_TERMS[curie][0].casefold() == label.casefold()
    assert ("label matches its CURIE" in text) == valid
    allowed = tiny_enums.get(template)
    enum = 0.5 if allowed is None else float(curie in allowed)
    if allowed is None:
        assert f"{template} has no value set" in text
    else:
        assert (f"; in the {template} value set" in text) == (curie in allowed)
    total = 0.1 + 0.1 * valid + 0.5 * max(hierarchy, 0.0) + 0.3 * enum
    assert f"Ontology score {round(total, 4):g}." in text


def test_ebs_ancestor_explanation_names_the_hops_hierarchy_label_and_value_set():
    row = {"parse_success": True, "pred_label": "terrestrial biome", "pred_curie": "ENVO:00000446",
           "truth_label": "forest biome", "truth_curie": "ENVO:01000174", "relationship": "ancestor",
           "hop_distance": 1, "hierarchy_score": 0.85, "curie_label_valid": True, "in_template_enum": True,
           "enum_score": 1.0, "exact_match": False, "ontology_score": 0.925, "sampleData": "soil_data"}
    text = explain_ebs(row)
    for phrase in ("'terrestrial biome' [ENVO:00000446]", "an ancestor of the truth 'forest biome' [ENVO:01000174]",
                   "at 1 hop:", "hierarchy 0.85", "label matches its CURIE", "in the soil_data value set",
                   "Ontology score 0.925"):
        assert phrase in text


def test_ebs_parse_failure_names_the_curie_its_prose_holds():
    row = {"parse_success": False, "lenient_curie": "ENVO:01000174", "ontology_score": 0.0}
    text = explain_ebs(row)
    assert "not a strict 'label [CURIE]' value" in text and "ENVO:01000174, which is never scored" in text


def test_ebs_truth_conflict_says_what_the_case_was_scored_against():
    row = {"parse_success": True, "pred_label": "forest biome", "pred_curie": "ENVO:01000174",
           "truth_curie": "ENVO:01000174", "relationship": "exact", "hierarchy_score": 1.0,
           "curie_label_valid": True, "in_template_enum": None, "ontology_score": 0.85, "truth_conflict": True,
           "truth_rule": "label", "case_ideal": "forest biome [ENVO:00000446]", "sampleData": "air_data"}
    assert "scored against the term its label names" in explain_ebs(row)
    assert "its CURIE (upstream's rule)" in explain_ebs({**row, "truth_rule": "curie"})


# --- MicrobioRel ----------------------------------------------------------------------------------

CLASSES = st.sampled_from(RELATION_CLASSES)


@st.composite
def wrapped_answers(draw) -> tuple[str, str, str, str]:
    """(answer, the class inside it, what comes before the class, what comes after it)."""
    name = draw(CLASSES)
    shown = draw(st.sampled_from([name, name.lower(), name.upper()]))
    quote = draw(st.sampled_from(["", '"', "'", "\u201c"]))
    close = {"\u201c": "\u201d"}.get(quote, quote)
    before = draw(st.sampled_from(["", " ", "Relation: ", "answer:", "Class : Answer: "])) + quote
    after = close + draw(st.sampled_from(["", ".", "!", " .", "\n"]))
    return before + shown + after, name, before, after


@given(answer=wrapped_answers(), gold=CLASSES)
def test_microbiorel_explanation_reads_the_class_and_agrees_with_correct(answer, gold):
    text, name, before, after = answer
    prediction = normalize_relation(text)
    row = {"response_text": text, "gold": gold, "prediction": prediction, "valid": prediction is not None,
           "correct": prediction == gold}
    said = explain_microbiorel(row)
    assert prediction == name
    assert f"read as {name!r}" in said
    assert ("Correct:" in said) == (name == gold)
    assert ("Wrong:" in said) == (name != gold)
    assert f"the gold class is {gold!r}" in said
    stripped = [part.strip() for part in (before, after) if part.strip()]
    if stripped:
        assert f"stripped {' and '.join(map(repr, stripped))}" in said
    else:
        assert "stripped" not in said


@given(name=CLASSES, filler=st.sampled_from(["It ", "The relation is ", "maybe "]), gold=CLASSES)
def test_microbiorel_unreadable_answer_is_never_correct(name, filler, gold):
    text = filler + name
    row = {"response_text": text, "gold": gold, "prediction": normalize_relation(text), "valid": False,
           "correct": False}
    said = explain_microbiorel(row)
    assert "No class could be read" in said and "valid False" in said
    assert "Correct" not in said and "read as" not in said


def test_microbiorel_explanation_of_a_prefixed_answer():
    row = {"response_text": "Relation: Increase.", "gold": "decrease", "prediction": "increase", "valid": True,
           "correct": False}
    said = explain_microbiorel(row)
    for phrase in ("'Relation: Increase.' was read as 'increase'", "stripped 'Relation:' and '.'",
                   "matched ignoring case", "Wrong: the gold class is 'decrease'"):
        assert phrase in said


def test_microbiorel_the_none_class_is_not_an_invalid_answer():
    # "None" is a class (a string); only the Python value None is an invalid prediction
    row = {"response_text": "None", "gold": "None", "prediction": "None", "valid": True, "correct": True}
    assert explain_microbiorel(row).startswith("The answer 'None' was read as 'None'. Correct")


# --- IBF -------------------------------------------------------------------------------------------

IBF_ITEM = load_corpus().items[0]
IBF_REFS = IBF_ITEM.references.model_dump()
_HAZARD, _IMPACTS = IBF_REFS["hazard"], IBF_REFS["impacts"]
_PHRASES = {  # each dimension's reference phrases, from the item's notes
    "hazard_recognition": [_HAZARD["type"], *_HAZARD["synonyms"], *_HAZARD["indicators"]],
    "impact_reasoning": [p for kind in ("societal", "agricultural", "infrastructure") for p in _IMPACTS[kind]],
    "uncertainty_handling": IBF_REFS["uncertainties"],
    "action_relevance": IBF_REFS["actions"],
    "geographic_specificity": [IBF_REFS["geography"]["country"], *IBF_REFS["geography"]["admin1"],
                               *IBF_REFS["geography"]["admin2"], *IBF_REFS["geography"]["features"]],
}
_PIECES = sorted({*(p for phrases in _PHRASES.values() for p in phrases), *HEDGE_WORDS[:8], *ACTION_WORDS[:6],
                  *HAZARD_DESCRIPTORS["riverine flood"][:4], *HAZARD_DESCRIPTORS["tropical cyclone"][:4],
                  *IMPACT_OBJECTS["societal"][:3], "swept away", "will certainly", "20%", "between 2 and 4 m",
                  "the", "and", "tomorrow", "Mozambique"})
IBF_RESPONSES = st.lists(st.sampled_from(_PIECES), max_size=14).map(" ".join)
_DIMENSION = re.compile(r"(\w+) (\d|unscored) \(")


def _ibf_row(response: str) -> dict:
    """A stored IBF row as evals/test_ibf.py records it, through JSON as the store keeps it."""
    score = score_reference(response, IBF_REFS)
    return json.loads(json.dumps({"response_text": response, **score.as_dict(), "evidence": score.evidence}))


def _response_words(response: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", response.lower().replace("³", "3"))


@given(response=IBF_RESPONSES)
def test_ibf_explanation_states_each_row_score(response):
    row = _ibf_row(response)
    stated = dict(_DIMENSION.findall(explain_ibf(row)))
    assert stated == {name: str(row[name]) for name in DIMENSIONS}


@given(response=IBF_RESPONSES)
def test_ibf_evidence_found_occurs_in_the_response_and_splits_the_references(response):
    row = _ibf_row(response)
    words = _response_words(response)
    for name in DIMENSIONS:
        evidence = row["evidence"][name]
        assert sorted(evidence["found"] + evidence["missing"]) == sorted(_PHRASES[name])
        for phrase in evidence["found"]:
            assert any(w.startswith(p[:6]) for p in _response_words(phrase) for w in words), phrase
        for cue in evidence.get("cues", []):
            assert all(any(w.startswith(root) for w in words) for root in cue.split()), cue
        for quoted in evidence.get("quantified", []) + evidence.get("overconfident", []):
            assert quoted in response


@given(response=IBF_RESPONSES)
def test_ibf_evidence_accounts_for_the_action_and_uncertainty_scores(response):
    # the rubric (score_reference's docstring): actions 1 + matched (at most 4), else 1 for a generic word;
    # uncertainty 0 unless acknowledged, else 1 + quantified + key uncertainties (at most 2) - overconfident
    row = _ibf_row(response)
    actions, uncertainty = row["evidence"]["action_relevance"], row["evidence"]["uncertainty_handling"]
    expected = min(1 + len(actions["found"]), 4) if actions["found"] else int(bool(actions.get("cues")))
    assert row["action_relevance"] == expected
    points = (1 + ("quantified" in uncertainty) + min(len(uncertainty["found"]), 2)
              - ("overconfident" in uncertainty))
    acknowledged = uncertainty["found"] or uncertainty.get("cues")
    assert row["uncertainty_handling"] == (max(0, min(points, 4)) if acknowledged else 0)


def test_ibf_reference_explanation_names_found_and_missing_phrases():
    text = explain_ibf(_ibf_row("Flood warning for Kurigram, Bangladesh: pre-position relief supplies; "
                                "livestock losses may be high."))
    for phrase in ("geographic_specificity 4 (names 'Kurigram', 'Bangladesh'", "misses",
                   "action_relevance 2 (names 'pre-position relief supplies'",
                   "impact_reasoning 2 (names 'livestock losses'", "counted 'may'"):
        assert phrase in text


def test_ibf_explanation_says_when_another_hazard_caps_the_impacts():
    text = explain_ibf(_ibf_row("A cyclone with howling winds makes landfall; homes swept away."))
    assert "points rather at 'tropical cyclone'" in text and "at most 1 as the answer is about another hazard" in text


def test_ibf_scored_table_columns_do_not_carry_the_evidence():
    assert "evidence" not in score_reference("A flood.", IBF_REFS).as_dict()


def test_ibf_row_without_evidence_still_states_its_scores():
    row = {"scorer": "reference", **dict.fromkeys(DIMENSIONS, 2)}
    assert "records no evidence" in explain_ibf(row) and "action_relevance 2" in explain_ibf(row)


@given(rationale=st.text(max_size=400), fenced=st.booleans(),
       scores=st.lists(st.integers(0, 4), min_size=5, max_size=5))
def test_ibf_judged_explanation_gives_the_judge_rationale_and_its_scores(rationale, fenced, scores):
    reply = json.dumps({**dict(zip(DIMENSIONS, scores)), "rationale": rationale})
    reply = f"Scores:\n```json\n{reply}\n```" if fenced else reply
    row = {"scorer": "judge:m", "judge_response": reply, **parse_judgement(reply, scorer="judge:m").as_dict()}
    text = explain_ibf(row)
    assert all(f"{name} {score}" in text for name, score in zip(DIMENSIONS, scores))
    if rationale.strip() and len(rationale.strip()) <= 300:
        assert repr(rationale.strip()) in text
    elif not rationale.strip():
        assert "gives no rationale" in text


def test_judge_rationale_is_read_from_the_scores_object_in_prose():
    reply = 'I judge: {"scores": {"Hazard Recognition": 3}, "rationale": " Names the gauge. "} done'
    assert judge_rationale(reply) == "Names the gauge."
    assert judge_rationale('{"verdict": "fine", "rationale": "x"}') is None


# --- wiring ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "explain"), [("ebs", explain_ebs), ("microbiorel", explain_microbiorel),
                                               ("ibf", explain_ibf)])
def test_each_benchmark_declares_its_explanation(name, explain):
    declared = benchmarks()[name].items.explain  # named lazily (module:attr), imported at its first call
    assert getattr(declared, "target", declared) is explain


def test_the_store_explains_scored_items_only():
    row = {"response_text": "None", "gold": "None", "prediction": "None", "valid": True, "correct": True}
    assert "Correct" in explanation({"benchmark": "microbiorel", "status": "scored", "row": row})
    assert explanation({"benchmark": "microbiorel", "status": "errored", "row": {}}) is None
