"""The audit of an env_broad_scale suite's gold data against the ontology and the value sets it is scored with."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from fieldeval.benchmark import Finding
from scorers.ebs import parse_label_curie

if TYPE_CHECKING:
    from fieldeval.benchmarks.ebs import EbsContext

ALLOWED_SECTION = "Allowed env_broad_scale values for"  # the value-set block every generated prompt may end with
SHOWN = 3  # distinct values named in a finding's message


def _named(values: Iterable[str]) -> str:
    distinct = list(dict.fromkeys(values))
    shown = "; ".join(distinct[:SHOWN])
    return shown + (f"; and {len(distinct) - SHOWN} more" if len(distinct) > SHOWN else "")


def _finding(kind: str, cases: Sequence[str], message: str) -> Finding:
    return Finding(kind, f"{len(cases)} case{'s' if len(cases) != 1 else ''}: {message}", len(cases), tuple(cases))


def _without_allowed_values(prompt: str) -> str:
    return prompt.split(ALLOWED_SECTION, 1)[0]


def _names_term(text: str, label: str) -> bool:
    """Whether ``text`` names ``label`` as a whole term, ignoring case. In ASCII text, where ignoring case is
    lower-casing, a text without the label's lower case anywhere cannot: most prompts are ruled out by one
    substring search instead of a regular expression's scan."""
    if text.isascii() and label.isascii() and label.lower() not in text.lower():
        return False
    return re.search(rf"(?<![\w-]){re.escape(label)}(?![\w-])", text, flags=re.IGNORECASE) is not None


def audit(context: EbsContext) -> list[Finding]:
    """The suite's gold-data findings: truths missing from or obsolete in the ontology, truth labels that are not
    their CURIE's, truths outside their template's value set, prompts with different truths, prompts that name
    their own answer."""
    from fieldeval.benchmarks.ebs.truth import label_names
    from fieldeval.ontology import obsolete_terms

    index = context.index
    if index.unreadable is not None:  # nothing to check the truths against: no finding is better than false ones
        return []
    obsolete = obsolete_terms(context.ontology)
    names = label_names(index)
    found: dict[str, list[tuple[str, str]]] = defaultdict(list)  # kind -> (case id, what)
    truths_of_prompt: dict[str, dict[str, list[str]]] = defaultdict(dict)
    for case in context.suite.cases:
        truths_of_prompt[case.prompt].setdefault(case.ideal, []).append(case.case_id)
        truth = parse_label_curie(case.ideal)
        if truth is None:
            found["truth_unparsable"].append((case.case_id, repr(case.ideal)))
            continue
        label = index.label(truth.curie)
        if label is None:
            found["truth_curie_missing"].append((case.case_id, truth.curie))
        elif truth.curie in obsolete:
            found["truth_curie_obsolete"].append((case.case_id, f"{truth.curie} ({label})"))
        elif label.casefold() != truth.label.casefold():
            other = names.get(truth.label.casefold())
            names_what = f"the label names {other}" if other else "the label names no term"
            found["truth_label_mismatch"].append(
                (case.case_id, f"{case.ideal} is {label!r} in the ontology, {names_what}"))
        allowed = context.enums.get(case.template)
        if allowed is not None and truth.curie not in allowed:
            found["truth_outside_value_set"].append((case.case_id, f"{truth.curie} for {case.template}"))
        if _names_term(_without_allowed_values(case.prompt), truth.label):
            found["answer_in_prompt"].append((case.case_id, truth.label))
    for truths in truths_of_prompt.values():
        if len(truths) > 1:
            what = " vs ".join(truths)
            found["conflicting_truths"] += [(case_id, what) for ids in truths.values() for case_id in ids]
    version = index.version
    why = {
        "truth_unparsable": "the truth is not 'label [CURIE]' ({}); every answer to it scores as unrelated",
        "truth_curie_missing": f"the truth CURIE is not in {version} ({{}}); no answer can match it in the hierarchy",
        "truth_curie_obsolete": f"the truth CURIE is obsolete in {version} ({{}}); a model naming the live "
                                "term is scored wrong",
        "truth_label_mismatch": "the truth label is not its CURIE's label ({}); scored by CURIE, an answer with the "
                                "truth's label is marked wrong (`--ebs-truth label` scores against the label's term)",
        "truth_outside_value_set": "the truth is outside its template's value set ({}); a model that keeps to the "
                                   "allowed values cannot match it",
        "conflicting_truths": "the same prompt has different truths ({}); no answer can match all of them",
        "answer_in_prompt": "the prompt names its own answer outside the allowed values ({}); the case tests "
                            "copying, not inference",
    }
    order = {kind: position for position, kind in enumerate(why)}
    return [_finding(kind, list(dict.fromkeys(case_id for case_id, _ in hits)),
                     why[kind].format(_named(what for _, what in hits)))
            for kind, hits in sorted(found.items(), key=lambda item: order[item[0]])]
