"""The insides of the IBF reference scorer: lexical matching of a response against an item's reference notes.

:func:`scorers.ibf.score_reference` is the public face and documents the
mapping to the rubric; this module computes the five integers and the
evidence behind each. Pure: text and references in, numbers out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence

from scorers.ibf_lexicon import (
    ACTION_WORDS,
    HARM_WORDS,
    HAZARD_DESCRIPTORS,
    HAZARD_NAMES,
    HAZARD_WORDS,
    HEDGE_WORDS,
    IMPACT_OBJECTS,
    IMPACT_WORDS,
)

_TOP = 4  # the rubric's maximum
_STOPWORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "in", "into", "is", "it", "its",
    "of", "on", "or", "over", "the", "their", "to", "up", "with", "within", "per", "than", "s",
})
_STEM = 6
_WORD = re.compile(r"[a-z0-9]+")
_QUANTIFIERS = re.compile(
    r"(±|\+/-|\bplus or minus\b|\d\s*(%|per ?cent)|\b\d+\s*(in|out of)\s*\d+\b|\bprobabilit\w*\s+(of\s+)?\d"
    r"|\b0?\.\d+\s+probability|\bbetween\s+\d[\d,.]*\s*(and|-)\s*\d|\b\d[\d,.]*\s*(-|–|to)\s*\d[\d,.]*\s*"
    r"(%|mm|m|cm|hours?|days?|m³/s|m3/s|km/h|°c|c\b))",
    re.IGNORECASE,
)
_OVERCONFIDENT = re.compile(
    r"\b(will (certainly|definitely|surely)|certain to|guaranteed|no doubt|without (any )?doubt|100 ?%"
    r"|there is no uncertainty|will not happen)\b",
    re.IGNORECASE,
)
# words every restated alert carries; they never name an impact, uncertainty or action by themselves
_ALERT_STEMS = frozenset({"foreca", "warnin", "alert", "issued"})
_KINDS = ("societal", "agricultural", "infrastructure")
_GAP = 4  # an everyday phrase's next root within the next four words
_NEAR = 6  # an impact object within six words of its harm
_CUES = 5  # generic words kept as a dimension's cues

Evidence = dict[str, list[str]]
"""What one dimension's score rests on: ``found`` and ``missing``, the item's reference phrases the response
names and does not; ``cues``, the response's own words that counted besides them (a generic rubric word, an
everyday descriptor, an ``"object harm"`` pair); ``quantified`` and ``overconfident``, the wording that
raised or lowered uncertainty_handling; ``other_hazard``, the hazard the response is about instead."""


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower().replace("³", "3"))


def _stems(text: str) -> set[str]:
    return {w[:_STEM] for w in _words(text) if w not in _STOPWORDS}


def _content(phrase: str) -> list[str]:
    return list(dict.fromkeys(w[:_STEM] for w in _words(phrase) if w not in _STOPWORDS))


def phrase_matches(phrase: str, stems: set[str], *, require_all: bool = False,
                   ignore: frozenset[str] = frozenset()) -> bool:
    """Whether a reference phrase is present: at least half (or all) of its content-word stems occur.

    Words are lower-cased, stop words dropped and cut to their first six
    letters, so "pre-positioning relief supplies" matches "pre-position relief
    supplies". Stems in ``ignore`` (the hazard's own name) do not count, so
    restating "heatwave" does not name "duration of the heatwave".
    """
    words = [w for w in _content(phrase) if w not in ignore]
    if not words:
        return False
    hits = sum(w in stems for w in words)
    return hits == len(words) if require_all else hits >= math.ceil(len(words) / 2)


def _hazard_stems(refs: Mapping) -> frozenset[str]:
    names = [refs.get("type", ""), *refs.get("synonyms", [])]
    return _ALERT_STEMS | {w for n in names for w in _content(n)}


def _cues(prefixes: tuple[str, ...], words: Sequence[str]) -> list[str]:
    """The response's words whose stem starts with one of ``prefixes`` (a generic rubric word), at most five."""
    return list(dict.fromkeys(w for w in words if w not in _STOPWORDS and w[:_STEM].startswith(prefixes)))[:_CUES]


def _sort(phrases: Iterable[str], present: Callable[[str], bool]) -> Evidence:
    """The reference phrases a response names (``found``) and those it does not (``missing``)."""
    phrases = [p for p in phrases if p]
    found = [p for p in phrases if present(p)]
    return {"found": found, "missing": [p for p in phrases if p not in found]}


def _merged(parts: Iterable[Evidence]) -> Evidence:
    """Several phrase lists' evidence as one."""
    parts = list(parts)
    return {"found": [p for e in parts for p in e["found"]], "missing": [p for e in parts for p in e["missing"]]}


def _roots_present(phrase: str, words: Sequence[str]) -> bool:
    """The roots of an everyday phrase begin words in order, at most three words apart ("burst its banks")."""
    first, *rest = phrase.split()
    for start in (i for i, w in enumerate(words) if w.startswith(first)):
        at = start
        for root in rest:
            at = next((k for k in range(at + 1, min(at + 1 + _GAP, len(words))) if words[k].startswith(root)), -1)
            if at < 0:
                break
        else:
            return True
    return False


def _harmed(objects: tuple[str, ...], words: Sequence[str]) -> str | None:
    """The first everyday object ("homes", "herds") within six words of a harm word ("swept", "starve"),
    as ``"object harm"``; None when there is none."""
    harms = [i for i, w in enumerate(words) if w.startswith(HARM_WORDS)]
    for i, w in enumerate(words):
        near = next((h for h in harms if abs(i - h) <= _NEAR), None) if w.startswith(objects) else None
        if near is not None:
            return f"{w} {words[near]}"
    return None


def _described(phrases: Iterable[str], words: Sequence[str]) -> list[str]:
    """The everyday root phrases present in the response."""
    return [p for p in phrases if _roots_present(p, words)]


def _hazard_evidence(hazard_type: str, words: Sequence[str]) -> int:
    """How strongly a response points at one hazard type: 2 per name, 1 per everyday descriptor."""
    return (2 * len(_described(HAZARD_NAMES.get(hazard_type, ()), words))
            + len(_described(HAZARD_DESCRIPTORS.get(hazard_type, ()), words)))


def _hazard(refs: Mapping, stems: set[str], words: Sequence[str]) -> tuple[int, bool, Evidence]:
    """The hazard_recognition score, whether the response is about a different hazard, and the evidence."""
    names = [refs.get("type", ""), *refs.get("synonyms", [])]
    named = _sort(names, lambda n: phrase_matches(n, stems, require_all=True))
    measured = _sort(refs.get("indicators", []), lambda i: phrase_matches(i, stems, require_all=True))
    evidence = _merged([named, measured])
    if named["found"]:
        return (4 if measured["found"] else 3), False, evidence
    partial = [w for w in dict.fromkeys(w for n in names for w in _content(n)) if w in stems]
    described = _described(HAZARD_DESCRIPTORS.get(refs.get("type", ""), ()), words)
    evidence["cues"] = partial + described
    own = int(bool(partial)) + len(described)
    other, other_type = max(((_hazard_evidence(t, words), t) for t in HAZARD_NAMES if t != refs.get("type")),
                            default=(0, ""))
    if other > own:
        evidence["other_hazard"] = [other_type]
        return 1, True, evidence
    if own:
        return (3 if own >= 2 else 2), False, evidence
    evidence["cues"] = _cues(HAZARD_WORDS, words)
    return (1 if evidence["cues"] else 0), False, evidence


def _impacts(refs: Mapping, stems: set[str], words: Sequence[str], ignore: frozenset[str]) -> tuple[int, Evidence]:
    """The impact_reasoning score before the different-hazard cap, and its evidence."""
    kinds = [_sort(refs.get(kind, []), lambda p: phrase_matches(p, stems, ignore=ignore)) for kind in _KINDS]
    evidence = _merged(kinds)
    covered = sum(bool(kind["found"]) for kind in kinds)
    if covered:
        return 1 + covered, evidence
    harmed = [pair for kind in _KINDS if (pair := _harmed(IMPACT_OBJECTS[kind], words))]
    if harmed:
        evidence["cues"] = harmed
        return 2, evidence
    evidence["cues"] = _cues(IMPACT_WORDS, words)
    return (1 if evidence["cues"] else 0), evidence


def _uncertainty(refs: Sequence[str], stems: set[str], words: Sequence[str], text: str,
                 ignore: frozenset[str]) -> tuple[int, Evidence]:
    """The uncertainty_handling score and its evidence."""
    evidence = _sort(refs, lambda p: phrase_matches(p, stems, ignore=ignore))
    key = len(evidence["found"])
    evidence["cues"] = _cues(HEDGE_WORDS, words)
    if not evidence["cues"] and not key:
        return 0, evidence
    quantified, overconfident = _QUANTIFIERS.search(text), _OVERCONFIDENT.search(text)
    if quantified:
        evidence["quantified"] = [quantified.group(0)]
    if overconfident:
        evidence["overconfident"] = [overconfident.group(0)]
    points = 1 + int(quantified is not None) + min(key, 2) - int(overconfident is not None)
    return max(0, min(points, _TOP)), evidence


def _actions(refs: Sequence[str], stems: set[str], words: Sequence[str],
             ignore: frozenset[str]) -> tuple[int, Evidence]:
    """The action_relevance score and its evidence."""
    evidence = _sort(refs, lambda p: phrase_matches(p, stems, ignore=ignore))
    if evidence["found"]:
        return min(1 + len(evidence["found"]), _TOP), evidence
    evidence["cues"] = _cues(ACTION_WORDS, words)
    return (1 if evidence["cues"] else 0), evidence


def _geography(refs: Mapping, stems: set[str]) -> tuple[int, Evidence]:
    """The geographic_specificity score and its evidence."""
    def named(key: str) -> Evidence:
        value = refs.get(key) or []
        values = [value] if isinstance(value, str) else value
        return _sort(values, lambda v: phrase_matches(v, stems, require_all=True))

    levels = [named(key) for key in ("admin2", "admin1", "country", "features")]
    admin2, admin1, country, features = (bool(level["found"]) for level in levels)
    evidence = _merged(levels)
    if admin2 and (country or admin1):
        return 4, evidence
    if admin1 or admin2:
        return 3, evidence
    if country:
        return 2, evidence
    return (1 if features else 0), evidence


def reference_scores(response: str, references: Mapping) -> tuple[dict[str, int], dict[str, Evidence]]:
    """The five rubric scores of a response against an item's reference notes (see ``score_reference``), and
    each dimension's evidence (see :data:`Evidence`)."""
    text = response or ""
    stems, words = _stems(text), _words(text)
    hazard = references.get("hazard", {})
    ignore = _hazard_stems(hazard)
    recognised, mismatched, hazard_evidence = _hazard(hazard, stems, words)
    impacts, impact_evidence = _impacts(references.get("impacts", {}), stems, words, ignore)
    uncertainty, uncertainty_evidence = _uncertainty(references.get("uncertainties", []), stems, words, text, ignore)
    actions, action_evidence = _actions(references.get("actions", []), stems, words, ignore)
    geography, geography_evidence = _geography(references.get("geography", {}), stems)
    scores = {
        "hazard_recognition": recognised,
        # impacts of a different hazard are not plausible impacts of this one
        "impact_reasoning": min(impacts, 1) if mismatched else impacts,
        "uncertainty_handling": uncertainty,
        "action_relevance": actions,
        "geographic_specificity": geography,
    }
    evidence = {"hazard_recognition": hazard_evidence, "impact_reasoning": impact_evidence,
                "uncertainty_handling": uncertainty_evidence, "action_relevance": action_evidence,
                "geographic_specificity": geography_evidence}
    return scores, evidence
