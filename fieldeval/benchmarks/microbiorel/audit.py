"""The audit of MicrobioRel's gold data: paragraphs shared across splits, thin classes, gold outside the allowed labels."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from fieldeval.benchmark import Finding
from fieldeval.benchmarks.findings import thin_groups
from fieldeval.benchmarks.microbiorel.cases import RelationCase, load_split

if TYPE_CHECKING:
    from fieldeval.benchmarks.microbiorel import MicrobioRelContext

MIN_CLASS_ITEMS = 5  # a class with fewer test items has no F1 worth reading


def _paragraph(text: str) -> str:
    return " ".join(text.split())


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}{'es' if word.endswith('s') else 's'}"


def audit_splits(test: Sequence[RelationCase], others: Mapping[str, Sequence[RelationCase]]) -> list[Finding]:
    """The findings of a test split against the other splits (``{"train": ..., "dev": ...}``)."""
    findings = []
    seen = {_paragraph(case.text): split for split, cases in others.items() for case in cases}
    shared = [case for case in test if _paragraph(case.text) in seen]
    if shared:
        paragraphs = {_paragraph(case.text) for case in shared}
        splits = sorted({seen[p] for p in paragraphs})
        findings.append(Finding(
            "paragraph_in_other_split",
            f"{_plural(len(shared), 'test pair')} ({_plural(len(paragraphs), 'paragraph')} of "
            f"{len({_paragraph(c.text) for c in test})}) share their paragraph with the {' or '.join(splits)} split; "
            "a model trained there has read the test text",
            len(shared), tuple(case.case_id for case in shared)))
    thin = thin_groups([(case.case_id, case.gold) for case in test], MIN_CLASS_ITEMS)
    if thin:
        classes = len(thin.counts)
        findings.append(Finding(
            "class_with_few_items",
            f"{_plural(classes, 'class')} ha{'s' if classes == 1 else 've'} fewer than {MIN_CLASS_ITEMS} test "
            f"items ({len(thin.cases)} items: {thin.named}); their F1 swings on one answer and still weighs in "
            "macro F1",
            len(thin.cases), thin.cases))
    outside = [case for case in test if case.filtered_labels and case.gold not in case.filtered_labels]
    if outside:
        named = ", ".join(f"{case.case_id} {case.gold}" for case in outside[:5]) + (", ..." if len(outside) > 5 else "")
        findings.append(Finding(
            "gold_outside_filtered_labels",
            f"{_plural(len(outside), 'test pair')}: the gold label is not among the pair's filtered_labels ({named}); "
            "under --re-candidates filtered the prompt cannot offer the right answer",
            len(outside), tuple(case.case_id for case in outside)))
    return findings


def audit(context: MicrobioRelContext) -> list[Finding]:
    """The test split's findings against the pinned train and dev splits."""
    return audit_splits(context.cases, {"train": load_split("train"), "dev": load_split("dev")})
