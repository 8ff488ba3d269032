"""``fieldeval score`` prints each headline number with the ci95 a run's report gives for the same items."""

from __future__ import annotations

import json
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from fieldeval.stats import mean_metric
from tests.conftest import TINY_ENUMS, TINY_SELECTOR


def fieldeval(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fieldeval.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def test_score_ibf_prints_the_ci95_of_each_dimension(tmp_path):
    values = [2, 3, 1, 4, 2, 2, 0, 3]
    header = "item_id\thazard_recognition\timpact_reasoning\tuncertainty_handling\taction_relevance\tgeographic_specificity\n"
    (tmp_path / "s.tsv").write_text(header + "".join(f"i{n}\t{v}\t2\t2\t2\t2\n" for n, v in enumerate(values)))
    done = fieldeval("score", "ibf", "s.tsv", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    expected = mean_metric([float(v) for v in values])["ci95"]  # what a run's report shows for these items
    assert json.loads(done.stdout)["ci95"]["hazard_recognition"] == expected
    text = fieldeval("score", "ibf", "s.tsv", cwd=tmp_path).stdout
    assert f"(ci95 {expected[0]:.2f}-{expected[1]:.2f}; unscored 0)" in text


def test_score_re_prints_the_ci95_of_each_metric(tmp_path):
    rows = [("None", "None"), ("causes", "causes"), ("causes", "None"), ("treats", "treats")] * 3
    (tmp_path / "p.tsv").write_text("gold\tresponse_text\n" + "".join(f"{g}\t{r}\n" for g, r in rows))
    result = json.loads(fieldeval("score", "re", "p.tsv", "--json", cwd=tmp_path).stdout)
    expected = mean_metric([float(g == r) for g, r in rows])["ci95"]
    assert result["ci95"]["accuracy"] == expected
    assert f"accuracy             {result['accuracy']:.4f}  (ci95 {expected[0]:.4f}-{expected[1]:.4f})" in fieldeval(
        "score", "re", "p.tsv", cwd=tmp_path).stdout


def test_score_ebs_prints_the_ci95_of_each_models_ontology_score(tmp_path):
    forest = "forest biome [ENVO:01000174]"
    rows = [("m", forest, forest), ("m", forest, "cropland biome [ENVO:01000245]"), ("m", forest, "nonsense")]
    (tmp_path / "r.tsv").write_text("model\tcase_ideal\tresponse_text\tsampleData\n"
                                    + "".join(f"{m}\t{i}\t{r}\tsoil_data\n" for m, i, r in rows))
    done = fieldeval("score", "ebs", "r.tsv", "--ontology", TINY_SELECTOR, "--enum-dir", str(TINY_ENUMS), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    import pandas as pd

    scores = pd.read_csv(tmp_path / "results_envo_scored.tsv", sep="\t")["ontology_score"].astype(float).tolist()
    lo, hi = mean_metric(scores)["ci95"]
    assert f"\n  {lo:.3f}-{hi:.3f}  m\n" in done.stdout.split("Ontology score ci95")[1]


def test_score_ebs_clusters_by_the_study_line_and_names_both_intervals(tmp_path):
    """A results table whose prompts carry a Study: line is scored as a run is: both intervals, each named, and
    equal to what a run's report gives for those items in those studies."""
    from fieldeval.stats import Design

    forest, crop = "forest biome [ENVO:01000174]", "cropland biome [ENVO:01000245]"
    answers = [forest, crop, forest, forest, "nonsense", forest, crop, forest, forest, forest, crop, forest]
    studies = ["Soil warming (AY1)", "Soil warming (AY2)", "Soil warming (AY3)", "Delta", "Delta", "Delta",
               "Peat", "Peat", "Peat", "Peat", "Lake", "Lake"]
    # the prompt's Study line on a line of its own, in a quoted TSV cell as pandas writes it
    (tmp_path / "r.tsv").write_text("model\tcase_ideal\tresponse_text\tsampleData\tcase_input\n" + "".join(
        f'm\t{forest}\t{answer}\tsoil_data\t"Predict the biome.\nStudy: {study}\nDescription: x"\n'
        for answer, study in zip(answers, studies)))
    done = fieldeval("score", "ebs", "r.tsv", "--ontology", TINY_SELECTOR, "--enum-dir", str(TINY_ENUMS), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    import pandas as pd

    scored = pd.read_csv(tmp_path / "results_envo_scored.tsv", sep="\t")
    scores = scored["ontology_score"].astype(float).tolist()
    clusters = tuple(s.split(" (")[0] for s in studies)  # "Soil warming (AY1)": one study whatever its sample code
    entry = mean_metric(scores, design=Design(clusters))
    block = done.stdout.split("Ontology score ci95")[1]
    assert (f"  {entry['ci95'][0]:.3f}-{entry['ci95'][1]:.3f}  m  on new studies (4 studies: approximate)"
            in block)
    assert (f"  {entry['ci95_within'][0]:.3f}-{entry['ci95_within'][1]:.3f}  m  on more samples from these 4 "
            "studies" in block)


def test_a_results_tables_studies_come_from_its_original_input_or_its_prompt():
    import pandas as pd

    from fieldeval.benchmarks.ebs.tables import table_studies

    df = pd.DataFrame({"case_original_input": ["{'study_name': 'Soil warming', 'sampleData': 'soil_data'}",
                                               '{"study": "Peat bog"}', None],
                       "case_input": ["x", "y", "Predict.\nStudy: Lake Erie (AY9)\nDescription: z"]})
    assert table_studies(df) == ["Soil warming", "Peat bog", "Lake Erie"]
    assert table_studies(df.iloc[:, :1]) is None  # the third row names no study: rows count as independent


@settings(max_examples=300)
@given(name=st.text(alphabet=st.sampled_from("ab '\"\\:{}"), max_size=12),
       rest=st.dictionaries(st.sampled_from(["sampleData", "study", "env"]), st.text(max_size=4), max_size=2))
def test_a_study_read_from_the_start_of_an_original_input_is_what_the_pattern_reads(name, rest):
    # upstream's str(dict) starts with the study name: that is read without the pattern when nothing is escaped
    import pandas as pd

    from fieldeval.benchmarks.ebs.tables import STUDY_FIELD, table_studies

    text = str({"study_name": name, **rest})
    found = STUDY_FIELD.search(text)
    expected = (found.group(1) or found.group(2) or "") if found else ""
    assert table_studies(pd.DataFrame({"case_original_input": [text]})) == ([expected] if expected else None)
