"""MicrobioRel prompts: classify directly, or summarise the pair first as the paper does."""

from __future__ import annotations

from typing import Literal

from fieldeval.benchmarks.microbiorel.cases import RelationCase
from scorers.microbiorel import RELATION_CLASSES

Mode = Literal["direct", "summarize"]
Candidates = Literal["all", "filtered"]

SYSTEM_PROMPT = (
    "You are an expert in biomedical relation extraction in the microbiome domain. "
    "You read a paragraph of a scientific article and judge how two entities mentioned in it are related."
)

_ENTITY_LINE = "Entity {k}: {name} (type {type}, characters {start}-{end})"
_PASSAGE = "Paragraph:\n<<<\n{text}\n>>>\n\n{entity1}\n{entity2}\n"

CLASSIFY_TEMPLATE = (
    "Classify the relation between Entity 1 and Entity 2 in the paragraph below.\n\n"
    "{passage}"
    "{summary_section}"
    "\nRelation classes:\n{class_lines}\n\n"
    "Answer with the class name only, exactly as written above; "
    "answer None when the paragraph states no relation between them."
)

SUMMARY_TEMPLATE = (
    "Summarize the relation between Entity 1 and Entity 2 in the paragraph below.\n\n"
    "{passage}\n"
    'Write one sentence of the form "Entity1 Relation Entity2" about this pair, '
    "using the entities' names, and nothing else."
)

def candidate_classes(case: RelationCase, candidates: Candidates) -> tuple[str, ...]:
    """The classes a prompt offers: all 23, or the pair's ``filtered_labels`` in the canonical order."""
    if candidates == "all" or not case.filtered_labels:
        return RELATION_CLASSES
    allowed = set(case.filtered_labels)
    return tuple(c for c in RELATION_CLASSES if c in allowed)


def _passage(case: RelationCase) -> str:
    entity1 = _ENTITY_LINE.format(k=1, name=case.source.name, type=case.source.type,
                                  start=case.source.start, end=case.source.end)
    entity2 = _ENTITY_LINE.format(k=2, name=case.target.name, type=case.target.type,
                                  start=case.target.start, end=case.target.end)
    return _PASSAGE.format(text=case.text, entity1=entity1, entity2=entity2)


def classify_prompt(case: RelationCase, *, classes: tuple[str, ...] = RELATION_CLASSES,
                    summary: str | None = None) -> str:
    """The classification prompt: paragraph, entities, optional summary, class list; asks for the class only."""
    section = f"\nSummary of their relation: {summary.strip()}\n" if summary is not None else ""
    return CLASSIFY_TEMPLATE.format(passage=_passage(case), summary_section=section,
                                    class_lines="\n".join(f"- {c}" for c in classes))


def summary_prompt(case: RelationCase) -> str:
    """The summarisation prompt: one sentence ``Entity1 Relation Entity2`` about the pair."""
    return SUMMARY_TEMPLATE.format(passage=_passage(case))
