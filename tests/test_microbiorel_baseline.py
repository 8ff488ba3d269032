"""The re-baseline reads only the prompt: parsing, masking and answer shapes (no training here)."""

from __future__ import annotations

import pytest

from fieldeval.benchmarks.microbiorel import baseline
from fieldeval.benchmarks.microbiorel.cases import Entity, RelationCase
from fieldeval.benchmarks.microbiorel.prompts import candidate_classes, classify_prompt, summary_prompt
from scorers.microbiorel import RELATION_CLASSES

TEXT = "Lactobacillus (rod) reduces IL-6 in mice. Nothing else."
CASE = RelationCase(
    case_id="pair000", test_id="pair000-x-y", annotation_id="1", text=TEXT,
    source=Entity("Lactobacillus (rod)", "Species", 0, 19), target=Entity("IL-6", "Gene", 28, 32),
    gold="decrease", filtered_labels=("decrease", "None", "affects"),
)


class FakeClassifier:
    """Stands in for the fitted pipeline: always most sure of 'increase', then 'None', then 'decrease'."""

    classes_ = ["decrease", "increase", "None"]

    def predict_proba(self, frame):
        assert list(frame.columns) == ["masked", "between", "types"]
        assert "Lactobacillus" not in frame["masked"][0]  # the entity is masked
        return [[0.2, 0.5, 0.3]]


@pytest.fixture
def fake_model(monkeypatch):
    monkeypatch.setattr(baseline, "load_model", lambda: FakeClassifier())


def test_prompt_parses_back_to_the_pair():
    pair = baseline.parse_prompt(classify_prompt(CASE, summary="Lactobacillus decrease IL-6."))
    assert pair.text == TEXT
    assert pair.entities == (("Lactobacillus (rod)", "Species", 0, 19), ("IL-6", "Gene", 28, 32))
    assert pair.classes == RELATION_CLASSES


def test_masking_matches_the_upstream_masked_text():
    assert baseline.mask_entities(TEXT, (0, 19, "Species"), (28, 32, "Gene")) == "@Species$ reduces @Gene$ in mice. Nothing else."


def test_features_hold_the_words_between_the_entities():
    views = baseline.features(TEXT, (28, 32, "Gene"), (0, 19, "Species"))
    assert views["between"] == " reduces "
    assert views["types"] == "Gene_Species from_Gene to_Species"


def test_answer_is_the_most_probable_offered_class(fake_model):
    assert baseline.predict(classify_prompt(CASE)) == "increase"
    filtered = classify_prompt(CASE, classes=candidate_classes(CASE, "filtered"))
    assert baseline.predict(filtered) == "None"


def test_summary_prompt_gets_an_entity1_relation_entity2_sentence(fake_model):
    assert baseline.predict(summary_prompt(CASE)) == "Lactobacillus (rod) increase IL-6."


def test_a_prompt_that_is_not_a_pair_gets_none():
    assert baseline.predict("What is the capital of France?") == "None"


def test_rebuilt_masked_text_equals_the_upstream_masked_csv(data_dir):
    # the baseline must see exactly what the upstream masked data shows, rebuilt from the prompt alone
    import pandas as pd

    from fieldeval.benchmarks.microbiorel.cases import load_split
    from fieldeval.data import fetch

    masked = pd.read_csv(fetch("microbiorel/masked/test.csv"), dtype=str, keep_default_na=False)
    for case, expected in list(zip(load_split("test"), masked["text"]))[:50]:
        pair = baseline.parse_prompt(classify_prompt(case))
        (_, t1, s1, e1), (_, t2, s2, e2) = pair.entities
        assert baseline.mask_entities(pair.text, (s1, e1, t1), (s2, e2, t2)) == expected


def test_registered_as_an_llm_model():
    import llm

    assert llm.get_model("re-baseline").model_id == "re-baseline"


def test_predictions_from_many_threads_raise_no_scikit_learn_warning(monkeypatch):
    # the solver pool predicts from many threads at once; scikit-learn's ColumnTransformer empties the process's
    # warning filters while one prediction runs, and a second one started meanwhile warned past pytest's capture
    # (nine times in `pytest evals -n 8`). A real pipeline of the baseline's recipe, fitted on a few pairs.
    import sys
    import threading
    import warnings

    import pandas as pd

    texts = [("soil bacteria raise nitrogen", "increase"), ("probiotics lower inflammation", "decrease"),
             ("fungi colonise roots", "Location_of"), ("bacteria raise iron uptake", "increase"),
             ("diet lowers IL-6 in mice", "decrease"), ("microbes live in soil", "Location_of")]
    frame = pd.DataFrame([{"masked": f"@A$ {t} @B$", "between": t, "types": "A_B from_A to_B"} for t, _ in texts * 2])
    model = baseline._pipeline(1.0).fit(frame, [label for _, label in texts * 2])
    monkeypatch.setattr(baseline, "load_model", lambda: model)
    prompt = classify_prompt(CASE)
    switch = sys.getswitchinterval()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        sys.setswitchinterval(1e-6)  # threads swap often: the window between two predictions is hit
        try:
            threads = [threading.Thread(target=lambda: [baseline.predict(prompt) for _ in range(25)])
                       for _ in range(16)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            sys.setswitchinterval(switch)
    assert [str(w.message)[:60] for w in seen if "sklearn" in str(w.message)] == []
