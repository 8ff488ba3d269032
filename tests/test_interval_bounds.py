"""Intervals stay inside what the data can give, p-values are corrected over their family, and the t distribution
the few-cluster intervals use is SciPy's (issue 35).

Independent expectations: the bounds come from the cluster means computed here by hand; Holm's adjustment is
statsmodels'; the t distribution is ``scipy.special.stdtr``/``stdtrit``; the family-wise error rate is
simulated under a known null.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fieldeval.stats import Design, Estimator, estimate, paired_difference, paired_difference_with_evidence
from fieldeval.stats import robust
from fieldeval.stats.paired import adjust, regression_gates

TOL = 1e-6


@st.composite
def clustered_runs(draw):
    """A run's 0-1 scores in clusters of unequal size, with the special cases drawn often: constant scores, one
    cluster, a model at 0 everywhere, ties, a cluster of one item."""
    sizes = draw(st.lists(st.integers(1, 12), min_size=1, max_size=7))
    n = sum(sizes)
    kind = draw(st.sampled_from(["any", "constant", "zeros", "binary", "ties"]))
    if kind == "constant":
        value = draw(st.sampled_from([0.0, 0.5, 1.0]))
        scores = [value] * n
    elif kind == "zeros":
        scores = [0.0] * n
    elif kind == "binary":
        scores = draw(st.lists(st.sampled_from([0.0, 1.0]), min_size=n, max_size=n))
    elif kind == "ties":
        scores = draw(st.lists(st.sampled_from([0.25, 0.75]), min_size=n, max_size=n))
    else:
        scores = draw(st.lists(st.floats(0, 1, allow_nan=False), min_size=n, max_size=n))
    clusters = [f"s{c}" for c, size in enumerate(sizes) for _ in range(size)]
    return np.array(scores), clusters


def _cluster_means(values: np.ndarray, clusters: list[str]) -> np.ndarray:
    keys = sorted(set(clusters))
    return np.array([values[[c == k for c in clusters]].mean() for k in keys])


def _inside(ci, low, high, point):
    lo, hi = ci
    if lo is None:
        return True
    return low - TOL <= lo <= point + TOL and point - TOL <= hi <= high + TOL


@settings(max_examples=150, deadline=None)
@given(clustered_runs())
def test_a_means_intervals_lie_in_its_range_and_its_cluster_resamples_and_hold_the_point(run):
    scores, clusters = run
    entry = estimate(Estimator.mean(list(scores), (0.0, 1.0)), Design(tuple(clusters)), resamples=200)
    point = entry["value"]
    means = _cluster_means(scores, clusters)
    # on new clusters: no resample of the clusters gives less than the lowest cluster mean or more than the highest
    assert _inside(entry["ci95"], max(0.0, means.min()), min(1.0, means.max()), point)
    # on more items of these clusters: no resample of items within clusters leaves the items' own range
    assert _inside(entry["ci95_within"], scores.min(), scores.max(), point)
    if len(means) == 1:
        assert entry["ci95"] == [None, None]


@settings(max_examples=150, deadline=None)
@given(clustered_runs(), st.data())
def test_a_differences_intervals_lie_between_the_extreme_cluster_differences(run, data):
    base, clusters = run
    other = np.array(data.draw(st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=len(base), max_size=len(base))))
    diff = paired_difference(Estimator.mean(list(base), (0.0, 1.0)), Estimator.mean(list(other), (0.0, 1.0)),
                             Design(tuple(clusters)), resamples=200)
    per_cluster = _cluster_means(other - base, clusters)
    assert _inside(diff["ci95"], max(-1.0, per_cluster.min()), min(1.0, per_cluster.max()), diff["value"])
    assert _inside(diff["ci95_within"], (other - base).min(), (other - base).max(), diff["value"])
    assert diff["p_value"] is None or 0.0 <= diff["p_value"] <= 1.0


def test_a_model_at_zero_everywhere_is_never_possibly_better():
    """The issue's case: against a model that scored 0 on every item, every cluster's difference is negative, so
    no interval of the difference may cross 0."""
    rng = np.random.default_rng(3)
    sizes = [73, 10, 10, 5, 1, 1]
    clusters = tuple(f"s{c}" for c, size in enumerate(sizes) for _ in range(size))
    base = (rng.random(100) < 0.85).astype(float)
    for c, size in enumerate(sizes):  # every study has at least one exact answer
        base[clusters.index(f"s{c}")] = 1.0
    diff = paired_difference(Estimator.mean(list(base), (0, 1)), Estimator.mean([0.0] * 100, (0, 1)), Design(clusters))
    assert diff["ci95"][1] < 0 and diff["ci95_within"][1] < 0
    assert diff["ci95"][1] <= _cluster_means(-base, list(clusters)).max() + TOL


def test_holm_is_statsmodels_holm_on_the_projects_own_p_values():
    from statsmodels.stats.multitest import multipletests

    rng = np.random.default_rng(11)
    clusters = tuple(f"c{i // 8}" for i in range(80))
    base = rng.random(80)
    diffs = []
    for shift in [0.0, 0.02, 0.05, 0.1, 0.2, -0.03, 0.0, 0.3]:
        other = np.clip(base + shift + rng.normal(0, 0.1, 80), 0, 1)
        d = paired_difference(Estimator.mean(list(base), (0, 1)), Estimator.mean(list(other), (0, 1)),
                              Design(clusters), resamples=200)
        diffs.append({"p_value": d["p_value"]})
    ours = [d["p_holm"] for d in adjust(diffs)]
    theirs = multipletests([d["p_value"] for d in diffs], method="holm")[1]
    assert ours == pytest.approx(list(theirs), abs=1e-6)
    mixed = adjust([{"p_value": 0.01}, {"p_value": None}, {"p_value": 0.04}])  # an untested difference is no member
    assert mixed[1]["p_holm"] is None
    assert [mixed[0]["p_holm"], mixed[2]["p_holm"]] == pytest.approx([0.02, 0.04])


def test_the_gates_family_counts_each_checked_metric_once():
    diffs = [{"benchmark": b, "metric": m, "model": "x", "base_run": "run_a", "value": -0.01, "ci95": [-0.1, 0.1],
              "n_items": 50, "n_clusters": 10, "p_drop": p}
             for (b, m), p in zip([("ebs", "exact_match"), ("ebs", "ontology_score"), ("ibf", "mds")],
                                  [0.02, 0.2, None])]
    gates = regression_gates(diffs, tolerance=0.0)
    assert [g["family"] for g in gates] == [2, 2, 2]  # the untested one is not counted
    assert [g["p_holm"] for g in gates] == pytest.approx([0.04, 0.2, None])
    assert [g["passed"] for g in gates] == [False, True, True]


def test_holm_keeps_the_gate_from_failing_by_chance_across_many_metrics():
    """Nine null differences (3 models x 3 benchmarks, nothing changed): uncorrected, a one-sided 5% test fails
    some gate in about 1 - 0.95**9 = 37% of pull requests; with Holm, at most about 5%."""
    rng = np.random.default_rng(20261204)
    clusters = tuple(f"c{i // 10}" for i in range(100))
    failed_holm = failed_raw = 0
    sims = 200
    for _ in range(sims):
        diffs = []
        for _ in range(9):
            effects = np.repeat(rng.normal(0, 0.1, 10), 10)
            base = effects + rng.normal(0, 0.3, 100)
            other = effects + rng.normal(0, 0.3, 100)  # the same model, answered again: no true drop
            _, evidence = paired_difference_with_evidence(Estimator.mean(list(base)), Estimator.mean(list(other)),
                                                          Design(clusters), resamples=50)
            diffs.append({"benchmark": "b", "metric": "m", "model": "x", "base_run": "r", "value": 0.0,
                          "ci95": [None, None], "n_items": 100, "n_clusters": 10,
                          "p_drop": evidence.p_below(0.0)})
        failed_holm += not all(g["passed"] for g in regression_gates(diffs, tolerance=0.0))
        failed_raw += any(d["p_drop"] < 0.05 for d in diffs)
    assert failed_holm / sims <= 0.08
    assert failed_raw / sims >= 0.25


@pytest.mark.parametrize("df", [1.0, 1.149, 1.5, 2.0, 3.7, 9.0, 29.5, 200.0])
def test_the_t_distribution_for_fractional_degrees_of_freedom_is_scipys(df):
    from scipy.special import stdtr, stdtrit

    for t in [-8.0, -2.5, -1.0, -0.1, 0.0, 0.3, 1.96, 4.0, 30.0]:
        assert robust.t_cdf(t, df) == pytest.approx(float(stdtr(df, t)), rel=1e-9, abs=1e-14)
    for p in [0.5, 0.8, 0.975, 0.995, 0.9995]:
        assert robust.t_ppf(p, df) == pytest.approx(float(stdtrit(df, p)), rel=1e-8)


def test_each_classs_f1_interval_holds_sklearns_f1_and_stays_in_its_range():
    """Per-class F1 intervals (the headline metrics' method, on new paragraphs) hold scikit-learn's per-class F1
    and stay in [0, 1]."""
    from sklearn.metrics import f1_score

    from fieldeval.benchmarks.microbiorel.tables import per_class_f1_ci95
    from scorers.microbiorel import RELATION_CLASSES, encode_labels

    rng = np.random.default_rng(5)
    classes = list(RELATION_CLASSES)[:4]
    golds = [classes[i] for i in rng.integers(0, 4, 120)]
    preds = [g if rng.random() < 0.7 else classes[int(rng.integers(0, 4))] for g in golds]
    design = Design(tuple(f"p{i // 20}" for i in range(120)))  # 6 paragraphs
    got = per_class_f1_ci95(encode_labels(golds, preds), design, seed=1, resamples=300)
    truth = f1_score(golds, preds, labels=list(RELATION_CLASSES), average=None, zero_division=0)
    for c, (lo, hi) in enumerate(got):
        if c >= 4:  # a class with no gold and no prediction: F1 0 throughout
            assert lo == hi == 0.0 or lo is None
            continue
        assert 0.0 <= lo <= truth[c] + TOL <= hi + 2 * TOL <= 1.0 + 2 * TOL
