"""The IBF corpus: its size and spread, and one-line errors for bad items."""

from __future__ import annotations

import json

import pytest

from fieldeval.benchmarks.ibf.baseline import floor_response
from fieldeval.benchmarks.ibf.corpus import load_corpus
from fieldeval.benchmarks.ibf.prompts import render_prompt
from fieldeval.errors import UsageError


def _write(tmp_path, items):
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join(i if isinstance(i, str) else json.dumps(i) for i in items) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def good_item() -> dict:
    return load_corpus().items[0].model_dump()


def test_default_corpus_has_60_items_over_many_hazards_and_regions():
    corpus = load_corpus()
    assert corpus.version == "ibf-v1.0"
    assert len(corpus.items) >= 60
    hazards = {i.hazard for i in corpus.items}
    assert {"riverine flood", "flash flood", "tropical cyclone", "storm surge", "drought", "heatwave",
            "cold wave", "landslide"} <= hazards
    assert {"South Asia", "Southeast Asia", "East Africa", "Southern Africa", "Latin America", "Pacific"} <= {
        i.region for i in corpus.items}
    assert len({i.id for i in corpus.items}) == len(corpus.items)


def test_prompt_never_shows_the_references():
    item = load_corpus().items[0]
    prompt = render_prompt(item)
    assert item.context.alert in prompt and item.question in prompt
    assert item.references.geography.admin2[0] not in prompt


def test_floor_restates_the_alert_and_place_only():
    item = load_corpus().items[1]
    answer = floor_response(render_prompt(item))
    assert item.context.location in answer and item.context.alert in answer


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (["references", "geography", "admin2"], [], "references.geography.admin2"),
        (["context", "lead_time"], "soon", "context.lead_time"),
        (["references", "hazard", "indicators"], [""], "references.hazard.indicators.0"),
        (["question"], "", "question"),
    ],
)
def test_bad_item_is_one_line_naming_item_and_field(tmp_path, good_item, path, value, field):
    bad = json.loads(json.dumps(good_item))
    target = bad
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(UsageError) as error:
        load_corpus(_write(tmp_path, [good_item | {"id": "ok_1"}, bad | {"id": "bad_7"}]))
    message = str(error.value)
    assert "item bad_7" in message and f"field {field}" in message and "\n" not in message


def test_unknown_field_is_rejected(tmp_path, good_item):
    with pytest.raises(UsageError, match=r"item x1: field severity"):
        load_corpus(_write(tmp_path, [good_item | {"id": "x1", "severity": "high"}]))


def test_line_that_is_not_json_names_the_line(tmp_path, good_item):
    with pytest.raises(UsageError, match=r"line 2: not JSON"):
        load_corpus(_write(tmp_path, [good_item, "{oops"]))


def test_duplicate_id_is_rejected(tmp_path, good_item):
    with pytest.raises(UsageError, match=r"item ibf_0001: field id: duplicated"):
        load_corpus(_write(tmp_path, [good_item, good_item]))


def test_unknown_corpus_version_lists_the_known_ones():
    with pytest.raises(UsageError, match=r"--corpus-version ibf-v9: no such corpus; choose one of ibf-v1.0"):
        load_corpus(version="ibf-v9")


def test_corpus_version_filters_a_user_corpus(tmp_path, good_item):
    path = _write(tmp_path, [good_item, good_item | {"id": "other", "corpus_version": "ibf-v2.0"}])
    assert [i.id for i in load_corpus(path, "ibf-v2.0").items] == ["other"]
