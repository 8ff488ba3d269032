"""The store columns the IBF benchmark declares, written out so the store tests need no installed benchmark."""

from __future__ import annotations

from fieldeval.benchmark import StoreColumns

IBF_DIMENSIONS = ("hazard_recognition", "impact_reasoning", "uncertainty_handling", "action_relevance",
                  "geographic_specificity")
IBF_COLUMNS = {"ibf": StoreColumns(run=(*IBF_DIMENSIONS, "mean_dimension_score", "threshold_pass_rate"),
                                   response=IBF_DIMENSIONS, item_id="item_id")}
