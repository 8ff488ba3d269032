"""The IBF judge's reply read robustly: the JSON schema a judge is asked for, its five scores and its rationale."""

from __future__ import annotations

import json
import re

from scorers.ibf_rubric import DIMENSIONS, MAX_SCORE, MIN_SCORE, IbfScore


JUDGE_SCHEMA: dict = {
    "type": "object",
    "properties": {
        **{name: {"type": "integer", "minimum": MIN_SCORE, "maximum": MAX_SCORE} for name in DIMENSIONS},
        "rationale": {"type": "string"},
    },
    "required": list(DIMENSIONS),
}

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)


def _json_objects(text: str) -> list[dict]:
    """Every JSON object in a text: the whole text, fenced blocks, then each ``{`` scanned in prose."""
    found: list[dict] = []
    candidates = [text.strip(), *(m.strip() for m in _FENCE.findall(text))]
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except (json.JSONDecodeError, ValueError):
            continue
        if isinstance(value, dict):
            found.append(value)
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except (json.JSONDecodeError, ValueError):
            continue
        if isinstance(value, dict):
            found.append(value)
    return found


def _rubric_value(value: object) -> int | None:
    """An integer 0-4 from a judge's value (int, integral float or digit string); None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    elif isinstance(value, str) and re.fullmatch(r"\s*\d+\s*", value):
        value = int(value)
    if isinstance(value, int) and MIN_SCORE <= value <= MAX_SCORE:
        return value
    return None


def _normalise_key(key: str) -> str:
    return re.sub(r"[^a-z]+", "_", key.lower()).strip("_")


def _judgement_object(text: str | None) -> tuple[dict, dict] | None:
    """The first JSON object of a judge reply that holds rubric scores, and its scores keyed by normalised name."""
    for obj in _json_objects(text or ""):
        inner = obj.get("scores") if isinstance(obj.get("scores"), dict) else obj
        keyed = {_normalise_key(str(k)): v for k, v in inner.items()}
        if any(name in keyed for name in DIMENSIONS):
            return obj, keyed
    return None


def judge_rationale(text: str | None) -> str | None:
    """The ``rationale`` of the judge reply's scores object (as :func:`parse_judgement` finds it), or None.

    Example:
        >>> judge_rationale('{"hazard_recognition": 4, "rationale": "Names the flood and its gauge."}')
        'Names the flood and its gauge.'
    """
    found = _judgement_object(text)
    if found is None:
        return None
    obj, keyed = found
    value = obj.get("rationale", keyed.get("rationale"))
    if not isinstance(value, str) or not value.strip():
        return None
    return value.strip()


def parse_judgement(text: str, *, scorer: str = "judge") -> IbfScore:
    """Read an LLM judge's reply into five scores; what cannot be read is unscored, never 0.

    The reply may be bare JSON, JSON inside a code fence, or JSON inside prose;
    keys may be nested under ``scores`` and spelled with spaces or capitals
    ("Hazard Recognition"). A value that is not an integer 0-4 (3.5, 7, "good",
    true) leaves its dimension unscored.

    Args:
        text: the judge's raw reply.
        scorer: the name recorded with the scores, e.g. ``judge:gpt-4o-mini``.

    Returns:
        The scores, with ``unscored_reason`` naming what could not be read.

    Example:
        >>> parse_judgement('Scores: {"hazard_recognition": 4, "impact_reasoning": 3, '
        ...                 '"uncertainty_handling": 9, "action_relevance": 4, '
        ...                 '"geographic_specificity": 3}').uncertainty_handling is None
        True
    """
    found = _judgement_object(text)
    if found is None:
        return IbfScore.unscored(scorer, "no JSON object with rubric scores in the judge reply")
    best = found[1]
    values = {name: _rubric_value(best.get(name)) for name in DIMENSIONS}
    bad = [f"{name}={best.get(name)!r}" for name in DIMENSIONS if values[name] is None]
    reason = f"not an integer 0-4: {', '.join(bad)}" if bad else None
    return IbfScore(**values, scorer=scorer, unscored_reason=reason)
