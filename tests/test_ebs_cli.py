"""``fieldeval score ebs`` and ``fieldeval generate ebs`` as a user runs them."""

from __future__ import annotations

import csv
import subprocess
import sys

import pandas as pd
import pytest
import yaml

from tests.conftest import TINY_ENUMS, TINY_SELECTOR

FOREST = "forest biome [ENVO:01000174]"
# the seed's score table, one row per worked example
WORKED = [
    ("perfect", "forest biome [ENVO:01000174]", "soil_data", 1.00),
    ("descendant_1", "coniferous forest biome [ENVO:01000196]", "soil_data", 0.95),
    ("ancestor_1", "terrestrial biome [ENVO:00000446]", "soil_data", 0.925),
    ("wrong_label_no_enum", "woodland biome [ENVO:01000174]", "air_data", 0.75),
    ("unrelated_in_enum", "cropland biome [ENVO:01000245]", "soil_data", 0.50),
    ("parse_failure", "a forest, I think", "soil_data", 0.00),
]


def fieldeval(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fieldeval.cli", *args], capture_output=True, text=True)


def write_tsv(path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]), delimiter="\t")
        writer.writeheader()
        writer.writerows(rows)


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_score_ebs_reproduces_the_seed_score_table(tmp_path):
    rows = [{"model": "m", "case_id": name, "case_ideal": FOREST, "response_text": response, "sampleData": template}
            for name, response, template, _ in WORKED]
    write_tsv(tmp_path / "results.tsv", rows)
    result = fieldeval("score", "ebs", str(tmp_path / "results.tsv"), "--ontology", TINY_SELECTOR,
                       "--enum-dir", str(TINY_ENUMS))
    assert result.returncode == 0, result.stderr
    scored = pd.read_csv(tmp_path / "results_envo_scored.tsv", sep="\t")
    assert list(scored["ontology_score"]) == pytest.approx([expected for *_, expected in WORKED])
    assert list(scored.columns[:5]) == ["model", "case_id", "case_ideal", "response_text", "sampleData"]
    for column in ["parse_success", "pred_curie", "pred_label", "truth_curie", "truth_label", "curie_label_valid",
                   "exact_match", "relationship", "hop_distance", "in_template_enum", "ontology_score",
                   "response_time_s", "prompt_tokens", "completion_tokens", "est_cost_usd"]:
        assert column in scored.columns
    assert "Model ranking" in result.stdout and "Relationship breakdown" in result.stdout


def test_score_ebs_reads_template_from_case_original_input(tmp_path):
    rows = [{"model": "m", "case_ideal": FOREST, "response_text": "forest biome [ENVO:01000174]",
             "case_original_input": "{'study_name': 'x', 'sampleData': 'soil_data'}"}]
    write_tsv(tmp_path / "results.tsv", rows)
    out = tmp_path / "out"
    result = fieldeval("score", "ebs", str(tmp_path / "results.tsv"), "-o", str(out), "--ontology", TINY_SELECTOR,
                       "--enum-dir", str(TINY_ENUMS))
    assert result.returncode == 0, result.stderr
    scored = pd.read_csv(out / "results_envo_scored.tsv", sep="\t")
    assert bool(scored.loc[0, "in_template_enum"]) and scored.loc[0, "ontology_score"] == 1.0


def test_score_ebs_missing_columns_is_one_line_exit_2(tmp_path):
    write_tsv(tmp_path / "results.tsv", [{"model": "m", "response_text": "x"}])
    result = fieldeval("score", "ebs", str(tmp_path / "results.tsv"), "--ontology", TINY_SELECTOR)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "case_ideal" in result.stderr and "sampleData" in result.stderr


def test_score_ebs_missing_file_is_exit_2(tmp_path):
    result = fieldeval("score", "ebs", str(tmp_path / "nope.tsv"))
    assert result.returncode == 2 and "nope.tsv" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_bad_ontology_selector_is_exit_2(tmp_path):
    write_tsv(tmp_path / "results.tsv", [{"model": "m", "case_ideal": FOREST, "response_text": FOREST,
                                          "sampleData": "soil_data"}])
    result = fieldeval("score", "ebs", str(tmp_path / "results.tsv"), "--ontology", "simpleobo:/no/such.obo")
    assert result.returncode == 2 and "--ontology" in result.stderr and "Traceback" not in result.stderr


def _source_rows() -> list[dict]:
    rows = []
    for n in range(12):
        rows.append({"study_name": f"study {n}", "description": "d" * 600, "notes": "", "sampleData": "soil_data",
                     "env_local_scale": "farm [ENVO:00000078]", "env_medium": "soil [ENVO:00001998]",
                     "geo_loc_name": "USA: Iowa", "depth": str(n), "analysis_type": "metagenomics",
                     "env_broad_scale": "__cropland biome [ENVO:01000245]", "ecosystem": "SECRET-GOLD-PATH"})
    rows.append(dict(rows[0]))  # a duplicate on inputs plus target
    for n in range(3):
        rows.append({**rows[0], "depth": f"x{n}", "env_broad_scale": "forest biome [ENVO:01000174]"})
    rows.append({**rows[0], "depth": "empty", "env_broad_scale": "  "})
    return rows


def test_generate_ebs_follows_the_upstream_rules(tmp_path):
    write_tsv(tmp_path / "source.tsv", _source_rows())
    out = tmp_path / "suite.yaml"
    result = fieldeval("generate", "ebs", str(tmp_path / "source.tsv"), "-o", str(out), "--per-category", "5",
                       "--min-pool", "4", "--seed", "7", "--enum-dir", str(TINY_ENUMS))
    assert result.returncode == 0, result.stderr
    suite = yaml.safe_load(out.read_text())
    cases = suite["cases"]
    assert len(cases) == 5  # forest has only 3 unique rows < min pool 4; empty target dropped
    assert {c["ideal"] for c in cases} == {"cropland biome [ENVO:01000245]"}  # leading underscores stripped
    prompt = cases[0]["input"]
    assert "SECRET-GOLD-PATH" not in prompt
    assert "Description: " + "d" * 497 + "...\n" in prompt
    assert "Allowed env_broad_scale values for soil_data:\n  - coniferous forest biome [ENVO:01000196]" in prompt
    assert "12  included  __cropland biome [ENVO:01000245]" in result.stdout


def test_generate_ebs_is_reproducible_with_a_seed(tmp_path):
    write_tsv(tmp_path / "source.tsv", _source_rows())
    texts = []
    for name in ["a.yaml", "b.yaml"]:
        fieldeval("generate", "ebs", str(tmp_path / "source.tsv"), "-o", str(tmp_path / name), "--per-category", "3",
                  "--min-pool", "1", "--enum-dir", str(TINY_ENUMS))
        texts.append((tmp_path / name).read_text())
    assert texts[0] == texts[1]


def test_generate_ebs_missing_columns_is_exit_2(tmp_path):
    write_tsv(tmp_path / "source.tsv", [{"study_name": "x", "env_broad_scale": "y"}])
    result = fieldeval("generate", "ebs", str(tmp_path / "source.tsv"), "-o", str(tmp_path / "s.yaml"))
    assert result.returncode == 2 and "env_local_scale" in result.stderr
