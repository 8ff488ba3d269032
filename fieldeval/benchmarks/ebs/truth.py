"""Which truth an env_broad_scale case is scored against (``--ebs-truth``): its CURIE, or the term its label names.

Under ``curie`` (the default, upstream's rule) every case is scored against the
CURIE of its ``label [CURIE]`` truth, exactly as upstream does. Under ``label`` a
case whose truth label is not its CURIE's ENVO label (a *truth conflict*) is scored
against the term the label names, where the ontology has one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from fieldeval.inputs import write_tsv
from scorers.ebs import OntologyIndex, parse_label_curie

TruthRule = Literal["curie", "label"]
TRUTH_RULES: tuple[TruthRule, ...] = ("curie", "label")
TRUTH_COLUMNS = ["model", "case_id", "case_ideal", "truth_rule", "truth_conflict", "truth_label", "truth_curie",
                 "exact_match", "ontology_score"]


def label_names(index: OntologyIndex) -> dict[str, str]:
    """Each label of the ontology, casefolded -> the CURIE it names (the smallest CURIE when several share it)."""
    names: dict[str, str] = {}
    for curie, label in sorted(index.labels.items()):
        names.setdefault(label.casefold(), curie)
    return names


def truth_conflict(ideal: str, index: OntologyIndex) -> bool:
    """Whether a ``label [CURIE]`` truth's label is not its CURIE's ontology label (ignoring case), or the
    ontology lacks the CURIE; False for a truth that does not parse."""
    truth = parse_label_curie(ideal)
    if truth is None:
        return False
    label = index.label(truth.curie)
    return label is None or label.casefold() != truth.label.casefold()


def named_term(ideal: str, names: Mapping[str, str]) -> str | None:
    """The CURIE the truth's label names in the ontology, or None (no such label, or a truth that does not parse)."""
    truth = parse_label_curie(ideal)
    return names.get(truth.label.casefold()) if truth else None


def scored_truth(ideal: str, *, index: OntologyIndex, names: Mapping[str, str],
                 rule: TruthRule) -> tuple[str, bool]:
    """``(truth to score against, truth_conflict)`` for a case's ``ideal`` under ``rule``.

    Example:
        >>> scored_truth("forest biome [ENVO:00000446]", index=index, names=label_names(index),
        ...              rule="label")  # doctest: +SKIP
        ('forest biome [ENVO:01000174]', True)
    """
    conflict = truth_conflict(ideal, index)
    if rule == "curie" or not conflict:
        return ideal, conflict
    curie = named_term(ideal, names)
    if curie is None:
        return ideal, conflict
    return f"{index.label(curie)} [{curie}]", conflict


def write_truth_table(rows: Sequence[dict], path: Path) -> Path:
    """Write fieldeval's truth table of a run (``truth_conflict`` beside each row's truth and score)."""
    return write_tsv(path, TRUTH_COLUMNS, [[_cell(row.get(c)) for c in TRUTH_COLUMNS] for row in rows])


def _cell(value: object) -> str:
    return "" if value is None else str(value)
