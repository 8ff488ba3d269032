"""How one ebs item reads in ``runs items``, ``runs item`` and the service: its score columns and explanation."""

from __future__ import annotations

from fieldeval.benchmark import ItemView, lazy

SCORES = ("ontology_score", "exact_match", "relationship", "hop_distance", "hierarchy_score", "curie_label_valid",
          "in_template_enum", "enum_score", "parse_success", "pred_curie")

ITEMS = ItemView(scores=SCORES, explain=lazy("fieldeval.benchmarks.ebs.explain:explain_ebs"))
