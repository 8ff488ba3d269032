"""Which truth an env_broad_scale case is scored against (``--ebs-truth``): its CURIE, the term its label names, or
the closest of its references.

Under ``curie`` (the default, upstream's rule) every case is scored against the
CURIE of its ``label [CURIE]`` truth, exactly as upstream does. Under ``label`` a
case whose truth label is not its CURIE's ENVO label (a *truth conflict*) is scored
against the term the label names, where the ontology has one. Under ``closest`` a
case has several acceptable references (its truth; for a truth conflict, the term
its label names too; and those ``--ebs-references`` adds), and each answer is
scored against the one it scores best against (``matched_reference``), as
upstream's newer ``closest_reference()`` does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from fieldeval.errors import UsageError
from fieldeval.inputs import read_tsv, write_tsv
from scorers.ebs import EbsScore, OntologyIndex, parse_label_curie, score_ebs

TruthRule = Literal["curie", "label", "closest"]
TRUTH_RULES: tuple[TruthRule, ...] = ("curie", "label", "closest")
TRUTH_COLUMNS = ["model", "case_id", "case_ideal", "truth_rule", "truth_conflict", "truth_label", "truth_curie",
                 "exact_match", "ontology_score", "matched_reference"]


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


def references(ideal: str, extra: Sequence[str], *, index: OntologyIndex, names: Mapping[str, str]) -> list[str]:
    """A case's acceptable references under ``closest``, in order: its truth, the term its label names when that
    is another term (a truth conflict), then ``extra`` (``--ebs-references``); each once."""
    found = [ideal]
    if truth_conflict(ideal, index):
        curie = named_term(ideal, names)
        if curie is not None:
            found.append(f"{index.label(curie)} [{curie}]")
    for reference in extra:
        parsed = parse_label_curie(reference)
        if parsed is not None and all(parse_label_curie(r) is None or parse_label_curie(r).curie != parsed.curie
                                      for r in found):
            found.append(reference)
    return found


def closest(response: str, candidates: Sequence[str], *, index: OntologyIndex,
            allowed: frozenset[str] | None) -> tuple[EbsScore, str]:
    """The answer's score against the reference it scores best against, and that reference: the highest
    ``ontology_score``, then an exact match, then the least missed and false information, then the earliest (the
    case's own truth).

    Example:
        >>> closest("cropland biome [ENVO:01000245]", ["forest biome [ENVO:01000174]",
        ...         "cropland biome [ENVO:01000245]"], index=index, allowed=None)[1]  # doctest: +SKIP
        'cropland biome [ENVO:01000245]'
    """
    best: tuple | None = None
    for order, reference in enumerate(candidates):
        score = score_ebs(response, reference, index=index, allowed=allowed)
        said = (score.missed_information or 0.0) + (score.false_information or 0.0)
        # an unreadable ontology scores None: the exact match decides there
        key = (-(score.ontology_score or 0.0), not score.exact_match, said, order)
        if best is None or key < best[0]:
            best = (key, score, reference)
    assert best is not None, "a case has its own truth at least"
    return best[1], best[2]


def read_references(path: str | Path) -> dict[str, tuple[str, ...]]:
    """``--ebs-references FILE``: a TSV of ``case_id`` and ``reference`` (``label [CURIE]``), a row per added
    reference; one line naming the row when a reference does not parse."""
    _, rows = read_tsv(path, what="--ebs-references", required=["case_id", "reference"],
                       hint="write a TSV with columns case_id and reference (label [CURIE])")
    found: dict[str, list[str]] = {}
    for number, row in enumerate(rows, start=2):
        reference = row["reference"].strip()
        if parse_label_curie(reference) is None:
            raise UsageError(f"--ebs-references {path}: line {number}: {reference!r} is not 'label [CURIE]'; "
                             "write each reference as the suite writes its ideals")
        found.setdefault(row["case_id"].strip(), []).append(reference)
    return {case: tuple(refs) for case, refs in found.items()}


def write_truth_table(rows: Sequence[dict], path: Path) -> Path:
    """Write fieldeval's truth table of a run (``truth_conflict`` beside each row's truth and score)."""
    return write_tsv(path, TRUTH_COLUMNS, [[_cell(row.get(c)) for c in TRUTH_COLUMNS] for row in rows])


def _cell(value: object) -> str:
    return "" if value is None else str(value)
