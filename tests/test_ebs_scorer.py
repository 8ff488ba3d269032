"""The env_broad_scale scorer: strict parsing, relationships, hop distances, the seed's formula."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scorers.ebs import parse_label_curie, score_ebs

FOREST = "forest biome [ENVO:01000174]"
SOIL_TEMPLATE = "soil_data"


@pytest.mark.parametrize(
    ("text", "label", "curie"),
    [
        ("forest biome [ENVO:01000174]", "forest biome", "ENVO:01000174"),
        ('  "forest biome [ENVO:01000174]"\n', "forest biome", "ENVO:01000174"),
        ("__temperate woodland biome [ENVO:01000221]", "temperate woodland biome", "ENVO:01000221"),
        ("forest biome[ENVO:01000174]", "forest biome", "ENVO:01000174"),
    ],
)
def test_parse_accepts_label_curie_after_trimming(text, label, curie):
    parsed = parse_label_curie(text)
    assert (parsed.label, parsed.curie) == (label, curie)


@pytest.mark.parametrize(
    "text",
    [
        "forest biome [ENVO:01000174] is my answer",  # prose after the CURIE
        "forest biome\n[ENVO:01000174]\nbecause of the trees",
        "forest biome [ENVO:01000174].",  # trailing punctuation
        "forest biome [ENVO:01000174] (confident)",
        "forest biome [ENVO_01000174]",  # underscore instead of colon
        "forest biome [ENVO:0100017a]",  # CURIE local id must be digits
        "forest biome",
        "[ENVO:01000174]",  # no label
        "",
    ],
)
def test_parse_rejects_anything_around_or_inside(text):
    assert parse_label_curie(text) is None


def test_prose_before_parses_as_a_label_that_fails_validity(tiny_index):
    # the strict parser cannot tell prose from a label; the label check can
    score = score_ebs("The answer is forest biome [ENVO:01000174]", FOREST, index=tiny_index, allowed=None)
    assert (score.parse_success, score.curie_label_valid, score.exact_match) == (True, False, True)


def test_relationships_and_shortest_hops(tiny_index):
    assert tiny_index.relationship("ENVO:01000174", "ENVO:01000174") == ("exact", 0)
    assert tiny_index.relationship("ENVO:01000196", "ENVO:01000174") == ("descendant", 1)
    assert tiny_index.relationship("ENVO:00000428", "ENVO:01000174") == ("ancestor", 2)
    assert tiny_index.relationship("ENVO:00000447", "ENVO:01000174") == ("unrelated", None)
    # temperate coniferous has a direct is_a to forest biome besides the 2-hop path: shortest wins
    assert tiny_index.relationship("ENVO:01000211", "ENVO:01000174") == ("descendant", 1)


def test_siblings_are_unrelated(tiny_index):
    assert tiny_index.relationship("ENVO:01000250", "ENVO:01000211") == ("unrelated", None)


@pytest.mark.parametrize(
    ("response", "template", "expected"),
    [
        ("forest biome [ENVO:01000174]", SOIL_TEMPLATE, 1.00),  # perfect
        ("coniferous forest biome [ENVO:01000196]", SOIL_TEMPLATE, 0.95),  # descendant 1 hop
        ("terrestrial biome [ENVO:00000446]", SOIL_TEMPLATE, 0.925),  # ancestor 1 hop
        ("woodland biome [ENVO:01000174]", "air_data", 0.75),  # exact, wrong label, no enum
        ("cropland biome [ENVO:01000245]", SOIL_TEMPLATE, 0.50),  # unrelated, in enum, valid
        ("I think it is a forest", SOIL_TEMPLATE, 0.0),  # parse failure
    ],
)
def test_seed_worked_examples(tiny_index, tiny_enums, response, template, expected):
    score = score_ebs(response, FOREST, index=tiny_index, allowed=tiny_enums.get(template))
    assert score.ontology_score == pytest.approx(expected)


def test_hierarchy_decay_floors_at_zero(tiny_index):
    from scorers.ebs import hierarchy_score

    assert hierarchy_score("descendant", 12) == 0.0
    assert hierarchy_score("ancestor", 7) == 0.0
    assert hierarchy_score("ancestor", 2) == pytest.approx(0.7)


def test_label_check_ignores_case_only(tiny_index):
    upper = score_ebs("FOREST BIOME [ENVO:01000174]", FOREST, index=tiny_index, allowed=None)
    wrong = score_ebs("forest [ENVO:01000174]", FOREST, index=tiny_index, allowed=None)
    unknown = score_ebs("made up biome [ENVO:07777777]", FOREST, index=tiny_index, allowed=None)
    assert (upper.curie_label_valid, wrong.curie_label_valid, unknown.curie_label_valid) == (True, False, False)


def test_prose_curie_goes_to_lenient_column_only(tiny_index, tiny_enums):
    # a CURIE inside prose is reported for analysis but never scored
    score = score_ebs("Probably forest biome [ENVO:01000174].", FOREST, index=tiny_index,
                      allowed=tiny_enums[SOIL_TEMPLATE])
    assert (score.parse_success, score.lenient_curie, score.ontology_score) == (False, "ENVO:01000174", 0.0)


def templates_list() -> list[str]:
    return ["soil_data", "water_data", "sediment_data", "plant_associated_data", "air_data",
            "host_associated_data", "misc_envs_data"]


templates = st.sampled_from(templates_list())
curies = st.sampled_from(["ENVO:00000428", "ENVO:00000446", "ENVO:01000174", "ENVO:01000196", "ENVO:01000211",
                          "ENVO:01000250", "ENVO:00002030", "ENVO:00000447", "ENVO:01000245", "ENVO:12345678"])


@settings(max_examples=300, deadline=None)
@given(text=st.text(), template=templates, truth=curies)
def test_ontology_score_is_bounded_for_any_text(tiny_index, tiny_enums, text, template, truth):
    score = score_ebs(text, f"x [{truth}]", index=tiny_index, allowed=tiny_enums.get(template))
    assert 0.0 <= score.ontology_score <= 1.0


@settings(max_examples=300, deadline=None)
@given(label=st.text(min_size=1).filter(lambda s: s.strip() == s and s), curie=curies, template=templates,
       truth=curies)
def test_ontology_score_is_bounded_for_well_formed_answers(tiny_index, tiny_enums, label, curie, template, truth):
    score = score_ebs(f"{label} [{curie}]", f"t [{truth}]", index=tiny_index, allowed=tiny_enums.get(template))
    assert 0.0 <= score.ontology_score <= 1.0


@settings(max_examples=100, deadline=None)
@given(curie=st.sampled_from(sorted({"ENVO:00000446", "ENVO:01000174", "ENVO:01000196", "ENVO:01000211",
                                     "ENVO:01000245"})),
       case=st.sampled_from(["lower", "upper", "title"]))
def test_exact_valid_label_in_enum_scores_one(tiny_index, tiny_enums, curie, case):
    label = getattr(tiny_index.label(curie), case)()
    score = score_ebs(f"{label} [{curie}]", f"{tiny_index.label(curie)} [{curie}]", index=tiny_index,
                      allowed=tiny_enums[SOIL_TEMPLATE])
    assert score.ontology_score == 1.0


@settings(max_examples=300, deadline=None)
@given(text=st.text().filter(lambda s: parse_label_curie(s) is None), template=templates)
def test_parse_failure_scores_zero(tiny_index, tiny_enums, text, template):
    score = score_ebs(text, FOREST, index=tiny_index, allowed=tiny_enums.get(template))
    assert (score.parse_success, score.ontology_score) == (False, 0.0)


@settings(max_examples=100, deadline=None)
@given(text=st.text().filter(lambda s: parse_label_curie(s) is None), template=templates)
def test_parse_failure_leaves_label_validity_and_enum_blank_not_false(tiny_index, tiny_enums, text, template):
    # upstream NMDC leaves both blank on a parse failure; False would count against the rates
    score = score_ebs(text, FOREST, index=tiny_index, allowed=tiny_enums.get(template))
    assert (score.curie_label_valid, score.in_template_enum) == (None, None)
    assert (score.enum_score, score.ontology_score) == (0.0, 0.0)


answers = st.one_of(st.text(max_size=30), st.builds(lambda label, curie: f"{label} [{curie}]",
                                                   st.sampled_from(["forest biome", "Forest Biome", "biome", "x"]),
                                                   curies))
ideals = st.one_of(st.builds(lambda curie: f"t [{curie}]", curies), st.just("not a term"))


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.tuples(answers, ideals, st.sampled_from([*templates_list(), "no_such_template"])),
                     max_size=40))
def test_batch_scores_equal_row_by_row_scores(tiny_index, tiny_enums, rows):
    """score_ebs_batch (what `fieldeval score ebs` uses) gives every field of score_ebs, repeats included."""
    import dataclasses

    from scorers.ebs import score_ebs_batch

    rows = rows + rows[: len(rows) // 2]  # recurring responses, ideals and pairs hit the batch's caches
    batch = score_ebs_batch([(r, i, tiny_enums.get(t)) for r, i, t in rows], index=tiny_index)
    expected = [dataclasses.astuple(score_ebs(r, i, index=tiny_index, allowed=tiny_enums.get(t))) for r, i, t in rows]
    assert batch == expected
    assert [tuple(map(type, b)) for b in batch] == [tuple(map(type, e)) for e in expected]
