"""Ontology-aware scoring of env_broad_scale predictions.

The composite score follows the NMDC env_broad_scale eval exactly::

    ontology_score = 0.1 * parse_ok + 0.1 * curie_label_valid
                   + 0.5 * hierarchy_score + 0.3 * enum_score

hierarchy_score is 1.0 for an exact match, ``max(0, 1 - 0.10 d)`` for a
descendant ``d`` is_a hops below the truth, ``max(0, 1 - 0.15 d)`` for an
ancestor ``d`` hops above it, and 0 when unrelated. enum_score is 1 when the
predicted CURIE is in the template's allowed set, 0 when it is not, and 0.5
when the template has no set. A response that does not parse scores 0, and
its ``curie_label_valid`` and ``in_template_enum`` are None (blank), as
upstream leaves them: a rate of either counts parsed responses only.

Beside upstream's score, and never part of it, every row also says what the
answer failed to say and what it said that is false, as CAFA scores a
prediction (Clark and Radivojac 2013; the CAFA-evaluator's remaining
uncertainty and misinformation): with ``T`` the truth and its is_a ancestors
and ``P`` the prediction and its ancestors, ``missed_information`` is the
information content of ``T - P`` and ``false_information`` that of ``P - T``,
each term weighted by its intrinsic information content (Seco, Veale and Hayes
2004: ``1 - log(1 + descendants) / log(terms)``, 0 at the root, 1 at a leaf),
which the ontology's own structure gives without annotation counts;
``missed_terms`` and ``false_terms`` count the terms. ``relationship_detail``
tells a ``sibling`` (a term sharing an is_a parent with the truth) from an
``unrelated`` one.

Everything here is pure: the ontology arrives as an :class:`OntologyIndex`
built once by the engine.
"""

from __future__ import annotations

import functools
import math
import re
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

W_PARSE = 0.1
W_LABEL = 0.1
W_HIER = 0.5
W_ENUM = 0.3
DESCENDANT_DECAY = 0.10
ANCESTOR_DECAY = 0.15
ENUM_NEUTRAL = 0.5

Relationship = Literal["exact", "descendant", "ancestor", "unrelated"]
RelationshipDetail = Literal["exact", "descendant", "ancestor", "sibling", "unrelated"]
LabelMismatch = Literal["none", "wording", "other_term", "unrecognized"]
GENERIC_TAILS = ("ecosystem", "biome", "environment")  # a label without one of these is a rewording of it
UNKNOWN_TERM_IC = 1.0  # a CURIE the ontology lacks asserts as much as a leaf: its own (unknown) term

_LABEL_CURIE = re.compile(r"(?P<label>\S(?:.*?\S)?)\s*\[(?P<curie>[A-Za-z][A-Za-z0-9_]*:\d+)\]")
_CURIE_IN_PROSE = re.compile(r"\b([A-Za-z][A-Za-z0-9_]*:\d+)\b")


@dataclass(frozen=True)
class OntologyIndex:
    """What scoring needs from an ontology, precomputed once.

    Attributes:
        version: the ontology's version string, recorded in every report.
        labels: CURIE -> primary label.
        parents: CURIE -> its direct is_a parents.
        ancestors: CURIE -> every is_a ancestor (the subClassOf closure, not reflexive).
        synonyms: CURIE -> its synonyms (every scope), for :meth:`label_mismatch`.
        unreadable: why the ontology could not be read (None: it was): every ontology check is then unknown.
    """

    version: str
    labels: Mapping[str, str]
    parents: Mapping[str, tuple[str, ...]]
    ancestors: Mapping[str, frozenset[str]] = field(repr=False)
    synonyms: Mapping[str, tuple[str, ...]] = field(default_factory=dict, repr=False)
    unreadable: str | None = None

    def label(self, curie: str) -> str | None:
        """The primary label of a CURIE, or None when the ontology lacks it."""
        return self.labels.get(curie)

    def hops_up(self, start: str, target: str) -> int | None:
        """Shortest number of is_a edges from ``start`` up to ``target``."""
        if start == target:
            return 0
        if target not in self.ancestors.get(start, ()):
            return None
        seen = {start}
        queue = deque([(start, 0)])
        while queue:
            node, dist = queue.popleft()
            for parent in self.parents.get(node, ()):
                if parent == target:
                    return dist + 1
                if parent not in seen:
                    seen.add(parent)
                    queue.append((parent, dist + 1))
        return None

    @functools.cached_property
    def information_content(self) -> dict[str, float]:
        """CURIE -> its intrinsic information content (Seco et al. 2004): ``1 - log(1 + d) / log(N)`` for a term
        with ``d`` is_a descendants among the ``N`` terms of the index; 0 for a root above every term, 1 for a
        leaf. Computed once per index.

        Example:
            >>> index = OntologyIndex("v", {"A": "a", "B": "b", "C": "c"}, {"B": ("A",), "C": ("A",)},
            ...                       {"A": frozenset(), "B": frozenset({"A"}), "C": frozenset({"A"})})
            >>> index.information_content
            {'A': 0.0, 'B': 1.0, 'C': 1.0}
        """
        terms = {*self.labels, *self.parents, *self.ancestors}
        below = dict.fromkeys(terms, 0)
        for term in terms:
            for ancestor in self.ancestors.get(term, ()):
                below[ancestor] = below.get(ancestor, 0) + 1
        total = math.log(len(below)) if len(below) > 1 else 1.0
        return {term: round(max(0.0, 1.0 - math.log(1 + count) / total), 12) for term, count in below.items()}

    @functools.cached_property
    def _named(self) -> dict[str, frozenset[str]]:
        """Each label and synonym, as :func:`_words` has it -> the CURIEs it names."""
        names: dict[str, set[str]] = {}
        for curie, label in self.labels.items():
            names.setdefault(_words(label), set()).add(curie)
        for curie, synonyms in self.synonyms.items():
            for synonym in synonyms:
                names.setdefault(_words(synonym), set()).add(curie)
        return {name: frozenset(curies) for name, curies in names.items()}

    def label_mismatch(self, label: str, curie: str) -> LabelMismatch | None:
        """How a stated label stands to its CURIE's term: ``none`` (its label, ignoring case), ``wording`` (one
        of its synonyms, or its label or a synonym in other case, punctuation or without a trailing word such
        as "ecosystem"), ``other_term`` (another term's label or synonym: the pair asserts something false),
        ``unrecognized`` (no term's name); None when the ontology lacks the CURIE."""
        canonical = self.labels.get(curie)
        if canonical is None:
            return None
        if canonical.casefold() == label.casefold():
            return "none"
        said = _words(label)
        own = {_words(canonical), *(_words(synonym) for synonym in self.synonyms.get(curie, ()))}
        if said in own or _trimmed(said) in {_trimmed(name) for name in own}:
            return "wording"
        if self._named.get(said, frozenset()) - {curie}:
            return "other_term"
        return "unrecognized"

    def closure(self, curie: str) -> frozenset[str]:
        """The term and its is_a ancestors (a CURIE the ontology lacks: itself alone)."""
        return self.ancestors.get(curie, frozenset()) | {curie}

    def information(self, pred: str | None, truth: str) -> tuple[float, float, int, int]:
        """``(missed, false, missed_terms, false_terms)``: the information content of the truth's closure that the
        prediction's lacks, and of the prediction's closure that the truth's lacks, and the counts of those terms
        (``pred`` None: an answer that says nothing, so it misses everything and asserts nothing)."""
        truths, truth_ic = self._weighed(truth)
        if pred is None:
            return round(truth_ic, 6), 0.0, len(truths), 0
        preds, pred_ic = self._weighed(pred)
        shared = truths & preds
        ic = self.information_content
        shared_ic = math.fsum(ic.get(t, UNKNOWN_TERM_IC) for t in shared)
        return (round(truth_ic - shared_ic, 6), round(pred_ic - shared_ic, 6), len(truths) - len(shared),
                len(preds) - len(shared))

    @functools.cached_property
    def _weights(self) -> dict[str, tuple[frozenset[str], float]]:
        return {}

    def prepare(self) -> None:
        """Work out now what scoring looks up (every term's closure and its information, the names of terms),
        so that a caller can freeze it with the index (``gc.freeze``) before scoring many rows."""
        for curie in self.labels:
            self._weighed(curie)
        self._named  # noqa: B018 - built now

    def _weighed(self, curie: str) -> tuple[frozenset[str], float]:
        """A term's closure and its information content (exactly summed), each worked out once per term."""
        found = self._weights.get(curie)
        if found is None:
            terms = self.closure(curie)
            ic = self.information_content
            found = self._weights[curie] = (terms, math.fsum(ic.get(t, UNKNOWN_TERM_IC) for t in terms))
        return found

    def detail(self, relationship: Relationship | None, pred: str, truth: str) -> RelationshipDetail | None:
        """The relationship with ``sibling`` told apart: an unrelated term that shares an is_a parent with the
        truth."""
        if relationship != "unrelated":
            return relationship
        shared = set(self.parents.get(pred, ())) & set(self.parents.get(truth, ()))
        return "sibling" if shared else "unrelated"

    def relationship(self, pred: str, truth: str) -> tuple[Relationship, int | None]:
        """How ``pred`` stands to ``truth`` and the shortest is_a hop count between them."""
        if pred == truth:
            return "exact", 0
        if pred in self.ancestors.get(truth, ()):
            return "ancestor", self.hops_up(truth, pred)
        if truth in self.ancestors.get(pred, ()):
            return "descendant", self.hops_up(pred, truth)
        return "unrelated", None


def _words(text: str) -> str:
    """A name compared as words: case, punctuation and spacing aside ("Forest-Biome" is "forest biome")."""
    return " ".join(re.sub(r"[^\w]+", " ", text.casefold()).split())


def _trimmed(words: str) -> str:
    """A name without a trailing generic word ("meadow ecosystem" is "meadow")."""
    for tail in GENERIC_TAILS:
        if words.endswith(" " + tail):
            return words[: -len(tail) - 1]
    return words


@dataclass(frozen=True)
class ParsedTerm:
    """A strictly parsed ``label [CURIE]`` value."""

    label: str
    curie: str


@dataclass(frozen=True)
class EbsScore:
    """The score of one env_broad_scale prediction; field names are the scored TSV's columns.

    Attributes:
        parse_success: the response matched ``label [CURIE]`` strictly.
        pred_curie, pred_label: the parsed prediction (None on parse failure).
        truth_curie, truth_label: the parsed ground truth.
        curie_label_valid: the CURIE's ENVO label equals the stated label, ignoring case
            (None when the response does not parse, as upstream leaves it blank).
        exact_match: predicted CURIE equals the truth CURIE.
        relationship: exact / descendant / ancestor / unrelated (None when either side does not parse).
        hop_distance: shortest is_a path between prediction and truth (None when unrelated).
        in_template_enum: the CURIE is in the template's allowed set (None when the template has none
            or the response does not parse).
        hierarchy_score: the hierarchy component, 0-1.
        enum_score: the enum component: 1, 0 or 0.5 (neutral).
        ontology_score: the composite score, 0-1.
        lenient_curie: a CURIE found anywhere in the response; informative only, never scored.
        relationship_detail: ``relationship`` with ``sibling`` told apart from ``unrelated`` (None likewise).
        missed_information: the information content of the truth's closure the answer's lacks (all of it for
            an answer that does not parse); None when the truth does not parse.
        false_information: the information content of the answer's closure the truth's lacks (0 for an answer
            that does not parse: it asserts nothing).
        missed_terms, false_terms: the counts of those terms.
        label_mismatch: how the stated label stands to its CURIE's term (:meth:`OntologyIndex.label_mismatch`;
            None when the answer does not parse or the ontology lacks the CURIE).
        ontology_status: ``checked``, or ``unknown`` when the ontology could not be read: the answer's label,
            hierarchy, information and ``ontology_score`` are then None (unknown, not wrong); None when the
            answer does not parse.
    """

    parse_success: bool
    pred_curie: str | None
    pred_label: str | None
    truth_curie: str | None
    truth_label: str | None
    curie_label_valid: bool | None
    exact_match: bool
    relationship: Relationship | None
    hop_distance: int | None
    in_template_enum: bool | None
    hierarchy_score: float | None
    enum_score: float
    ontology_score: float | None
    lenient_curie: str | None
    relationship_detail: RelationshipDetail | None = None
    missed_information: float | None = None
    false_information: float | None = None
    missed_terms: int | None = None
    false_terms: int | None = None
    label_mismatch: LabelMismatch | None = None
    ontology_status: Literal["checked", "unknown"] | None = None

    def columns(self) -> dict[str, object]:
        """The scored table's columns, in order: what ``dataclasses.asdict`` gives, without its deep copy of
        each field (every one is a scalar)."""
        return dict(self.__dict__)


@functools.lru_cache(maxsize=4096)  # truths and answers repeat across items; the result is frozen
def parse_label_curie(text: str) -> ParsedTerm | None:
    """Parse a strict ``label [CURIE]`` value.

    Surrounding whitespace and double quotes are trimmed and leading
    underscores stripped; the CURIE is ``prefix:digits``; nothing else may
    stand before or after.

    Args:
        text: the model's raw response or a ground-truth value.

    Returns:
        The parsed term, or None when the text is not exactly ``label [CURIE]``.

    Example:
        >>> parse_label_curie('"__forest biome [ENVO:01000174]"')
        ParsedTerm(label='forest biome', curie='ENVO:01000174')
    """
    cleaned = text.strip().strip('"').strip().lstrip("_")
    match = _LABEL_CURIE.fullmatch(cleaned)
    if match is None:
        return None
    return ParsedTerm(label=match.group("label"), curie=match.group("curie"))


def hierarchy_score(relationship: Relationship | None, hop_distance: int | None) -> float:
    """The hierarchy component: 1 exact, decaying per hop for descendants and ancestors, else 0."""
    if relationship == "exact":
        return 1.0
    if relationship == "descendant" and hop_distance is not None:
        return max(0.0, 1.0 - DESCENDANT_DECAY * hop_distance)
    if relationship == "ancestor" and hop_distance is not None:
        return max(0.0, 1.0 - ANCESTOR_DECAY * hop_distance)
    return 0.0


def enum_score(in_template_enum: bool | None) -> float:
    """The enum component: 1 in the set, 0 outside it, 0.5 when the template has no set."""
    if in_template_enum is None:
        return ENUM_NEUTRAL
    return 1.0 if in_template_enum else 0.0


def score_ebs(
    response: str,
    ideal: str,
    *,
    index: OntologyIndex,
    allowed: frozenset[str] | None,
) -> EbsScore:
    """Score one env_broad_scale prediction against its ground truth.

    Args:
        response: the model's raw response text.
        ideal: the ground truth as ``label [CURIE]``.
        index: the ontology index to score against.
        allowed: CURIEs of the template's value set, or None when the template has none.

    Returns:
        Every column of the scored TSV for this row.

    Example:
        >>> score_ebs("forest biome [ENVO:01000174]", "forest biome [ENVO:01000174]",
        ...           index=index, allowed=frozenset({"ENVO:01000174"})).ontology_score  # doctest: +SKIP
        1.0
    """
    truth = parse_label_curie(ideal)
    pred = parse_label_curie(response)
    lenient = _CURIE_IN_PROSE.search(response or "")
    lenient_curie = lenient.group(1) if lenient else None
    if pred is None:
        return EbsScore(
            parse_success=False,
            pred_curie=None,
            pred_label=None,
            truth_curie=truth.curie if truth else None,
            truth_label=truth.label if truth else None,
            curie_label_valid=None,
            exact_match=False,
            relationship=None,
            hop_distance=None,
            in_template_enum=None,
            hierarchy_score=0.0,
            enum_score=0.0,
            ontology_score=0.0,
            lenient_curie=lenient_curie,
            **(_information_fields(index, None, truth.curie if truth else None, None)
               if index.unreadable is None else {}),
        )
    in_enum = None if allowed is None else pred.curie in allowed
    if index.unreadable is not None:
        return _unknown(pred.curie, pred.label, truth, in_enum, lenient_curie)
    canonical = index.label(pred.curie)
    label_valid = canonical is not None and canonical.casefold() == pred.label.casefold()
    relationship: Relationship | None = None
    hops: int | None = None
    if truth is not None:
        relationship, hops = index.relationship(pred.curie, truth.curie)
    hier = hierarchy_score(relationship, hops)
    enum_part = enum_score(in_enum)
    total = W_PARSE + W_LABEL * label_valid + W_HIER * hier + W_ENUM * enum_part
    return EbsScore(
        parse_success=True,
        pred_curie=pred.curie,
        pred_label=pred.label,
        truth_curie=truth.curie if truth else None,
        truth_label=truth.label if truth else None,
        curie_label_valid=label_valid,
        exact_match=truth is not None and pred.curie == truth.curie,
        relationship=relationship,
        hop_distance=hops,
        in_template_enum=in_enum,
        hierarchy_score=hier,
        enum_score=enum_part,
        ontology_score=round(total, 10),
        lenient_curie=lenient_curie,
        **_information_fields(index, pred.curie, truth.curie if truth else None, relationship),
        label_mismatch=index.label_mismatch(pred.label, pred.curie),
        ontology_status="checked",
    )


def _unknown(curie: str, label: str, truth: ParsedTerm | None, in_enum: bool | None,
             lenient_curie: str | None) -> EbsScore:
    """The score of a parsed answer when the ontology could not be read: what needs no ontology (the CURIE's
    equality with the truth's, the value set), and every ontology check unknown, the composite not computed."""
    return EbsScore(
        parse_success=True, pred_curie=curie, pred_label=label, truth_curie=truth.curie if truth else None,
        truth_label=truth.label if truth else None, curie_label_valid=None,
        exact_match=truth is not None and curie == truth.curie, relationship=None, hop_distance=None,
        in_template_enum=in_enum, hierarchy_score=None, enum_score=enum_score(in_enum), ontology_score=None,
        lenient_curie=lenient_curie, ontology_status="unknown")


def _information_fields(index: OntologyIndex, pred: str | None, truth: str | None,
                        relationship: Relationship | None) -> dict[str, object]:
    """The columns beside upstream's: ``relationship_detail`` and what the answer missed and asserted falsely."""
    if truth is None:
        return {}
    missed, false, missed_n, false_n = index.information(pred, truth)
    detail = index.detail(relationship, pred, truth) if pred is not None else None
    return {"relationship_detail": detail, "missed_information": missed, "false_information": false,
            "missed_terms": missed_n, "false_terms": false_n}


def score_ebs_batch(
    rows: Iterable[tuple[str, str, frozenset[str] | None]],
    *,
    index: OntologyIndex,
) -> list[tuple]:
    """Score many predictions at once: for each ``(response, ideal, allowed)``, the fields of
    :func:`score_ebs`'s :class:`EbsScore` as a tuple, in the dataclass's field order.

    The values are exactly those :func:`score_ebs` gives row by row; a response,
    an ideal and a (prediction, truth) pair that recur are parsed or looked up
    in the ontology once, and no :class:`EbsScore` objects are built.

    Example:
        >>> score_ebs_batch([("forest biome [ENVO:01000174]", "forest biome [ENVO:01000174]", None)],
        ...                 index=index)[0][-2]  # doctest: +SKIP
        0.95
    """
    ideals: dict[str, tuple[str | None, str | None]] = {}
    responses: dict[str, tuple] = {}
    relations: dict[tuple[str, str], tuple[Relationship, int | None, float]] = {}
    said: dict[tuple[str | None, str | None], tuple] = {}  # (prediction, truth) -> the information columns
    labels = index.labels
    parse = parse_label_curie.__wrapped__  # distinct texts only: this loop memoizes them itself
    out = []
    append = out.append
    for response, ideal, allowed in rows:
        truth = ideals.get(ideal)
        if truth is None:
            parsed = parse(ideal)
            truth = ideals[ideal] = (parsed.curie, parsed.label) if parsed else (None, None)
        pred = responses.get(response)
        if pred is None:
            parsed = parse(response)
            lenient = _CURIE_IN_PROSE.search(response or "")
            if parsed is None:
                pred = (None, None, None, lenient.group(1) if lenient else None, None)
            else:
                canonical = labels.get(parsed.curie)
                valid = canonical is not None and canonical.casefold() == parsed.label.casefold()
                pred = (parsed.curie, parsed.label, valid, lenient.group(1) if lenient else None,
                        index.label_mismatch(parsed.label, parsed.curie))
            responses[response] = pred
        curie, label, label_valid, lenient_curie, mismatch = pred
        truth_curie, truth_label = truth
        if index.unreadable is not None:  # every ontology check unknown: as score_ebs has it, row by row
            append(tuple(score_ebs(response, ideal, index=index, allowed=allowed).__dict__.values()))
            continue
        if curie is None:
            extra = said.get((None, truth_curie))
            if extra is None:
                extra = said[(None, truth_curie)] = _information_tuple(index, None, truth_curie, None)
            append((False, None, None, truth_curie, truth_label, None, False, None, None, None, 0.0, 0.0, 0.0,
                    lenient_curie, *extra, None, None))
            continue
        in_enum = None if allowed is None else curie in allowed
        if truth_curie is None:
            relationship, hops, hier = None, None, 0.0
        else:
            known = relations.get((curie, truth_curie))
            if known is None:
                rel, dist = index.relationship(curie, truth_curie)
                known = relations[(curie, truth_curie)] = (rel, dist, hierarchy_score(rel, dist))
            relationship, hops, hier = known
        enum_part = ENUM_NEUTRAL if in_enum is None else (1.0 if in_enum else 0.0)
        total = W_PARSE + W_LABEL * label_valid + W_HIER * hier + W_ENUM * enum_part
        extra = said.get((curie, truth_curie))
        if extra is None:
            extra = said[(curie, truth_curie)] = _information_tuple(index, curie, truth_curie, relationship)
        append((True, curie, label, truth_curie, truth_label, label_valid, truth_curie is not None and curie == truth_curie,
                relationship, hops, in_enum, hier, enum_part, round(total, 10), lenient_curie, *extra, mismatch,
                "checked"))
    return out


def _information_tuple(index: OntologyIndex, pred: str | None, truth: str | None,
                       relationship: Relationship | None) -> tuple:
    """:func:`_information_fields` as the tuple of :class:`EbsScore`'s last fields, in order."""
    fields = _information_fields(index, pred, truth, relationship)
    return tuple(fields.get(name) for name in INFORMATION_FIELDS)


INFORMATION_FIELDS = ("relationship_detail", "missed_information", "false_information", "missed_terms", "false_terms")
