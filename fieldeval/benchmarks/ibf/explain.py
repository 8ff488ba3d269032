"""Why one IBF item scored what it did: the reference scorer's evidence per dimension, or the judge's rationale."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scorers.ibf import DIMENSIONS, judge_rationale

_FOUND_SHOWN = 3  # reference phrases quoted per dimension before "and N more"
_MISSING_SHOWN = 2
_RATIONALE_SHOWN = 300  # characters of a judge's rationale


def explain_ibf(row: Mapping[str, Any]) -> str:
    """One or two sentences on a scored row: each dimension's score and what it rests on.

    A reference-scored row names, per dimension, the reference phrases the response names and misses and the
    response's own words that counted; a judged row (``scorer`` ``judge:<model>``) gives the judge's rationale.

    Example:
        >>> explain_ibf({"scorer": "judge:gpt-4o", "hazard_recognition": 4, "impact_reasoning": 3,
        ...              "uncertainty_handling": 2, "action_relevance": 3, "geographic_specificity": 1,
        ...              "judge_response": '{"hazard_recognition": 4, "rationale": "Clear on the flood."}'})
        "Judge gpt-4o gave hazard_recognition 4, impact_reasoning 3, uncertainty_handling 2, action_relevance 3, \
geographic_specificity 1. Its rationale: 'Clear on the flood.'"
    """
    scorer = str(row.get("scorer") or "")
    if scorer.startswith("judge:"):
        return _judged(row, scorer.removeprefix("judge:"))
    evidence = row.get("evidence")
    if not isinstance(evidence, Mapping):
        return f"The reference scorer gave {_scores(row)}; this row records no evidence for them."
    hazard = evidence.get("hazard_recognition") or {}
    notes = {name: _evidence(evidence.get(name) or {}) for name in DIMENSIONS}
    if hazard.get("other_hazard"):
        notes["impact_reasoning"] += ", at most 1 as the answer is about another hazard"
    clauses = [f"{name} {_score(row.get(name))} ({notes[name]})" for name in DIMENSIONS]
    return "Reference scorer: " + "; ".join(clauses) + "."


def _judged(row: Mapping[str, Any], judge: str) -> str:
    """The judge's scores, why any are unscored, and its rationale."""
    text = f"Judge {judge} gave {_scores(row)}."
    if row.get("unscored_reason"):
        text += f" Unscored: {row['unscored_reason']}."
    rationale = judge_rationale(row.get("judge_response"))
    if rationale is None:
        return text + " Its reply gives no rationale."
    shown = rationale if len(rationale) <= _RATIONALE_SHOWN else rationale[:_RATIONALE_SHOWN] + "…"
    return f"{text} Its rationale: {shown!r}"


def _evidence(evidence: Mapping[str, Sequence[str]]) -> str:
    """One dimension's evidence as a clause: found and missing reference phrases, then what else counted."""
    found, missing = list(evidence.get("found") or ()), list(evidence.get("missing") or ())
    parts = [f"names {_listed(found, _FOUND_SHOWN)}"] if found else []
    if missing:
        parts.append(f"misses {_listed(missing, _MISSING_SHOWN)}" if found
                     else f"names none of its {len(missing)} reference phrases, e.g. {missing[0]!r}")
    if evidence.get("cues"):
        parts.append(f"counted {_listed(list(evidence['cues']), _FOUND_SHOWN)}")
    if evidence.get("quantified"):
        parts.append(f"quantified by {_listed(list(evidence['quantified']), 1)}")
    if evidence.get("overconfident"):
        parts.append(f"{_listed(list(evidence['overconfident']), 1)} is overconfident (minus 1)")
    if evidence.get("other_hazard"):
        parts.append(f"points rather at {_listed(list(evidence['other_hazard']), 1)}")
    return ", ".join(parts) or "no evidence"


def _listed(items: list[str], shown: int) -> str:
    """The first ``shown`` items quoted, then how many more."""
    quoted = ", ".join(repr(item) for item in items[:shown])
    return quoted + (f" and {len(items) - shown} more" if len(items) > shown else "")


def _scores(row: Mapping[str, Any]) -> str:
    """The row's five scores in rubric order, e.g. ``hazard_recognition 4, impact_reasoning 3, ...``."""
    return ", ".join(f"{name} {_score(row.get(name))}" for name in DIMENSIONS)


def _score(value: Any) -> str:
    """One score as text; ``unscored`` for None."""
    return "unscored" if value is None else str(value)
