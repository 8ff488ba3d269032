"""How one microbiorel item reads in ``runs items``, ``runs item`` and the service: its score columns and explanation."""

from __future__ import annotations

from fieldeval.benchmark import ItemView, lazy

SCORES = ("gold", "prediction", "correct", "valid")

ITEMS = ItemView(scores=SCORES, explain=lazy("fieldeval.benchmarks.microbiorel.explain:explain_microbiorel"))
