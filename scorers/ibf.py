"""Impact-based forecasting (IBF): the five-dimension 0-4 rubric, its scorers, MDS and TPR.

Every response is scored 0-4 on five dimensions (the IBF-SLM rubric):
hazard_recognition, impact_reasoning, uncertainty_handling, action_relevance
and geographic_specificity. A dimension that could not be scored (a judge
reply that does not parse, a value out of range) is *unscored*: None, never 0.

Two scorers make scores:

* :func:`score_reference`, the deterministic offline scorer, from the item's
  reference notes (its mapping to 0-4 is in its docstring);
* :func:`parse_judgement`, which reads an LLM judge's JSON reply robustly.

Aggregates: a dimension mean ignores unscored values; the mean dimension
score (MDS) is the mean of the five dimension means; the threshold pass rate
(TPR) is the share of *fully scored* items whose five scores are all >= 2.

The rubric's records are in :mod:`scorers.ibf_rubric` and the judge's reader in
:mod:`scorers.ibf_judge`; this module is the face of all three. Everything here
is pure: text and references in, numbers out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Literal

from scorers.ibf_judge import JUDGE_SCHEMA, judge_rationale, parse_judgement
from scorers.ibf_reference import reference_scores
from scorers.ibf_rubric import (
    DIMENSIONS,
    MAX_SCORE,
    MIN_SCORE,
    PASS_THRESHOLD,
    REFERENCE_SCORER,
    IbfScore,
    passes_threshold,
)

if TYPE_CHECKING:
    import numpy as np

MDS_STRONG = 3.0
MDS_PARTIAL = 2.0
TPR_MINIMUM = 0.4

Band = Literal["strong", "partial", "unsuitable"]


# --- aggregate metrics ------------------------------------------------------------------------


def dimension_mean(values: Iterable[int | float | None]) -> float | None:
    """Mean of one dimension's scored values; unscored (None) values are left out.

    Args:
        values: one score per item, None for unscored.

    Returns:
        The mean, or None when no value is scored.

    Example:
        >>> dimension_mean([4, None, 2])
        3.0
    """
    scored = [float(v) for v in values if v is not None]
    return sum(scored) / len(scored) if scored else None


def mean_dimension_score(dimension_means: Sequence[float | None]) -> float | None:
    """MDS: the arithmetic mean of the five dimension means.

    Args:
        dimension_means: the five means in rubric order (None where a dimension has no scored value).

    Returns:
        The mean of the means present, or None when none is present.

    Example:
        >>> round(mean_dimension_score([3.12, 2.47, 1.83, 2.91, 2.68]), 2)
        2.6
    """
    present = [float(m) for m in dimension_means if m is not None]
    return sum(present) / len(present) if present else None


def mds_batch(samples: np.ndarray) -> np.ndarray:
    """MDS of each of ``k`` samples shaped (k, items, 5), NaN for unscored: nan-aware dimension means, then their mean.

    The one implementation of MDS over items: a run's value is ``mds_batch(matrix[np.newaxis])[0]``
    and its bootstrap passes every resample at once.

    Example:
        >>> import numpy as np
        >>> float(mds_batch(np.array([[[4, 3, 3, 4, 3], [2, np.nan, 1, 2, 3]]]))[0])
        2.8
    """
    import numpy as np

    scored = ~np.isnan(samples)
    counts = scored.sum(axis=1)
    sums = np.where(scored, samples, 0.0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = sums / counts
        present = ~np.isnan(means)
        return np.where(present, means, 0.0).sum(axis=1) / present.sum(axis=1)


def mds_weights(matrix: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """MDS of an (items, 5) score matrix (NaN: unscored) under each row of item ``weights`` (``(k, items)``).

    Equals :func:`mds_batch` of the drawn sample: weights count how often each item is drawn.
    """
    import numpy as np

    scored = ~np.isnan(matrix)
    counts = weights @ scored
    sums = weights @ np.where(scored, matrix, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = sums / counts
        present = ~np.isnan(means)
        return np.where(present, means, 0.0).sum(axis=1) / present.sum(axis=1)



def threshold_pass_rate(items: Iterable[Sequence[int | None]], *, threshold: int = PASS_THRESHOLD) -> float | None:
    """TPR: the share of fully scored items whose five scores are all >= ``threshold``.

    Items with any unscored dimension are left out of numerator and denominator.

    Args:
        items: the five scores of each item.
        threshold: the minimum every dimension must reach (2, "partial").

    Returns:
        The rate in [0, 1], or None when no item is fully scored.

    Example:
        >>> threshold_pass_rate([[4, 3, 3, 4, 3], [1, 2, 2, 2, 2], [4, None, 4, 4, 4]])
        0.5
    """
    verdicts = [passes_threshold(s, threshold=threshold) for s in items]
    decided = [v for v in verdicts if v is not None]
    return sum(decided) / len(decided) if decided else None


def run_scores(items: Iterable[Sequence[int | None]]) -> dict:
    """The seed's per-run numbers for a list of items' five scores.

    Returns:
        ``{"scores": {dimension: mean}, "mean_dimension_score", "threshold_pass_rate", "total_items"}``
        unrounded; None where nothing is scored.

    Example:
        >>> run_scores([[4, 3, 3, 4, 3]])["mean_dimension_score"]
        3.4
    """
    import numpy as np

    rows = [tuple(s) for s in items]
    means = {name: dimension_mean(r[i] for r in rows) for i, name in enumerate(DIMENSIONS)}
    matrix = np.array([[np.nan if v is None else float(v) for v in r] for r in rows], dtype=float)
    mds = float(mds_batch(matrix.reshape(1, len(rows), len(DIMENSIONS)))[0]) if rows else float("nan")
    return {
        "scores": means,
        "mean_dimension_score": None if mds != mds else mds,
        "threshold_pass_rate": threshold_pass_rate(rows),
        "total_items": len(rows),
    }


def mds_band(mds: float | None) -> Band | None:
    """The seed's reading of an MDS: below 2 unsuitable, 2 to below 3 partial, 3 and above strong."""
    if mds is None:
        return None
    if mds >= MDS_STRONG:
        return "strong"
    return "partial" if mds >= MDS_PARTIAL else "unsuitable"


def reading(mds: float | None, tpr: float | None) -> dict:
    """The seed's reading bands for a run: the MDS band, the TPR floor and the overall verdict.

    A TPR below 0.4 makes a model unsuitable for end-to-end IBF tasks whatever its MDS.

    Example:
        >>> reading(3.21, 0.30)["overall"]
        'unsuitable'
    """
    band = mds_band(mds)
    tpr_ok = None if tpr is None else tpr >= TPR_MINIMUM
    overall = "unsuitable" if tpr_ok is False else band
    return {"mds_band": band, "tpr_meets_minimum": tpr_ok, "overall": overall}


# --- the reference scorer ---------------------------------------------------------------------


def score_reference(response: str, references: Mapping) -> IbfScore:
    """Score a response 0-4 on each dimension from the item's reference notes, deterministically.

    Matching is lexical (no model, no I/O): a reference phrase counts as present when at least
    half of its content words (all of them for hazard names and place names)
    occur in the response, comparing the first six letters of each word; the
    hazard's own name (and "forecast", "warning", "alert") never counts towards an impact, uncertainty or action.

    The mapping to the rubric (4 excellent ... 0 absent):

    * hazard_recognition: 4 the hazard type or a synonym is named *and* one of
      its magnitude indicators (e.g. "discharge", "wind speed", "SPI");
      3 the hazard is named; otherwise the evidence in everyday words counts
      (part of its name, e.g. "flood" for a flash flood, and each everyday
      descriptor of its type, e.g. "the river will burst its banks" for a
      riverine flood, see :mod:`scorers.ibf_lexicon`): 3 for two pieces or
      more, 2 for one; 1 when another hazard type has more evidence (a
      different hazard) or only some other hazard word occurs; 0 none.
    * impact_reasoning: 1 + the number of impact kinds (societal, agricultural,
      infrastructure) with at least one expected impact named, so 4 needs all
      three; 2 when impacts are told only in everyday words (a thing that gets
      hurt, "homes", "herds", near a harm, "swept away", "starve"); 1 for
      generic impact words only; 0 none. An answer about a different hazard
      gets at most 1.
    * uncertainty_handling: 0 when uncertainty is never acknowledged (no hedge
      word and no key uncertainty); otherwise 1 + 1 if it is quantified (a
      percentage, a ± or a range) + the key uncertainties named (at most 2),
      less 1 for overconfident wording ("will certainly", "guaranteed"),
      clipped to 0-4.
    * action_relevance: 1 + the expected anticipatory actions named, at most 4;
      1 also for generic action words only; 0 none.
    * geographic_specificity: 4 an admin-2 (district) unit with its country or
      admin-1 unit; 3 an admin-1 unit (or a district alone); 2 the country
      only; 1 only a physical feature (a basin, a coast); 0 no place.

    Args:
        response: the model's raw response.
        references: the item's reference notes: ``hazard`` (type, synonyms,
            indicators), ``impacts`` (societal, agricultural, infrastructure),
            ``uncertainties``, ``actions``, ``geography`` (country, admin1,
            admin2, features).

    Returns:
        The five scores, with scorer ``reference`` and each dimension's ``evidence`` (the reference phrases
        found and missing, and the response's words that counted); an empty response scores 0 everywhere.

    Example:
        >>> refs = {"hazard": {"type": "riverine flood", "synonyms": ["flood"], "indicators": ["discharge"]}}
        >>> score_reference("Peak discharge of the flood ...", refs).hazard_recognition
        4
    """
    scores, evidence = reference_scores(response, references)
    return IbfScore(**scores, scorer=REFERENCE_SCORER, evidence=evidence)


__all__ = ["DIMENSIONS", "JUDGE_SCHEMA", "MAX_SCORE", "MDS_PARTIAL", "MDS_STRONG", "MIN_SCORE", "PASS_THRESHOLD",
           "REFERENCE_SCORER", "TPR_MINIMUM", "Band", "IbfScore", "dimension_mean", "judge_rationale", "mds_band",
           "mds_batch", "mds_weights", "mean_dimension_score", "parse_judgement", "passes_threshold", "reading",
           "run_scores", "score_reference", "threshold_pass_rate"]
