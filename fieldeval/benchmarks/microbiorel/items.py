"""How one microbiorel item reads in ``runs items``, ``runs item``, ``runs diff`` and the service."""

from __future__ import annotations

from fieldeval.benchmark import ItemDiff, ItemView, lazy

SCORES = ("gold", "prediction", "correct", "valid")

DIFF = ItemDiff(score=lazy("fieldeval.benchmarks.microbiorel.diffs:score"), binary_metric="accuracy",
                binary=lazy("fieldeval.benchmarks.microbiorel.diffs:correct"),
                transitions=lazy("fieldeval.benchmarks.microbiorel.diffs:transitions"))
ITEMS = ItemView(scores=SCORES, explain=lazy("fieldeval.benchmarks.microbiorel.explain:explain_microbiorel"),
                 diff=DIFF)
