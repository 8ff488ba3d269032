"""The insides of the IBF reference scorer: lexical matching of a response against an item's reference notes.

:func:`scorers.ibf.score_reference` is the public face and documents the
mapping to the rubric; this module computes the five integers. Pure: text
and references in, numbers out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence

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


def _count(phrases: Iterable[str], stems: set[str], ignore: frozenset[str] = frozenset()) -> int:
    return sum(phrase_matches(p, stems, ignore=ignore) for p in phrases)


def _hazard_stems(refs: Mapping) -> frozenset[str]:
    names = [refs.get("type", ""), *refs.get("synonyms", [])]
    return _ALERT_STEMS | {w for n in names for w in _content(n)}


def _any_stem(prefixes: Iterable[str], stems: set[str]) -> bool:
    return any(s.startswith(p) for p in prefixes for s in stems)


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


def _plain_hits(phrases: Iterable[str], words: Sequence[str]) -> int:
    return sum(_roots_present(p, words) for p in phrases)


def _harmed(objects: Iterable[str], words: Sequence[str]) -> bool:
    """Some everyday object ("homes", "herds") within six words of a harm word ("swept", "starve")."""
    harms = [i for i, w in enumerate(words) if w.startswith(HARM_WORDS)]
    return any(abs(i - h) <= _NEAR for i, w in enumerate(words) if w.startswith(tuple(objects)) for h in harms)


def _hazard_evidence(hazard_type: str, words: Sequence[str]) -> int:
    """How strongly a response points at one hazard type: 2 per name, 1 per everyday descriptor."""
    return (2 * _plain_hits(HAZARD_NAMES.get(hazard_type, ()), words)
            + _plain_hits(HAZARD_DESCRIPTORS.get(hazard_type, ()), words))


def _hazard(refs: Mapping, stems: set[str], words: Sequence[str]) -> tuple[int, bool]:
    """The hazard_recognition score and whether the response is about a different hazard."""
    names = [refs.get("type", ""), *refs.get("synonyms", [])]
    if any(phrase_matches(n, stems, require_all=True) for n in names if n):
        indicators = refs.get("indicators", [])
        quantified = any(phrase_matches(i, stems, require_all=True) for i in indicators)
        return (4 if quantified else 3), False
    partial = any(w in stems for n in names for w in _content(n))
    described = _plain_hits(HAZARD_DESCRIPTORS.get(refs.get("type", ""), ()), words)
    own = int(partial) + described
    other = max((_hazard_evidence(t, words) for t in HAZARD_NAMES if t != refs.get("type")), default=0)
    if other > own:
        return 1, True
    if own:
        return (3 if own >= 2 else 2), False
    return (1 if _any_stem(HAZARD_WORDS, stems) else 0), False


def _impacts(refs: Mapping, stems: set[str], words: Sequence[str], ignore: frozenset[str]) -> int:
    covered = sum(_count(refs.get(kind, []), stems, ignore) > 0 for kind in _KINDS)
    plain = any(_harmed(IMPACT_OBJECTS[kind], words) for kind in _KINDS)
    if covered:
        return 1 + covered
    if plain:
        return 2
    return 1 if _any_stem(IMPACT_WORDS, stems) else 0


def _uncertainty(refs: Sequence[str], stems: set[str], text: str, ignore: frozenset[str]) -> int:
    key = _count(refs, stems, ignore)
    acknowledged = _any_stem(HEDGE_WORDS, stems) or key > 0
    if not acknowledged:
        return 0
    quantified = _QUANTIFIERS.search(text) is not None
    points = 1 + int(quantified) + min(key, 2)
    if _OVERCONFIDENT.search(text):
        points -= 1
    return max(0, min(points, _TOP))


def _actions(refs: Sequence[str], stems: set[str], ignore: frozenset[str]) -> int:
    matched = _count(refs, stems, ignore)
    if matched:
        return min(1 + matched, _TOP)
    return 1 if _any_stem(ACTION_WORDS, stems) else 0


def _geography(refs: Mapping, stems: set[str]) -> int:
    def named(key: str) -> bool:
        value = refs.get(key) or []
        values = [value] if isinstance(value, str) else value
        return any(phrase_matches(v, stems, require_all=True) for v in values if v)

    country, admin1, admin2, features = named("country"), named("admin1"), named("admin2"), named("features")
    if admin2 and (country or admin1):
        return 4
    if admin1 or admin2:
        return 3
    if country:
        return 2
    return 1 if features else 0


def reference_scores(response: str, references: Mapping) -> dict[str, int]:
    """The five rubric scores of a response against an item's reference notes (see ``score_reference``)."""
    text = response or ""
    stems, words = _stems(text), _words(text)
    hazard = references.get("hazard", {})
    ignore = _hazard_stems(hazard)
    recognised, mismatched = _hazard(hazard, stems, words)
    impacts = _impacts(references.get("impacts", {}), stems, words, ignore)
    return {
        "hazard_recognition": recognised,
        # impacts of a different hazard are not plausible impacts of this one
        "impact_reasoning": min(impacts, 1) if mismatched else impacts,
        "uncertainty_handling": _uncertainty(references.get("uncertainties", []), stems, text, ignore),
        "action_relevance": _actions(references.get("actions", []), stems, ignore),
        "geographic_specificity": _geography(references.get("geography", {}), stems),
    }
