"""enum_data/ is generated from nmdc-submission-schema: a schema bump shows as a diff here."""

from __future__ import annotations

from fieldeval.benchmarks.ebs.enums import default_enum_dir, load_enums, write_enums


def test_enum_files_match_a_fresh_generation(tmp_path):
    written = write_enums(tmp_path)
    for path in written:
        committed = default_enum_dir() / path.name
        assert committed.read_text() == path.read_text(), f"{path.name} differs: run `fieldeval enums`"


def test_enum_sizes_match_the_seed():
    sizes = {template: len(curies) for template, curies in load_enums().items()}
    assert sizes == {"soil_data": 52, "water_data": 56, "sediment_data": 15, "plant_associated_data": 72}
