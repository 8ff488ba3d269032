"""Why one MicrobioRel item scored what it did, in words: what the parser read from the answer, against the gold."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scorers.microbiorel import RELATION_CLASSES, clean_response

_SHOWN = 80  # characters of an answer quoted in an explanation


def explain_microbiorel(row: Mapping[str, Any]) -> str:
    """One or two sentences on a scored row: what was read from the answer, and whether it is the gold class.

    Example:
        >>> explain_microbiorel({"response_text": "Relation: increase.", "prediction": "increase", "valid": True,
        ...                      "correct": True, "gold": "increase"})
        "The answer 'Relation: increase.' was read as 'increase' (the parser stripped 'Relation:' and '.'). \
Correct: the gold class is 'increase'."
    """
    answer = row.get("response_text")
    gold = f"the gold class is {row.get('gold')!r}"
    if not row.get("valid"):
        return f"{_unread(answer)} Wrong (an unreadable answer counts as a wrong prediction): {gold}."
    return f"{_read(answer, row.get('prediction'))} {'Correct' if row.get('correct') else 'Wrong'}: {gold}."


def _read(answer: Any, prediction: Any) -> str:
    """How the answer became its class: what the parser stripped, and whether the case differed."""
    text = str(answer or "")
    stripped = _stripped(text)
    said = f"The answer {_quote(text)} was read as {prediction!r}"
    notes = [f"the parser stripped {' and '.join(map(repr, stripped))}"] if stripped else []
    if clean_response(text) != prediction:
        notes.append("matched ignoring case")
    return said + (f" ({'; '.join(notes)})." if notes else ".")


def _unread(answer: Any) -> str:
    """Why nothing could be read from an answer."""
    if answer is None or not str(answer).strip():
        return "The answer is empty, so no class could be read (valid False)."
    text = str(answer)
    cleaned = clean_response(text)
    rest = f"after trimming, {_quote(cleaned)} is" if cleaned != text.strip() else "it is"
    return (f"No class could be read from the answer {_quote(text)} (valid False): "
            f"{rest} not one of the {len(RELATION_CLASSES)} class names.")


def _stripped(text: str) -> list[str]:
    """What the parser removed before and after the class name, each trimmed of spaces (empty parts left out)."""
    cleaned = clean_response(text)
    # the trims only cut the ends, and the last kept character is never one they cut: its last occurrence is it
    start = text.rfind(cleaned)
    return [part.strip() for part in (text[:start], text[start + len(cleaned):]) if part.strip()]


def _quote(text: str) -> str:
    """``text`` quoted, cut to :data:`_SHOWN` characters."""
    return repr(text if len(text) <= _SHOWN else text[:_SHOWN] + "…")
