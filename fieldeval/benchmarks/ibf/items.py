"""How one ibf item reads in ``runs items``, ``runs item`` and the service: its score columns and explanation."""

from __future__ import annotations

from fieldeval.benchmark import ItemView, lazy

SCORES = ("hazard_recognition", "impact_reasoning", "uncertainty_handling", "action_relevance",
          "geographic_specificity", "scorer")

ITEMS = ItemView(scores=SCORES, explain=lazy("fieldeval.benchmarks.ibf.explain:explain_ibf"))
