"""How well a scorer agrees with people's rubric grades: kappa, alpha, MAE and confusion per IBF dimension.

Each graded line pairs a person's 0-4 grade with the scorer's grade of the
same response. Per dimension, over the lines where both graded it:

* quadratic-weighted Cohen's kappa (scikit-learn's ``cohen_kappa_score``
  over the labels 0-4), with the base rate: the share of the most common
  human grade, what always answering that grade would match;
* Krippendorff's alpha at the ordinal level (the ``krippendorff`` package),
  each line a unit coded by the person and the scorer;
* the mean absolute error, and the 5x5 confusion of grades (rows: human,
  columns: scorer).

Each statistic has a seeded cluster-bootstrap ci95 that resamples corpus
items with all their graded lines (:mod:`fieldeval.stats`). A resample's
kappa and alpha are computed from its weighted confusion matrix, all
resamples at once; at unit weights they are the libraries' values.
Everything here is pure: grades in, numbers out.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from fieldeval.stats import DEFAULT_RESAMPLES, DEFAULT_SEED, Design, interval, widening
from scorers.ibf import DIMENSIONS, MAX_SCORE, MIN_SCORE

GRADES: tuple[int, ...] = tuple(range(MIN_SCORE, MAX_SCORE + 1))
KAPPA_RANGE = (-1.0, 1.0)  # quadratic-weighted kappa is 2cov / (var_h + var_s + (mean_h - mean_s)^2)
ALPHA_RANGE = (-1.0, 1.0)  # with two coders per unit, ordinal alpha is above -1
MAE_RANGE = (0.0, float(MAX_SCORE - MIN_SCORE))


@dataclass(frozen=True)
class GradedPair:
    """One graded line beside the scorer's grades of the same response.

    Attributes:
        item_id: the corpus item the response answers (the bootstrap's cluster).
        response: the response text (lines with the same item and text are one response).
        human: the person's grade per dimension (None or absent: not graded).
        scorer: the scorer's grade per dimension (None or absent: unscored).
    """

    item_id: str
    response: str
    human: Mapping[str, int | None]
    scorer: Mapping[str, int | None]


def agreement(pairs: Sequence[GradedPair], *, scorer: str = "reference", resamples: int = DEFAULT_RESAMPLES,
              seed: int = DEFAULT_SEED) -> dict:
    """Agreement of the scorer with people on each IBF dimension.

    Args:
        pairs: the graded lines, each with the scorer's grades of its response.
        scorer: the scorer's name, reported as it is (``reference`` or ``judge:<model>``).
        resamples: bootstrap resamples of corpus items.
        seed: the bootstrap's seed; the same pairs and seed give the same intervals.

    Returns:
        ``{"n_responses", "n_items", "scorer", "dimensions": {dimension: ...}}``, each dimension as
        :func:`dimension_agreement` gives it.

    Example:
        >>> pair = GradedPair("ibf_0001", "...", {"hazard_recognition": 3}, {"hazard_recognition": 3})
        >>> agreement([pair], resamples=10)["dimensions"]["hazard_recognition"]["mae"]["value"]
        0.0
    """
    items = [p.item_id for p in pairs]
    return {
        "n_responses": len({(p.item_id, p.response) for p in pairs}),
        "n_items": len(set(items)),
        "scorer": scorer,
        "dimensions": {
            name: dimension_agreement([p.human.get(name) for p in pairs], [p.scorer.get(name) for p in pairs],
                                      items, resamples=resamples, seed=seed)
            for name in DIMENSIONS
        },
    }


def dimension_agreement(human: Sequence[int | None], scorer: Sequence[int | None], items: Sequence[str], *,
                        resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> dict:
    """Kappa, alpha and MAE (each ``{"value", "ci95"}``), base rate and confusion of one dimension.

    Args:
        human: the person's grade per line (None: not graded; the line is left out).
        scorer: the scorer's grade per line (None: unscored; the line is left out).
        items: each line's corpus item; the bootstrap resamples items with all their lines.
        resamples: bootstrap resamples.
        seed: the bootstrap's seed.

    Returns:
        ``{"kappa", "alpha", "mae", "base_rate", "confusion"}``: a value is None where it is not
        defined (kappa and alpha when neither side varies, everything when no line has both grades),
        ``confusion[h][s]`` counts the lines the person graded ``h`` and the scorer ``s``.

    Example:
        >>> dimension_agreement([0, 2, 4], [0, 2, 4], ["a", "b", "c"], resamples=10)["kappa"]["value"]
        1.0
    """
    both = np.array([h is not None and s is not None for h, s in zip(human, scorer, strict=True)], dtype=bool)
    data = np.array([(h, s) for h, s, keep in zip(human, scorer, both) if keep], dtype=np.int64).reshape(-1, 2)
    n = len(data)
    confusion = confusion_matrix(data)
    counts = confusion.sum(axis=1)
    base_rate = _round(counts.max() / n) if n else None
    design = Design(clusters=tuple(items)).subset(both)
    return {
        "kappa": _measure(data, design, kappa_point, kappa_batch, KAPPA_RANGE, resamples=resamples, seed=seed),
        "alpha": _measure(data, design, alpha_point, alpha_batch, ALPHA_RANGE, resamples=resamples, seed=seed),
        "mae": _measure(data, design, mae_point, mae_batch, MAE_RANGE, resamples=resamples, seed=seed),
        "base_rate": base_rate,
        "confusion": confusion.tolist(),
    }


def confusion_matrix(data: np.ndarray) -> np.ndarray:
    """The 5x5 counts of ``(human, scorer)`` grade pairs (rows: human grade 0-4, columns: scorer grade)."""
    size = len(GRADES)
    flat = (data[:, 0] - MIN_SCORE) * size + (data[:, 1] - MIN_SCORE)
    return np.bincount(flat, minlength=size * size).reshape(size, size)


def kappa_point(data: np.ndarray) -> float:
    """Quadratic-weighted Cohen's kappa of ``(human, scorer)`` rows over the labels 0-4; NaN when undefined."""
    from sklearn.metrics import cohen_kappa_score

    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore")  # undefined (one label in common, or no spread): NaN, said by the caller
        return float(cohen_kappa_score(data[:, 0], data[:, 1], weights="quadratic", labels=list(GRADES)))


def alpha_point(data: np.ndarray) -> float:
    """Krippendorff's ordinal alpha of ``(human, scorer)`` rows, each row a unit; NaN when undefined."""
    import krippendorff

    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore")
        try:
            return float(krippendorff.alpha(reliability_data=data.T.astype(float), level_of_measurement="ordinal",
                                            value_domain=list(GRADES)))
        except (ValueError, ZeroDivisionError):  # too few pairable values
            return float("nan")


def mae_point(data: np.ndarray) -> float:
    """The mean absolute difference of human and scorer grades."""
    return float(np.abs(data[:, 0] - data[:, 1]).mean())


def kappa_batch(data: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Quadratic-weighted kappa under each row of ``weights`` (how often each line is drawn)."""
    confusion = _weighted_confusion(data, weights)
    total = confusion.sum(axis=(1, 2))
    expected = confusion.sum(axis=2)[:, :, None] * confusion.sum(axis=1)[:, None, :]
    distance = _squared_distance()
    with np.errstate(invalid="ignore", divide="ignore"):
        observed = (confusion * distance).sum(axis=(1, 2))
        return 1 - observed * total / (expected * distance).sum(axis=(1, 2))


def alpha_batch(data: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Ordinal Krippendorff's alpha under each row of ``weights``: the distance of two grades is the squared
    difference of their mid-ranks among all the values coded."""
    confusion = _weighted_confusion(data, weights)
    coincidence = confusion + confusion.transpose(0, 2, 1)  # each unit: two values, each pair counted both ways
    values = coincidence.sum(axis=2)
    total = values.sum(axis=1)
    midrank = np.cumsum(values, axis=1) - values / 2
    distance = (midrank[:, :, None] - midrank[:, None, :]) ** 2
    expected = (values[:, :, None] * values[:, None, :] * distance).sum(axis=(1, 2))
    with np.errstate(invalid="ignore", divide="ignore"):
        return 1 - (total - 1) * (coincidence * distance).sum(axis=(1, 2)) / expected


def mae_batch(data: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The mean absolute error under each row of ``weights``."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return weights @ np.abs(data[:, 0] - data[:, 1]) / weights.sum(axis=1)


def _weighted_confusion(data: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``(k, 5, 5)``: the confusion matrix of each resample, lines counted by their weights."""
    size = len(GRADES)
    cells = (data[:, 0] - MIN_SCORE) * size + (data[:, 1] - MIN_SCORE)
    return (weights @ np.eye(size * size)[cells]).reshape(-1, size, size)


def _squared_distance() -> np.ndarray:
    grades = np.array(GRADES, dtype=float)
    return (grades[:, None] - grades[None, :]) ** 2


def _measure(data: np.ndarray, design: Design, point_of, batch, bounds: tuple[float, float], *,
             resamples: int, seed: int) -> dict:
    """``{"value", "ci95"}``: the statistic and its cluster-bootstrap percentile interval within ``bounds``."""
    n = len(data)
    point = point_of(data) if n else float("nan")
    if np.isnan(point):
        return {"value": None, "ci95": [None, None]}
    boot = np.concatenate([batch(data, w) for w in design.weight_blocks(n, resamples=resamples, seed=seed)])
    low, high = interval(point, boot, widening(design, n), bounds)
    return {"value": _round(min(max(point, bounds[0]), bounds[1])), "ci95": [low, high]}


def _round(value: float) -> float:
    return round(float(value), 6)


__all__ = ["ALPHA_RANGE", "GRADES", "GradedPair", "KAPPA_RANGE", "MAE_RANGE", "agreement", "alpha_batch",
           "alpha_point", "confusion_matrix", "dimension_agreement", "kappa_batch", "kappa_point", "mae_batch",
           "mae_point"]
