"""The gold-data audit: each defect of the fixtures found once, clean fixtures finding nothing, the command, and
scoring against corrected truth (``--ebs-truth``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fieldeval.cli import main
from tests.conftest import ROOT, TINY_ENUMS, TINY_SELECTOR

AUDIT = ROOT / "fixtures" / "audit"


def _ebs_context(suite: Path, truth: str = "curie"):
    from fieldeval.benchmarks.ebs import BENCHMARK, EbsOptions

    return BENCHMARK.load(EbsOptions(ontology=TINY_SELECTOR, enum_dir=str(TINY_ENUMS), suite=str(suite), truth=truth))


def _found(findings) -> dict[str, tuple[str, ...]]:
    kinds = [f.kind for f in findings]
    assert len(kinds) == len(set(kinds))  # one finding per kind
    assert all(f.count == len(f.cases) for f in findings)
    return {f.kind: f.cases for f in findings}


def test_each_ebs_defect_is_found_once_on_its_own_cases():
    from fieldeval.benchmarks.ebs import BENCHMARK

    found = _found(BENCHMARK.audit(_ebs_context(AUDIT / "ebs-defects.yaml")))
    assert found == {
        "truth_curie_missing": ("case000",),
        "truth_curie_obsolete": ("case001",),
        "truth_label_mismatch": ("case002",),
        "truth_outside_value_set": ("case003",),
        "conflicting_truths": ("case004", "case005"),
        "answer_in_prompt": ("case006",),
        "truth_unparsable": ("case007",),
    }


def test_label_mismatch_names_the_term_the_label_names():
    from fieldeval.benchmarks.ebs import BENCHMARK

    (mismatch,) = [f for f in BENCHMARK.audit(_ebs_context(AUDIT / "ebs-defects.yaml"))
                   if f.kind == "truth_label_mismatch"]
    assert "ENVO:01000174" in mismatch.message  # "forest biome" names ENVO:01000174, not the truth's ENVO:01000196
    assert "\n" not in mismatch.message


def test_a_clean_ebs_suite_has_no_findings():
    from fieldeval.benchmarks.ebs import BENCHMARK

    # its one prompt lists the truth among the allowed values: that is the prompt's design, not a leak
    assert list(BENCHMARK.audit(_ebs_context(AUDIT / "ebs-clean.yaml"))) == []


def _microbiorel_findings(monkeypatch, folder: Path):
    from fieldeval.benchmarks import microbiorel
    from fieldeval.benchmarks.microbiorel import cases

    monkeypatch.setattr(cases, "fetch", lambda name: folder / Path(name).name)
    bench = microbiorel.BENCHMARK
    return bench.audit(bench.load(microbiorel.MicrobioRelOptions()))


def test_each_microbiorel_defect_is_found_once(monkeypatch):
    found = _found(_microbiorel_findings(monkeypatch, AUDIT / "microbiorel" / "defects"))
    assert found == {
        "paragraph_in_other_split": ("pair000",),
        "class_with_few_items": ("pair005",),  # "causes": one test item
        "gold_outside_filtered_labels": ("pair004",),
    }


def test_a_clean_microbiorel_split_has_no_findings(monkeypatch):
    assert list(_microbiorel_findings(monkeypatch, AUDIT / "microbiorel" / "clean")) == []


def _ibf_findings(corpus: Path):
    from fieldeval.benchmarks.ibf import BENCHMARK, IbfOptions

    return BENCHMARK.audit(BENCHMARK.load(IbfOptions(corpus=str(corpus))))


def test_each_ibf_defect_is_found_once():
    assert _found(_ibf_findings(AUDIT / "ibf-defects.jsonl")) == {
        "hazard_with_few_items": ("audit_05",),  # the one heatwave item
        "duplicate_question": ("audit_00", "audit_01"),
        "item_without_reference": ("audit_02",),  # its actions are stop words only
    }


def test_a_clean_ibf_corpus_has_no_findings():
    assert list(_ibf_findings(AUDIT / "ibf-clean.jsonl")) == []



def test_thin_groups_list_their_cases_in_order_and_name_the_fewest_first():
    from fieldeval.benchmarks.findings import thin_groups

    pairs = [("c0", "flood"), ("c1", "dzud"), ("c2", "flood"), ("c3", "cyclone"), ("c4", "flood"), ("c5", "dzud")]
    thin = thin_groups(pairs, 3)
    assert (thin.groups, thin.counts, thin.cases) == (3, {"dzud": 2, "cyclone": 1}, ("c1", "c3", "c5"))
    assert thin.named == "cyclone (1), dzud (2)"
    assert thin_groups(pairs, 1) is None

def test_audit_command_exits_1_with_strict_only_when_there_are_findings(capsys):
    defects, clean = str(AUDIT / "ibf-defects.jsonl"), str(AUDIT / "ibf-clean.jsonl")
    assert main(["audit", "ibf", "--ibf-corpus", defects]) == 0
    assert main(["audit", "ibf", "--ibf-corpus", defects, "--strict"]) == 1
    assert main(["audit", "ibf", "--ibf-corpus", clean, "--strict"]) == 0


def test_audit_command_prints_each_finding_as_json(capsys):
    assert main(["audit", "ebs", "--json", "--ebs-suite", str(AUDIT / "ebs-defects.yaml"),
                 "--ontology", TINY_SELECTOR, "--enum-dir", str(TINY_ENUMS)]) == 0
    findings = json.loads(capsys.readouterr().out)
    assert len(findings) == 7
    assert all(set(f) == {"kind", "message", "count", "cases"} for f in findings)
    assert sum(f["count"] for f in findings) == 8


def test_audit_command_names_a_missing_suite_in_one_line(capsys, tmp_path):
    assert main(["audit", "ebs", "--ebs-suite", str(tmp_path / "none.yaml")]) == 2
    err = capsys.readouterr().err
    assert "--ebs-suite" in err and err.count("\n") == 1


def test_curie_rule_scores_the_truth_as_written_and_label_rule_the_term_its_label_names():
    from scorers.ebs import score_ebs

    curie, label = _ebs_context(AUDIT / "ebs-defects.yaml"), _ebs_context(AUDIT / "ebs-defects.yaml", "label")
    case = curie.suite.cases[2]  # forest biome [ENVO:01000196]: the label names ENVO:01000174
    assert curie.truth(case) == (case.ideal, True)
    assert label.truth(case) == ("forest biome [ENVO:01000174]", True)
    answer = "forest biome [ENVO:01000174]"
    # ENVO:01000174 is one is_a hop above ENVO:01000196: an ancestor by the CURIE, exact by the label
    assert score_ebs(answer, curie.truth(case)[0], index=curie.index, allowed=None).relationship == "ancestor"
    assert score_ebs(answer, label.truth(case)[0], index=label.index, allowed=None).exact_match


def test_a_case_without_conflict_is_scored_alike_under_both_rules():
    curie, label = _ebs_context(AUDIT / "ebs-clean.yaml"), _ebs_context(AUDIT / "ebs-clean.yaml", "label")
    for case in curie.suite.cases:
        assert curie.truth(case) == label.truth(case) == (case.ideal, False)


@pytest.mark.slow
def test_the_pinned_ebs_suite_has_one_mislabelled_truth(data_dir):
    from fieldeval.benchmarks.ebs import BENCHMARK, EbsOptions

    found = _found(BENCHMARK.audit(BENCHMARK.load(EbsOptions())))
    # oceanic epipelagic zone biome [ENVO:01000036]: ENVO's label of that CURIE is the mesopelagic zone's
    assert found == {"truth_label_mismatch": tuple(f"case{n:03d}" for n in range(30, 40))}


def _truth_project(pytester: pytest.Pytester) -> pytest.Pytester:
    import yaml

    from tests.ebs_project import SUITE, _case, make_project

    project = make_project(pytester)
    suite = {**SUITE, "cases": [
        # the fake answers coniferous forest biome [ENVO:01000196]; "forest biome" names ENVO:01000174
        _case("Oregon", "soil_data", "forest biome [ENVO:01000196]"),
        _case("Iowa", "soil_data", "cropland biome [ENVO:01000245]"),  # the fake's answer, exactly
    ]}
    (project.path / "suite.yaml").write_text(yaml.safe_dump(suite))
    return project


@pytest.mark.slow  # end to end, in subprocesses: once in CI (-m slow)
def test_a_run_reports_its_findings_and_scores_by_the_rule_it_was_given(pytester, capsys):
    from tests.ebs_project import run

    project = _truth_project(pytester)
    store = str(project.path / "runs.db")
    result, curie = run(project, "--store", store)
    assert curie["evals"]["audit"]["ebs"] == [{**curie["evals"]["audit"]["ebs"][0], "kind": "truth_label_mismatch",
                                               "count": 1, "cases": ["case000"]}]
    assert "`fieldeval audit ebs`" in result.stdout.str()
    assert curie["evals"]["benchmarks"]["ebs"]["fake-ebs"]["ontology_score"]["value"] == pytest.approx(1.0)
    truth_table = (project.path / "reports" / "ebs" / "results_truth.tsv").read_text().splitlines()
    assert {line.split("\t")[1]: line.split("\t")[3:5] for line in truth_table[1:]} == {
        "case000": ["curie", "True"], "case001": ["curie", "False"]}

    _, label = run(project, "--store", store, "--ebs-truth", "label")
    # ENVO:01000196 is one hop below the label's ENVO:01000174: 0.1 + 0.1 + 0.5 * 0.9 + 0.3 = 0.95, beside 1.0
    assert label["evals"]["benchmarks"]["ebs"]["fake-ebs"]["ontology_score"]["value"] == pytest.approx(0.975)

    runs = [curie["evals"]["run_id"], label["evals"]["run_id"]]
    capsys.readouterr()
    assert main(["runs", "compare", *runs, "--store", store]) == 2
    assert "--ebs-truth" in capsys.readouterr().err
    assert main(["runs", "compare", *runs, "--store", store, "--allow-mixed-rules", "--json"]) == 0


OBSOLETE_AFTER_BUILD = '''
import json, sys
from fieldeval.ontology import load_index, obsolete_terms
if sys.argv[2] == "build":
    load_index(sys.argv[1])
else:
    found = sorted(obsolete_terms(sys.argv[1]))
    print(json.dumps({"found": found, "oaklib": "oaklib" in sys.modules}))
'''


def test_the_obsolete_terms_come_with_the_index_from_one_load_of_the_ontology(tmp_path):
    # a machine's first run parsed the ontology twice: once for the index, again for the audit at the session's end
    from oaklib import get_adapter

    env = {**os.environ, "FIELDEVAL_CACHE_DIR": str(tmp_path / "cache")}
    subprocess.run([sys.executable, "-c", OBSOLETE_AFTER_BUILD, TINY_SELECTOR, "build"], env=env, check=True)
    read = subprocess.run([sys.executable, "-c", OBSOLETE_AFTER_BUILD, TINY_SELECTOR, "read"], env=env, check=True,
                          capture_output=True, text=True)
    seen = json.loads(read.stdout)
    assert seen["found"] == sorted(set(get_adapter(TINY_SELECTOR).obsoletes())) != []
    assert seen["oaklib"] is False


@settings(max_examples=400)
@given(text=st.text(alphabet=st.sampled_from("abAB -_\nKkSs\u212a\u017f\u0130i"), max_size=30),
       label=st.text(alphabet=st.sampled_from("abAB -Ks\u212a\u017f"), min_size=1, max_size=5))
def test_a_prompt_names_its_answer_exactly_when_the_whole_term_regex_finds_it(text, label):
    # the audit rules most prompts out by a substring search before the regex; it must never rule one out wrongly
    # (the alphabet holds the Kelvin sign and the long s, which match k and s when case is ignored)
    from fieldeval.benchmarks.ebs.audit import _names_term

    expected = re.search(rf"(?<![\w-]){re.escape(label)}(?![\w-])", text, flags=re.IGNORECASE) is not None
    assert _names_term(text, label) is expected


def test_an_ontology_whose_adapter_cannot_list_obsoletes_still_gives_an_index(tmp_path, monkeypatch):
    # the obsolete terms come with the index's build; an adapter without them must not cost the run its index
    import oaklib

    from fieldeval import ontology

    real = oaklib.get_adapter

    class NoObsoletes:
        def __init__(self, adapter):
            self._adapter = adapter

        def __getattr__(self, name):
            return getattr(self._adapter, name)

        def obsoletes(self):
            raise NotImplementedError("no obsoletes here")

    monkeypatch.setattr(oaklib, "get_adapter", lambda selector: NoObsoletes(real(selector)))
    monkeypatch.setattr(ontology, "_loaded", {})
    monkeypatch.setenv("FIELDEVAL_CACHE_DIR", str(tmp_path))
    index = ontology.load_index(TINY_SELECTOR)
    assert index.label("ENVO:01000174") == "forest biome"
    assert not list((tmp_path / "index").glob("obsolete-*.json"))
