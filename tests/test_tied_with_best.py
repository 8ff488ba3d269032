"""Over several models (or matrix combinations) of one run, those tied with the best one after Holm (issue 35)."""

from __future__ import annotations

import numpy as np

from fieldeval.stats import Design, Estimator, paired_difference
from fieldeval.stats.ranking import tied_with_best
from fieldeval.stats.robust import holm


def _rows(model: str, scores: np.ndarray, clusters: list[str]) -> list[dict]:
    return [{"model": model, "nodeid": f"evals/test_ebs.py::test_ebs[c{i:03d}-{model}]", "case_key": f"c{i:03d}",
             "cluster": cluster, "ontology_score": float(s), "exact_match": float(s > 0.5)}
            for i, (s, cluster) in enumerate(zip(scores, clusters))]


def test_a_combination_equal_in_truth_to_the_best_is_tied_and_a_far_worse_one_is_not():
    rng = np.random.default_rng(7)
    clusters = [f"s{i // 10}" for i in range(120)]  # 12 studies of 10
    study = np.repeat(rng.normal(0, 0.1, 12), 10)
    best = 0.6 + study + rng.normal(0, 0.1, 120)
    near = best + rng.normal(0, 0.15, 120)  # the same model in truth, answering again
    far = best - 0.4 + rng.normal(0, 0.05, 120)  # far below in every study
    runs = {"m-t0": best, "m-t0.7": near, "m-t1": far}
    rows = [row for model, scores in runs.items() for row in _rows(model, scores, clusters)]
    entries = {m: {"ontology_score": {"value": round(float(s.mean()), 6)}} for m, s in runs.items()}
    ranking = tied_with_best("ebs", rows, entries, metric="ontology_score", resamples=200)
    assert ranking["best"] == "m-t0" and ranking["family"] == 2
    assert ranking["tied"] == ["m-t0.7"] and ranking["below"] == ["m-t1"]
    # the p-values are the paired differences' own, adjusted by Holm over the two comparisons
    raw = [paired_difference(Estimator.mean(list(best)), Estimator.mean(list(runs[m])), Design(tuple(clusters)),
                             resamples=200)["p_value"] for m in ("m-t0.7", "m-t1")]
    got = {d["model"]: d for d in ranking["differences"]}
    assert [got["m-t0.7"]["p_value"], got["m-t1"]["p_value"]] == raw
    assert np.allclose([got["m-t0.7"]["p_holm"], got["m-t1"]["p_holm"]], holm(raw), rtol=1e-5)
    assert got["m-t0.7"]["p_holm"] >= 0.05 > got["m-t1"]["p_holm"]


def test_one_model_has_no_ranking():
    rows = _rows("m", np.array([0.5, 0.7]), ["a", "b"])
    assert tied_with_best("ebs", rows, {"m": {"ontology_score": {"value": 0.6}}}, metric="ontology_score") is None
