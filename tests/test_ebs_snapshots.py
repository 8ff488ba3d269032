"""Snapshots of scored rows for canned responses: every relationship, label validity and enum case."""

from __future__ import annotations

import dataclasses

import pytest
from syrupy.extensions.json import JSONSnapshotExtension

from scorers.ebs import score_ebs

FOREST = "forest biome [ENVO:01000174]"
CANNED = {
    "exact_valid_in_enum": ("forest biome [ENVO:01000174]", "soil_data"),
    "exact_wrong_label_no_enum": ("woodland biome [ENVO:01000174]", "air_data"),
    "descendant_1_hop": ("coniferous forest biome [ENVO:01000196]", "soil_data"),
    "descendant_2_hops_not_in_enum": ("subpolar coniferous forest biome [ENVO:01000250]", "soil_data"),
    "ancestor_2_hops_not_in_enum": ("biome [ENVO:00000428]", "soil_data"),
    "unrelated_in_water_enum": ("marine biome [ENVO:00000447]", "water_data"),
    "unknown_curie": ("moon biome [ENVO:07777777]", "soil_data"),
    "quoted_underscored": ('"__forest biome [ENVO:01000174]"', "soil_data"),
    "prose_parse_failure": ("It is most likely forest biome (ENVO:01000174).", "soil_data"),
    "empty": ("", "misc_envs_data"),
}


@pytest.fixture
def snapshot_json(snapshot):
    return snapshot.use_extension(JSONSnapshotExtension)


@pytest.mark.parametrize("name", sorted(CANNED))
def test_scored_row(name, tiny_index, tiny_enums, snapshot_json):
    response, template = CANNED[name]
    score = score_ebs(response, FOREST, index=tiny_index, allowed=tiny_enums.get(template))
    assert {"response_text": response, "sampleData": template, **dataclasses.asdict(score)} == snapshot_json


@pytest.mark.parametrize("name", sorted(CANNED))
def test_a_score_s_columns_are_its_fields_in_order(name, tiny_index, tiny_enums):
    # the row and the scored table take score.columns(): dataclasses.asdict's values and order, without its copy
    response, template = CANNED[name]
    score = score_ebs(response, FOREST, index=tiny_index, allowed=tiny_enums.get(template))
    expected = dataclasses.asdict(score)
    assert list(score.columns().items()) == list(expected.items())
    assert list(expected) == [field.name for field in dataclasses.fields(score)]
