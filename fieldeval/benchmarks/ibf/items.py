"""How one ibf item reads in ``runs items``, ``runs item``, ``runs diff`` and the service."""

from __future__ import annotations

from fieldeval.benchmark import ItemDiff, ItemView, lazy

SCORES = ("hazard_recognition", "impact_reasoning", "uncertainty_handling", "action_relevance",
          "geographic_specificity", "scorer")

DIFF = ItemDiff(score=lazy("fieldeval.benchmarks.ibf.diffs:score"), binary_metric="threshold_pass_rate",
                binary=lazy("fieldeval.benchmarks.ibf.diffs:passed"),
                transitions=lazy("fieldeval.benchmarks.ibf.diffs:transitions"))
ITEMS = ItemView(scores=SCORES, explain=lazy("fieldeval.benchmarks.ibf.explain:explain_ibf"),
                 diff=DIFF)
