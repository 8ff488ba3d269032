"""Why one env_broad_scale item scored what it did, in words, from the columns its scorer recorded."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scorers.ebs import ENUM_NEUTRAL


def explain_ebs(row: Mapping[str, Any]) -> str:
    """One or two sentences on a scored row: the prediction, how it stands to the truth, its label and value set.

    Example:
        >>> explain_ebs({"parse_success": True, "pred_label": "forest biome", "pred_curie": "ENVO:01000174",
        ...              "relationship": "exact", "hop_distance": 0, "hierarchy_score": 1.0,
        ...              "curie_label_valid": True, "in_template_enum": True, "enum_score": 1.0,
        ...              "sampleData": "soil_data", "ontology_score": 1.0})
        "Predicted 'forest biome' [ENVO:01000174], the truth itself: hierarchy 1; label matches its CURIE; \
in the soil_data value set. Ontology score 1."
    """
    score = f"Ontology score {_number(row.get('ontology_score'))}."
    if not row.get("parse_success"):
        return " ".join([_parse_failure(row), score, _information(row), _truth_note(row)]).strip()
    parts = [f"Predicted {_term(row.get('pred_label'), row.get('pred_curie'))}, {_relation(row)}",
             _label(row), _enum(row)]
    return " ".join(["; ".join(parts) + ".", score, _information(row), _truth_note(row)]).strip()


def _information(row: Mapping[str, Any]) -> str:
    """What the answer missed and asserted falsely (information content and terms), where the row records it.

    Example:
        >>> _information({"missed_information": 0.619789, "missed_terms": 2, "false_information": 0,
        ...               "false_terms": 0})
        'Beside it: missed information 0.6198 (2 terms the truth implies), asserted nothing false.'
    """
    if row.get("missed_information") is None:
        return ""
    missed, false = row["missed_information"], row.get("false_information") or 0
    said = ("asserted nothing false" if not row.get("false_terms") else
            f"false information {_number(false)} ({row['false_terms']} term{'' if row['false_terms'] == 1 else 's'} "
            "the truth does not imply)")
    if not row.get("missed_terms"):
        return f"Beside it: missed nothing, {said}."
    count = row["missed_terms"]
    return (f"Beside it: missed information {_number(missed)} ({count} term{'' if count == 1 else 's'} the truth "
            f"implies), {said}.")


def _parse_failure(row: Mapping[str, Any]) -> str:
    """What a response that is not ``label [CURIE]`` scores, and the CURIE its prose names, if any."""
    text = "The response is not a strict 'label [CURIE]' value, so no part of it is scored"
    if row.get("lenient_curie"):
        text += f" (its prose names {row['lenient_curie']}, which is never scored)"
    return text + "."


def _relation(row: Mapping[str, Any]) -> str:
    """How the prediction stands to the truth, and the hierarchy component that follows."""
    relationship, hops = row.get("relationship"), row.get("hop_distance")
    hierarchy = f"hierarchy {_number(row.get('hierarchy_score'))}"
    truth = _term(row.get("truth_label"), row.get("truth_curie"))
    distance = f"{hops} hop{'' if hops == 1 else 's'}"
    if relationship == "exact":
        return f"the truth itself: {hierarchy}"
    if relationship in ("ancestor", "descendant"):
        article = "an" if relationship == "ancestor" else "a"
        return f"{article} {relationship} of the truth {truth} at {distance}: {hierarchy}"
    if relationship == "unrelated" and row.get("relationship_detail") == "sibling":
        return f"unrelated to the truth {truth} by is_a, but its sibling (an is_a parent in common): {hierarchy}"
    if relationship == "unrelated":
        return f"unrelated to the truth {truth} by is_a: {hierarchy}"
    return f"but the truth {row.get('case_ideal')!r} does not parse: {hierarchy}"


def _label(row: Mapping[str, Any]) -> str:
    """Whether the stated label is the CURIE's ENVO label."""
    if row.get("curie_label_valid"):
        return "label matches its CURIE"
    return "label is not the ontology's label of its CURIE (or the ontology lacks the CURIE)"


def _enum(row: Mapping[str, Any]) -> str:
    """Whether the CURIE is in the template's value set."""
    template = row.get("sampleData") or "the template"
    if row.get("in_template_enum") is None:
        return f"{template} has no value set: enum {_number(ENUM_NEUTRAL)}"
    return f"{'in' if row['in_template_enum'] else 'not in'} the {template} value set"


def _truth_note(row: Mapping[str, Any]) -> str:
    """A sentence on an answer scored against another of its case's references (``--ebs-truth closest``), or on a
    case whose truth label is not its CURIE's label (a truth conflict), else nothing."""
    matched = row.get("matched_reference")
    if row.get("truth_rule") == "closest" and matched and matched != row.get("case_ideal"):
        return f"Scored against {matched!r}, the closest of the case's references (--ebs-truth closest)."
    if not row.get("truth_conflict"):
        return ""
    ideal = row.get("case_ideal")
    against = "its CURIE (upstream's rule)"
    if row.get("truth_rule") == "label":
        named = row.get("truth_curie") and f"[{row['truth_curie']}]" not in str(ideal)
        against = "the term its label names" if named else "its CURIE, as no term has its label"
    return f"The case's truth {ideal!r} has a label that is not its CURIE's label; it was scored against {against}."


def _term(label: Any, curie: Any) -> str:
    """A term as ``'label' [CURIE]`` (the CURIE alone without a label)."""
    return f"{label!r} [{curie}]" if label else f"[{curie}]"


def _number(value: Any) -> str:
    """A score as short text: 0.85, 1, 0.5."""
    return "?" if value is None else f"{round(float(value), 4):g}"
