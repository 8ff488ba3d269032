"""EBS beside upstream's score: what an answer missed and what it asserted falsely, and siblings told apart.

Checked by hand on the tiny ontology (its information contents worked out below from its structure) and
against the CAFA evaluator (``cafaeval``) on a hand-built ontology: the same graph and the same weights give
the same remaining uncertainty and misinformation.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scorers.ebs import score_ebs

FOREST = "forest biome [ENVO:01000174]"
N_TERMS = 10  # the tiny ontology's terms, its obsolete one included


def seco(descendants: int) -> float:
    """Seco et al.'s intrinsic information content of a term with that many descendants among N_TERMS."""
    return 1 - math.log(1 + descendants) / math.log(N_TERMS)


# the tiny ontology: biome > terrestrial > forest > coniferous > {temperate, subpolar}; terrestrial > cropland;
# biome > aquatic > marine
IC = {"biome": seco(8), "terrestrial": seco(5), "forest": seco(3), "coniferous": seco(2), "cropland": seco(0),
      "aquatic": seco(1), "marine": seco(0), "subpolar": seco(0)}


@pytest.mark.parametrize(("answer", "detail", "missed", "false", "counts"), [
    (FOREST, "exact", 0.0, 0.0, (0, 0)),
    ("biome [ENVO:00000428]", "ancestor", IC["forest"] + IC["terrestrial"], 0.0, (2, 0)),
    ("subpolar coniferous forest biome [ENVO:01000250]", "descendant", 0.0, IC["subpolar"] + IC["coniferous"],
     (0, 2)),
    ("cropland biome [ENVO:01000245]", "sibling", IC["forest"], IC["cropland"], (1, 1)),
    ("marine biome [ENVO:00000447]", "unrelated", IC["forest"] + IC["terrestrial"], IC["marine"] + IC["aquatic"],
     (2, 2)),
    ("moon biome [ENVO:07777777]", "unrelated", IC["forest"] + IC["terrestrial"] + IC["biome"], 1.0, (3, 1)),
    ("it is a forest", None, IC["forest"] + IC["terrestrial"] + IC["biome"], 0.0, (3, 0)),
])
def test_missed_and_false_information_by_hand(tiny_index, answer, detail, missed, false, counts):
    score = score_ebs(answer, FOREST, index=tiny_index, allowed=None)
    assert score.relationship_detail == detail
    assert score.missed_information == pytest.approx(missed, abs=1e-6)
    assert score.false_information == pytest.approx(false, abs=1e-6)
    assert (score.missed_terms, score.false_terms) == counts


def test_a_sibling_misses_and_asserts_less_than_an_unrelated_term_and_upstream_scores_them_alike(tiny_index):
    # upstream: "hot water" and "basalt" score the same against "cold water"
    sibling = score_ebs("cropland biome [ENVO:01000245]", FOREST, index=tiny_index, allowed=None)
    unrelated = score_ebs("marine biome [ENVO:00000447]", FOREST, index=tiny_index, allowed=None)
    assert sibling.relationship == unrelated.relationship == "unrelated"
    assert sibling.hierarchy_score == unrelated.hierarchy_score == 0.0
    assert sibling.missed_information < unrelated.missed_information
    assert sibling.false_information < unrelated.false_information


def test_the_batch_scorer_gives_the_new_columns_as_the_row_scorer_does(tiny_index):
    from scorers.ebs import EbsScore, score_ebs_batch

    answers = [FOREST, "biome [ENVO:00000428]", "cropland biome [ENVO:01000245]", "nonsense", "nonsense", FOREST]
    batch = score_ebs_batch([(a, FOREST, None) for a in answers], index=tiny_index)
    assert [EbsScore(*fields) for fields in batch] == [score_ebs(a, FOREST, index=tiny_index, allowed=None)
                                                       for a in answers]


OBO = """format-version: 1.2
ontology: handmade

[Term]
id: T:0000001
name: root
namespace: biome

[Term]
id: T:0000002
name: land
namespace: biome
is_a: T:0000001 ! root

[Term]
id: T:0000003
name: water
namespace: biome
is_a: T:0000001 ! root

[Term]
id: T:0000004
name: forest
namespace: biome
is_a: T:0000002 ! land

[Term]
id: T:0000005
name: grassland
namespace: biome
is_a: T:0000002 ! land

[Term]
id: T:0000006
name: conifer forest
namespace: biome
is_a: T:0000004 ! forest

[Term]
id: T:0000007
name: mixed forest
namespace: biome
is_a: T:0000004 ! forest
is_a: T:0000005 ! grassland

[Term]
id: T:0000008
name: lake
namespace: biome
is_a: T:0000003 ! water
"""
# (answer, truth): exact, ancestor, descendant, sibling, unrelated, two parents, and an answer that says nothing
PAIRS = [("T:0000004", "T:0000004"), ("T:0000002", "T:0000006"), ("T:0000007", "T:0000004"),
         ("T:0000005", "T:0000004"), ("T:0000008", "T:0000006"), ("T:0000007", "T:0000006"), (None, "T:0000007")]


def test_missed_and_false_information_are_cafa_evaluators_remaining_uncertainty_and_misinformation(tmp_path):
    cafaeval = pytest.importorskip("cafaeval.evaluation")
    from fieldeval.ontology import load_index

    (tmp_path / "handmade.obo").write_text(OBO)
    index = load_index(f"simpleobo:{tmp_path / 'handmade.obo'}")
    ic = index.information_content
    (tmp_path / "ia.tsv").write_text("".join(f"{term}\t{value!r}\n" for term, value in ic.items()))
    (tmp_path / "truth.tsv").write_text("".join(f"case{n}\t{truth}\n" for n, (_, truth) in enumerate(PAIRS)))
    (tmp_path / "pred").mkdir()
    (tmp_path / "pred" / "answers.tsv").write_text("".join(f"case{n}\t{answer}\t1.0\n"
                                                         for n, (answer, _) in enumerate(PAIRS) if answer))
    df, _ = cafaeval.cafa_eval(str(tmp_path / "handmade.obo"), str(tmp_path / "pred"), str(tmp_path / "truth.tsv"),
                               ia=str(tmp_path / "ia.tsv"), n_cpu=1)
    at_one = df.reset_index().iloc[-1]  # every answer holds with score 1.0 at any threshold
    ours = [score_ebs(f"x [{answer}]" if answer else "no answer", f"x [{truth}]", index=index, allowed=None)
            for answer, truth in PAIRS]
    assert sum(s.missed_information for s in ours) / len(ours) == pytest.approx(at_one["ru_w"], abs=1e-5)
    assert sum(s.false_information for s in ours) / len(ours) == pytest.approx(at_one["mi_w"], abs=1e-5)
    assert sum(s.missed_terms for s in ours) / len(ours) == pytest.approx(at_one["ru"], abs=1e-9)
    assert sum(s.false_terms for s in ours) / len(ours) == pytest.approx(at_one["mi"], abs=1e-9)


def test_a_run_reports_both_as_means_with_both_intervals_and_counts_siblings(tiny_index, tiny_enums):
    from fieldeval.benchmarks.ebs.tables import aggregate, score_row

    answers = ["cropland biome [ENVO:01000245]", "marine biome [ENVO:00000447]", FOREST, "biome [ENVO:00000428]"]
    rows = [{**score_row(a, FOREST, "soil_data", index=tiny_index, enums=tiny_enums), "stratum": "forest biome",
             "study": f"s{n % 2}"} for n, a in enumerate(answers)]
    out = aggregate(rows, seed=0, resamples=200)
    expected = (IC["forest"] + (IC["forest"] + IC["terrestrial"]) + 0 + (IC["forest"] + IC["terrestrial"])) / 4
    assert out["missed_information"]["value"] == pytest.approx(expected, abs=1e-6)
    assert out["false_information"]["value"] == pytest.approx((IC["cropland"] + IC["marine"] + IC["aquatic"]) / 4,
                                                              abs=1e-6)
    low, high = out["missed_information"]["ci95"]
    assert 0 <= low <= out["missed_information"]["value"] <= high
    assert out["relationship_detail_counts"] == {"exact": 1, "descendant": 0, "ancestor": 1, "sibling": 1,
                                                 "unrelated": 1, "parse_failure": 0}
    assert out["relationship_counts"]["unrelated"] == 2  # upstream's four values, unchanged


def test_the_item_explanation_says_sibling_and_what_was_missed(tiny_index, tiny_enums):
    from fieldeval.benchmarks.ebs.explain import explain_ebs
    from fieldeval.benchmarks.ebs.tables import score_row

    row = score_row("cropland biome [ENVO:01000245]", FOREST, "soil_data", index=tiny_index, enums=tiny_enums)
    text = explain_ebs(row)
    assert "but its sibling (an is_a parent in common)" in text
    assert f"missed information {round(IC['forest'], 4):g} (1 term the truth implies)" in text
    assert f"false information {round(IC['cropland'], 4):g} (1 term the truth does not imply)" in text


@pytest.mark.parametrize(("answer", "mismatch"), [
    (FOREST, "none"),
    ("Forest Biome [ENVO:01000174]", "none"),  # case alone: upstream's curie_label_valid holds too
    ("forest-biome [ENVO:01000174]", "wording"),  # punctuation
    ("forest [ENVO:01000174]", "wording"),  # without the trailing "biome"
    ("woodland biome [ENVO:01000174]", "wording"),  # the tiny ontology's synonym of forest biome
    ("marine biome [ENVO:01000174]", "other_term"),  # another term's label on this CURIE: it asserts something false
    ("moon dust [ENVO:01000174]", "unrecognized"),
    ("moon biome [ENVO:07777777]", None),  # the ontology lacks the CURIE: nothing to compare
    ("forest, surely", None),  # no answer to compare
])
def test_label_mismatches_in_two_kinds(tiny_index, answer, mismatch):
    # one curie_label_valid column scored a rewording and another term's label the same
    score = score_ebs(answer, FOREST, index=tiny_index, allowed=None)
    assert score.label_mismatch == mismatch
    if mismatch is not None:
        assert score.curie_label_valid == (mismatch == "none")  # upstream's column, unchanged


def _context(tiny_index, tiny_enums, rule, extra=None):
    from fieldeval.benchmarks.ebs import EbsContext

    return EbsContext(None, tiny_index, tiny_enums, truth_rule=rule, extra_references=extra or {})


def _case(ideal, case_id="case000"):
    from fieldeval.benchmarks.ebs.suite import EbsCase

    return EbsCase(case_id, "forest biome", "soil_data", "Predict.", ideal)


def test_closest_scores_each_answer_against_its_nearest_reference_and_says_which(tiny_index, tiny_enums):
    # a case with two acceptable biomes: forest (the suite's) and cropland (added by the user)
    extra = {"case000": ("cropland biome [ENVO:01000245]",)}
    closest = _context(tiny_index, tiny_enums, "closest", extra)
    upstream = _context(tiny_index, tiny_enums, "curie", extra)
    case = _case(FOREST)
    score, matched, _ = closest.score(case, "cropland biome [ENVO:01000245]")
    assert (matched, score.exact_match, score.ontology_score) == ("cropland biome [ENVO:01000245]", True, 1.0)
    score, matched, _ = closest.score(case, "coniferous forest biome [ENVO:01000196]")
    assert (matched, score.relationship) == (FOREST, "descendant")  # nearer forest than cropland
    score, matched, _ = upstream.score(case, "cropland biome [ENVO:01000245]")
    assert (matched, score.exact_match) == (FOREST, False)  # upstream's rule: the suite's truth alone


def test_closest_takes_both_terms_of_a_truth_whose_label_names_another_term(tiny_index, tiny_enums):
    # the label says forest biome, the CURIE is cropland's: an answer of either is right
    case = _case("forest biome [ENVO:01000245]")
    closest = _context(tiny_index, tiny_enums, "closest")
    for answer, matched in [(FOREST, FOREST), ("cropland biome [ENVO:01000245]", "forest biome [ENVO:01000245]")]:
        score, found, conflict = closest.score(case, answer)
        assert (found, score.exact_match, conflict) == (matched, True, True)


def test_references_that_do_not_parse_or_without_closest_are_one_line(tmp_path):
    from fieldeval.benchmarks.ebs import EbsOptions, load
    from fieldeval.errors import UsageError
    from tests.conftest import TINY_ENUMS, TINY_SELECTOR

    path = tmp_path / "refs.tsv"
    path.write_text("case_id\treference\ncase000\tcropland biome [ENVO:01000245]\ncase001\tjust words\n")
    with pytest.raises(UsageError, match=r"line 3: 'just words' is not 'label \[CURIE\]'"):
        load(EbsOptions(ontology=TINY_SELECTOR, enum_dir=str(TINY_ENUMS), truth="closest", references=str(path)))
    with pytest.raises(UsageError, match="scores only with --ebs-truth closest"):
        load(EbsOptions(ontology=TINY_SELECTOR, enum_dir=str(TINY_ENUMS), references=str(path)))


def test_an_ontology_that_cannot_be_read_makes_its_checks_unknown_not_wrong(tiny_enums):
    # upstream now reports a check it cannot make as unknown, counted apart, never as a failure
    from fieldeval.benchmarks.ebs.tables import aggregate, score_row, summary_notes
    from fieldeval.errors import UsageError
    from fieldeval.ontology import OntologyUnreadable, unreadable_index
    from scorers.ebs import score_ebs_batch

    index = unreadable_index("simpleobo:envo.obo", UsageError("damaged"))
    answers = [FOREST, "marine biome [ENVO:00000447]", "no idea"]
    rows = [{**score_row(a, FOREST, "soil_data", index=index, enums=tiny_enums), "stratum": "forest biome"}
            for a in answers]
    exact, other, unparsed = rows
    assert (exact["ontology_status"], exact["exact_match"], exact["in_template_enum"]) == ("unknown", True, True)
    for row in (exact, other):
        assert row["ontology_score"] is None and row["hierarchy_score"] is None and row["relationship"] is None
        assert row["curie_label_valid"] is None and row["missed_information"] is None
    assert (unparsed["ontology_status"], unparsed["ontology_score"]) == (None, 0.0)  # a parse failure is a failure
    assert [list(r) for r in score_ebs_batch([(a, FOREST, tiny_enums["soil_data"]) for a in answers], index=index)] \
        == [[row[k] for k in exact if k != "stratum"] for row in rows]
    out = aggregate(rows, seed=0, resamples=100)
    assert out["ontology_unknown"] == 2
    assert out["ontology_score"]["value"] == 0.0  # over the one item it could score (the parse failure), not 3
    [line] = [l for l in summary_notes({"m": out}) if "could not be read" in l]
    assert "2 answer(s) are unknown, counted apart" in line
    assert issubclass(OntologyUnreadable, UsageError)


def test_a_damaged_ontology_file_lets_the_run_go_on_and_a_missing_one_is_one_line(tmp_path, tiny_enums):
    from fieldeval.benchmarks.ebs import EbsOptions, load
    from fieldeval.errors import UsageError
    from tests.conftest import TINY_ENUMS

    damaged = tmp_path / "envo.obo"
    damaged.write_bytes(bytes(range(256)) * 64)
    suite = tmp_path / "suite.yaml"
    suite.write_text("name: s\ntemplates: {t: {system: s, prompt: '{input}'}}\n"
                     "cases: [{input: 'q', ideal: 'forest biome [ENVO:01000174]', tags: [soil_data]}]\n")
    context = load(EbsOptions(ontology=f"simpleobo:{damaged}", enum_dir=str(TINY_ENUMS), suite=str(suite)))
    assert context.index.unreadable
    score, _, _ = context.score(context.suite.cases[0], FOREST)
    assert (score.ontology_status, score.ontology_score, score.exact_match) == ("unknown", None, True)
    with pytest.raises(UsageError, match="no such file"):
        load(EbsOptions(ontology=f"simpleobo:{tmp_path / 'nowhere.obo'}", enum_dir=str(TINY_ENUMS), suite=str(suite)))


@pytest.mark.parametrize(("value", "template", "valid", "why"), [
    ("alpine tundra biome [ENVO:01001505]", "soil_data", True, None),  # in EnvBroadScaleSoilEnum
    ("  alpine tundra biome [ENVO:01001505]\n", "soil_data", True, None),  # as the portal trims it
    ("marine biome [ENVO:00000447]", "soil_data", False, "not one of the 52 values of EnvBroadScaleSoilEnum"),
    ("marine biome [ENVO:00000447]", "air_data", True, None),  # no value set for air: the pattern alone
    ("forest biome (ENVO:01000174)", "air_data", False, "not 'label [ENVO:id]'"),
    ("forest biome [ENVO:123]", "misc_envs_data", False, "not 'label [ENVO:id]'"),  # an id of 3 digits
    ("forest biome [ENVO:01000174] or maybe cropland", "soil_data", False, "not 'label [ENVO:id]'"),
    ("", "water_data", False, "not 'label [ENVO:id]'"),
])
def test_an_answer_is_validated_against_its_templates_submission_schema_slot(value, template, valid, why):
    # upstream's validate_via_linkml() returns None: any answer passed, and any_of never enforced the enum
    from fieldeval.benchmarks.ebs.schema import slot_validator

    found, message = slot_validator().validate(value, template)
    assert found is valid
    assert (message is None) if why is None else (why in message)


ENVO_LIKE = st.one_of(
    st.text(max_size=40),
    st.builds(lambda label, digits, space: f"{label}{space}[ENVO:{digits}]", st.text(max_size=30),
              st.text("0123456789٠١٢", min_size=0, max_size=9), st.sampled_from([" ", "", "  ", "\t", "\n"])),
)


@settings(max_examples=300)
@given(value=ENVO_LIKE, template=st.sampled_from(["soil_data", "air_data", "misc_envs_data"]))
def test_the_pattern_shortcut_gives_linkmls_own_verdict(value, template):
    # a value the slot's pattern matches skips LinkML's call; LinkML must find nothing wrong with it, and every
    # value the pattern rejects is LinkML's to judge
    from fieldeval.benchmarks.ebs.schema import slot_validator

    validator = slot_validator()
    pattern = validator._for(template)[3]
    assert (pattern.search(value) is not None) == (validator.linkml_problems(value, template) == [])


def test_closest_under_an_ontology_that_cannot_be_read_takes_the_case_s_own_truth_or_an_exact_one(tiny_enums):
    from fieldeval.errors import UsageError
    from fieldeval.ontology import unreadable_index

    closest = _context(unreadable_index("simpleobo:envo.obo", UsageError("damaged")), tiny_enums, "closest",
                       {"case000": ("cropland biome [ENVO:01000245]",)})
    score, matched, _ = closest.score(_case(FOREST), "marine biome [ENVO:00000447]")
    assert (matched, score.ontology_status, score.ontology_score) == (FOREST, "unknown", None)
    score, matched, _ = closest.score(_case(FOREST), "cropland biome [ENVO:01000245]")
    assert (matched, score.exact_match) == ("cropland biome [ENVO:01000245]", True)
