"""The IBF rubric: five dimensions scored 0-4, one response's scores, and the pass rule for one item."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from scorers.ibf_reference import Evidence

DIMENSIONS: tuple[str, ...] = (
    "hazard_recognition",
    "impact_reasoning",
    "uncertainty_handling",
    "action_relevance",
    "geographic_specificity",
)
MIN_SCORE = 0
MAX_SCORE = 4
PASS_THRESHOLD = 2
REFERENCE_SCORER = "reference"


@dataclass(frozen=True)
class IbfScore:
    """The five rubric scores of one response and the scorer that made them.

    Attributes:
        hazard_recognition: 0-4, or None when unscored.
        impact_reasoning: 0-4, or None when unscored.
        uncertainty_handling: 0-4, or None when unscored.
        action_relevance: 0-4, or None when unscored.
        geographic_specificity: 0-4, or None when unscored.
        scorer: which scorer made the scores: ``reference`` or ``judge:<model id>``.
        unscored_reason: why some or all dimensions are unscored (None when all are scored).
        evidence: the reference scorer's evidence per dimension (see :data:`scorers.ibf_reference.Evidence`);
            None from a judge. Not a column of the scored table, so not in :meth:`as_dict`.
    """

    hazard_recognition: int | None
    impact_reasoning: int | None
    uncertainty_handling: int | None
    action_relevance: int | None
    geographic_specificity: int | None
    scorer: str
    unscored_reason: str | None = None
    evidence: dict[str, Evidence] | None = field(default=None, compare=False)

    @classmethod
    def unscored(cls, scorer: str, reason: str) -> IbfScore:
        """A response none of whose dimensions could be scored (not a zero)."""
        return cls(None, None, None, None, None, scorer=scorer, unscored_reason=reason)

    @property
    def values(self) -> tuple[int | None, ...]:
        """The five scores in rubric order."""
        return tuple(getattr(self, name) for name in DIMENSIONS)

    @property
    def item_mds(self) -> float | None:
        """The item's mean over its scored dimensions (None when none is scored)."""
        scored = [v for v in self.values if v is not None]
        return sum(scored) / len(scored) if scored else None

    @property
    def passes_threshold(self) -> bool | None:
        """All five scores >= 2; None when any dimension is unscored."""
        return passes_threshold(self.values)

    def as_dict(self) -> dict[str, int | str | None]:
        """The five scores, scorer and reason as a flat dict (the scored table's columns)."""
        return {**dict(zip(DIMENSIONS, self.values)), "scorer": self.scorer, "unscored_reason": self.unscored_reason}


def passes_threshold(scores: Sequence[int | None], *, threshold: int = PASS_THRESHOLD) -> bool | None:
    """Whether all five scores reach ``threshold``; None when any is unscored.

    Example:
        >>> passes_threshold([4, 3, 3, 4, 3])
        True
    """
    if any(s is None for s in scores):
        return None
    return all(s >= threshold for s in scores)
