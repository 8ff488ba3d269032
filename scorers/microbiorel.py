"""Exact-match relation classification scores for MicrobioRel (El Khettari et al. 2025).

Post-processing, shared by the eval, the CLI and every model: trim whitespace,
quotes, trailing punctuation and a leading ``Relation:`` / ``Answer:`` /
``Class:`` (repeatedly, in any order); what is left maps to a class when it
equals the class name ignoring case. Anything else is invalid: it is a wrong
prediction (never dropped) and lowers ``parse_rate``.

Weighted F1 follows the seed's recipe: per-class F1 weighted by gold support,
not derived from weighted precision and recall. Careful: ``"None"`` is a
class (a string); an invalid prediction is the Python value ``None``.

Everything here is pure: labels in, numbers out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

RELATION_CLASSES: tuple[str, ...] = (
    "affects",
    "Associated_with",
    "causes",
    "complicates",
    "decrease",
    "experiences",
    "improve",
    "increase",
    "Interacts_with",
    "Location_of",
    "Marker/Mechanism",
    "Negative_correlation",
    "part_of",
    "Physically_related_to",
    "possible",
    "presence",
    "prevents",
    "reveals",
    "start",
    "stop",
    "treats",
    "worsen",
    "None",
)
"""The 23 MicrobioRel classes: 22 relation types plus the string ``"None"`` (no relation)."""

INVALID_LABEL = "(invalid)"
"""Column name of invalid predictions in the confusion matrix."""

_QUOTES = "\"'`\u201c\u201d\u2018\u2019"
_TRAILING_PUNCTUATION = ".,;:!?"
_PREFIX = re.compile(r"^(?:relation|answer|class)\s*:\s*", flags=re.IGNORECASE)


def clean_response(text: str) -> str:
    """The response after the post-processing trims, before matching a class."""
    previous = None
    while text != previous:
        previous = text
        text = text.strip().strip(_QUOTES).rstrip(_TRAILING_PUNCTUATION)
        text = _PREFIX.sub("", text)
    return text


def normalize_relation(response: str | None, *, classes: Sequence[str] = RELATION_CLASSES) -> str | None:
    """Map a model response to a relation class, or None when it is invalid.

    Args:
        response: the raw response text (None counts as invalid).
        classes: the class names to match, compared ignoring case.

    Returns:
        The class name as spelled in ``classes``, or None (the Python value)
        when the cleaned response is not exactly one class name.

    Example:
        >>> normalize_relation(' Answer: "increase". ')
        'increase'
        >>> normalize_relation("none")
        'None'
        >>> normalize_relation("It increases it") is None
        True
    """
    if response is None:
        return None
    by_fold = {name.casefold(): name for name in classes}
    return by_fold.get(clean_response(str(response)).casefold())


@dataclass(frozen=True)
class ClassScore:
    """Exact-match scores of one class.

    Attributes:
        precision: tp / predicted (0 when never predicted).
        recall: tp / support (0 when no support).
        f1: 2PR / (P + R) (0 when both are 0).
        support: gold items of the class.
    """

    precision: float
    recall: float
    f1: float
    support: int


@dataclass(frozen=True)
class RelationScores:
    """Every metric of one model's predictions.

    Attributes:
        weighted_f1: per-class F1 weighted by gold support (the seed's recipe).
        weighted_precision: per-class precision weighted by gold support.
        weighted_recall: per-class recall weighted by gold support (equals accuracy).
        macro_f1: unweighted mean F1 over the classes present in the gold labels.
        accuracy: share of exact matches.
        parse_rate: share of predictions that are a class.
        n: number of items.
        per_class: class -> its scores, for every class.
        confusion_matrix: ``{"labels", "columns", "matrix"}``: gold rows by predicted columns,
            with a last column for invalid predictions.
    """

    weighted_f1: float
    weighted_precision: float
    weighted_recall: float
    macro_f1: float
    accuracy: float
    parse_rate: float
    n: int
    per_class: dict[str, ClassScore]
    confusion_matrix: dict


def encode_labels(
    golds: Sequence[str],
    preds: Sequence[str | None],
    *,
    classes: Sequence[str] = RELATION_CLASSES,
) -> np.ndarray:
    """An ``(n, 2)`` int array of (gold, prediction) class indices; invalid predictions get ``len(classes)``.

    Args:
        golds: gold class names, each one of ``classes``.
        preds: predicted class names; anything not in ``classes`` is invalid.
        classes: the class names.

    Returns:
        The codes the vectorised metrics take.

    Raises:
        ValueError: a gold label is not a class, or the lengths differ.

    Example:
        >>> encode_labels(["None", "causes"], ["None", "bogus"]).tolist()
        [[22, 22], [2, 23]]
    """
    import numpy as np

    if len(golds) != len(preds):
        raise ValueError(f"{len(golds)} gold labels but {len(preds)} predictions; pass one prediction per item")
    index = {name: i for i, name in enumerate(classes)}
    unknown = sorted({g for g in golds if g not in index}, key=str)
    if unknown:
        raise ValueError(f"gold label(s) {', '.join(map(repr, unknown[:5]))} are not classes; use one of {list(classes)}")
    invalid = len(classes)
    codes = np.empty((len(golds), 2), dtype=np.int64)
    codes[:, 0] = [index[g] for g in golds]
    codes[:, 1] = [index.get(p, invalid) if isinstance(p, str) else invalid for p in preds]
    return codes


def _counts(codes: np.ndarray, n_classes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-sample (support, predicted, tp) counts of shape ``(k, n_classes)`` from ``(k, n, 2)`` codes."""
    import numpy as np

    k = codes.shape[0]
    width = n_classes + 1
    offset = (np.arange(k, dtype=np.int64) * width)[:, None]
    gold, pred = codes[..., 0], codes[..., 1]
    size = k * width
    support = np.bincount((gold + offset).ravel(), minlength=size).reshape(k, width)[:, :n_classes]
    predicted = np.bincount((pred + offset).ravel(), minlength=size).reshape(k, width)[:, :n_classes]
    hits = np.where(gold == pred, gold + offset, size)
    tp = np.bincount(hits.ravel(), minlength=size + 1)[:size].reshape(k, width)[:, :n_classes]
    return support, predicted, tp


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    import numpy as np

    return np.divide(num, den, out=np.zeros(num.shape, dtype=float), where=den > 0)


def _per_class(codes: np.ndarray, n_classes: int) -> tuple[np.ndarray, ...]:
    """Per-sample support, precision, recall and F1, each ``(k, n_classes)``."""
    support, predicted, tp = _counts(codes, n_classes)
    precision = _ratio(tp, predicted)
    recall = _ratio(tp, support)
    f1 = _ratio(2 * precision * recall, precision + recall)
    return support, precision, recall, f1


def per_class_f1_batch(codes: np.ndarray, *, n_classes: int = len(RELATION_CLASSES)) -> np.ndarray:
    """Each class's F1 (0 where undefined) per sample of a ``(k, n, 2)`` code array: a ``(k, n_classes)`` array."""
    return _per_class(codes, n_classes)[3]


def _weighted(values: np.ndarray, support: np.ndarray) -> np.ndarray:
    return (values * support).sum(axis=1) / support.sum(axis=1)


def weighted_f1_batch(codes: np.ndarray, *, n_classes: int = len(RELATION_CLASSES)) -> np.ndarray:
    """Weighted F1 of every sample in a ``(k, n, 2)`` code array at once.

    Args:
        codes: ``k`` samples of ``n`` (gold, prediction) codes from :func:`encode_labels`
            (a bootstrap passes every resample at once).
        n_classes: number of classes; code ``n_classes`` is an invalid prediction.

    Returns:
        ``k`` weighted F1 values.

    Example:
        >>> codes = encode_labels(["None", "causes"], ["None", "bogus"])
        >>> weighted_f1_batch(codes[None]).tolist()
        [0.5]
    """
    support, _, _, f1 = _per_class(codes, n_classes)
    return _weighted(f1, support)


def weighted_precision_batch(codes: np.ndarray, *, n_classes: int = len(RELATION_CLASSES)) -> np.ndarray:
    """Weighted precision of every sample in a ``(k, n, 2)`` code array; see :func:`weighted_f1_batch`."""
    support, precision, _, _ = _per_class(codes, n_classes)
    return _weighted(precision, support)


def weighted_recall_batch(codes: np.ndarray, *, n_classes: int = len(RELATION_CLASSES)) -> np.ndarray:
    """Weighted recall of every sample in a ``(k, n, 2)`` code array; see :func:`weighted_f1_batch`."""
    support, _, recall, _ = _per_class(codes, n_classes)
    return _weighted(recall, support)


def macro_f1_batch(codes: np.ndarray, *, n_classes: int = len(RELATION_CLASSES)) -> np.ndarray:
    """Mean F1 over the classes with gold support, per sample of a ``(k, n, 2)`` code array."""
    support, _, _, f1 = _per_class(codes, n_classes)
    present = support > 0
    return (f1 * present).sum(axis=1) / present.sum(axis=1)


def weighted_class_scores(codes: np.ndarray, weights: np.ndarray,
                           n_classes: int = len(RELATION_CLASSES)) -> tuple[np.ndarray, ...]:
    """Per-class support, precision, recall and F1 under each row of item ``weights`` (``(k, n)``).

    ``codes`` is one ``(n, 2)`` array of (gold, prediction) codes; a weight is how often an item is
    drawn in a resample, so weights of ones give the run's own scores (see :func:`weighted_f1_batch`).
    """
    import numpy as np

    eye = np.eye(n_classes + 1)
    gold, pred = eye[codes[:, 0]][:, :n_classes], eye[codes[:, 1]][:, :n_classes]
    hit = gold * (codes[:, 0] == codes[:, 1])[:, None]
    support, predicted, tp = weights @ gold, weights @ pred, weights @ hit
    precision = _ratio(tp, predicted)
    recall = _ratio(tp, support)
    return support, precision, recall, _ratio(2 * precision * recall, precision + recall)


def weighted_f1_weights(codes: np.ndarray, weights: np.ndarray, *, n_classes: int = len(RELATION_CLASSES)) -> np.ndarray:
    """Weighted F1 under each row of item weights; equals :func:`weighted_f1_batch` of the drawn sample."""
    support, _, _, f1 = weighted_class_scores(codes, weights, n_classes)
    return _weighted(f1, support)


def weighted_precision_weights(codes: np.ndarray, weights: np.ndarray, *,
                               n_classes: int = len(RELATION_CLASSES)) -> np.ndarray:
    """Weighted precision under each row of item weights."""
    support, precision, _, _ = weighted_class_scores(codes, weights, n_classes)
    return _weighted(precision, support)


def weighted_recall_weights(codes: np.ndarray, weights: np.ndarray, *,
                            n_classes: int = len(RELATION_CLASSES)) -> np.ndarray:
    """Weighted recall under each row of item weights."""
    support, _, recall, _ = weighted_class_scores(codes, weights, n_classes)
    return _weighted(recall, support)


def macro_f1_weights(codes: np.ndarray, weights: np.ndarray, *, n_classes: int = len(RELATION_CLASSES)) -> np.ndarray:
    """Mean F1 over the classes with gold support, under each row of item weights."""
    import numpy as np

    support, _, _, f1 = weighted_class_scores(codes, weights, n_classes)
    present = support > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        return (f1 * present).sum(axis=1) / present.sum(axis=1)


def weighted_f1(
    golds: Sequence[str],
    preds: Sequence[str | None],
    *,
    classes: Sequence[str] = RELATION_CLASSES,
) -> float:
    """Weighted F1 by the seed's exact-match recipe.

    Args:
        golds: gold class names.
        preds: predicted class names; anything not in ``classes`` (None included) is wrong.
        classes: the class names.

    Returns:
        Σ support_c / n × F1_c over the classes; 0.0 for no items.

    Example:
        >>> weighted_f1(["None", "None", "causes"], ["None", "causes", "causes"])
        0.6666666666666666
    """
    if not golds:
        return 0.0
    codes = encode_labels(golds, preds, classes=classes)
    return float(weighted_f1_batch(codes[None], n_classes=len(classes))[0])


def score_relations(
    golds: Sequence[str],
    preds: Sequence[str | None],
    *,
    classes: Sequence[str] = RELATION_CLASSES,
) -> RelationScores:
    """Every exact-match metric of a set of predictions.

    Args:
        golds: gold class names, one per item.
        preds: normalised predictions (:func:`normalize_relation`), None for invalid.
        classes: the class names.

    Returns:
        The scores; rates are 0.0 when there are no items.

    Example:
        >>> score_relations(["None", "causes"], ["None", None]).parse_rate
        0.5
    """
    n_classes = len(classes)
    codes = encode_labels(golds, preds, classes=classes)
    n = len(codes)
    if n == 0:
        empty = {c: ClassScore(0.0, 0.0, 0.0, 0) for c in classes}
        return RelationScores(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0, empty, _confusion(codes, classes))
    sample = codes[None]
    support, precision, recall, f1 = (a[0] for a in _per_class(sample, n_classes))
    per_class = {
        name: ClassScore(float(precision[i]), float(recall[i]), float(f1[i]), int(support[i]))
        for i, name in enumerate(classes)
    }
    return RelationScores(
        weighted_f1=float(weighted_f1_batch(sample, n_classes=n_classes)[0]),
        weighted_precision=float(weighted_precision_batch(sample, n_classes=n_classes)[0]),
        weighted_recall=float(weighted_recall_batch(sample, n_classes=n_classes)[0]),
        macro_f1=float(macro_f1_batch(sample, n_classes=n_classes)[0]),
        accuracy=float((codes[:, 0] == codes[:, 1]).mean()),
        parse_rate=float((codes[:, 1] < n_classes).mean()),
        n=n,
        per_class=per_class,
        confusion_matrix=_confusion(codes, classes),
    )


def _confusion(codes: np.ndarray, classes: Sequence[str]) -> dict:
    """Gold-by-prediction counts, with a last column for invalid predictions."""
    import numpy as np

    n_classes = len(classes)
    matrix = np.zeros((n_classes, n_classes + 1), dtype=np.int64)
    np.add.at(matrix, (codes[:, 0], codes[:, 1]), 1)
    return {"labels": list(classes), "columns": [*classes, INVALID_LABEL], "matrix": matrix.tolist()}


def accuracy_batch(codes: np.ndarray) -> np.ndarray:
    """Exact-match accuracy per sample of a ``(k, n, 2)`` code array."""
    return (codes[..., 0] == codes[..., 1]).mean(axis=1)


def parse_rate_batch(codes: np.ndarray, *, n_classes: int = len(RELATION_CLASSES)) -> np.ndarray:
    """Share of valid predictions per sample of a ``(k, n, 2)`` code array."""
    return (codes[..., 1] < n_classes).mean(axis=1)


def unknown_labels(labels: Iterable[str]) -> list[str]:
    """The labels that are not MicrobioRel classes, sorted (empty when all are)."""
    known = set(RELATION_CLASSES)
    return sorted({label for label in labels if label not in known})
