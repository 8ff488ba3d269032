"""Pure scoring functions: text and references in, numbers out.

Nothing here does I/O or imports pytest or the fieldeval engine; heavy
context (an ontology index) is built once by the engine and passed in.
"""

from __future__ import annotations

from scorers.ebs import EbsScore, OntologyIndex, ParsedTerm, enum_score, hierarchy_score, parse_label_curie, score_ebs
from scorers.ibf import (
    DIMENSIONS,
    JUDGE_SCHEMA,
    IbfScore,
    dimension_mean,
    mds_band,
    mean_dimension_score,
    parse_judgement,
    passes_threshold,
    reading,
    run_scores,
    score_reference,
    threshold_pass_rate,
)
from scorers.microbiorel import (
    INVALID_LABEL,
    RELATION_CLASSES,
    ClassScore,
    RelationScores,
    clean_response,
    normalize_relation,
    score_relations,
    weighted_f1,
)

__all__ = [
    "DIMENSIONS",
    "INVALID_LABEL",
    "JUDGE_SCHEMA",
    "RELATION_CLASSES",
    "ClassScore",
    "EbsScore",
    "IbfScore",
    "OntologyIndex",
    "ParsedTerm",
    "RelationScores",
    "clean_response",
    "dimension_mean",
    "enum_score",
    "hierarchy_score",
    "mds_band",
    "mean_dimension_score",
    "normalize_relation",
    "parse_judgement",
    "parse_label_curie",
    "passes_threshold",
    "reading",
    "run_scores",
    "score_ebs",
    "score_reference",
    "score_relations",
    "threshold_pass_rate",
    "weighted_f1",
]
