"""How one ebs item reads in ``runs items``, ``runs item``, ``runs diff`` and the service."""

from __future__ import annotations

from fieldeval.benchmark import ItemDiff, ItemView, lazy

SCORES = ("ontology_score", "exact_match", "relationship", "hop_distance", "hierarchy_score", "curie_label_valid",
          "in_template_enum", "enum_score", "parse_success", "pred_curie",
          # beside upstream's score (scorers.ebs): siblings apart, what the answer missed and asserted falsely
          "relationship_detail", "missed_information", "false_information", "missed_terms", "false_terms",
          "label_mismatch", "ontology_status", "linkml_valid")

DIFF = ItemDiff(score=lazy("fieldeval.benchmarks.ebs.diffs:score"), binary_metric="exact_match",
                binary=lazy("fieldeval.benchmarks.ebs.diffs:exact"),
                transitions=lazy("fieldeval.benchmarks.ebs.diffs:transitions"))
ITEMS = ItemView(scores=SCORES, explain=lazy("fieldeval.benchmarks.ebs.explain:explain_ebs"),
                 diff=DIFF)
