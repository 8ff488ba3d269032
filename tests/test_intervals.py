"""Honest intervals: coverage by simulation at the suite's real designs, and cross-checks against independent code.

The coverage simulation draws evals from a super-population with known study effects
and counts how often the 95% interval covers the truth, for a mean, weighted F1 and a
paired difference, at two designs: the EBS suite's 6 studies of 73, 10, 10, 5, 1 and 1
cases, and 10 equal clusters. Scores lie in [0, 1]: a study effect, item noise on top.
The plain cluster bootstrap and the item bootstrap on the same draws fall short, so the
test fails when either is swapped back in.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st
from scipy import stats as scipy_stats

from fieldeval.stats._bootstrap import COUNTED_FROM
from fieldeval.stats.power import clustered_se, power_analysis
from fieldeval.stats import (
    Design,
    Estimator,
    estimate,
    mean_metric,
    paired_difference,
    resample_indices,
    weighted_mean,
)
from scorers.ibf import mds_batch, mds_weights
from scorers.microbiorel import encode_labels, weighted_f1_batch, weighted_f1_weights

SIMULATIONS = 500  # per design and spread
RESAMPLES = 500
N_CLASSES = 3
DESIGNS = {"ebs": (73, 10, 10, 5, 1, 1), "balanced": (10,) * 10}
SPREADS = (0.25, 0.5, 1.0)  # the between-study standard deviation, on the logit scale


def _expit(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def _draw(rng: np.random.Generator, sizes, spread: float) -> tuple[np.ndarray, ...]:
    """One eval: studies of ``sizes``; a study difficulty shared by both models and a study-level shift of
    model B's; continuous scores in [0, 1] with item noise; per-study class mixes and right answers for F1."""
    sizes = np.asarray(sizes)
    cluster = np.repeat(np.arange(sizes.size), sizes)
    difficulty, shift = rng.normal(0, spread, sizes.size), rng.normal(0, spread, sizes.size)
    noise = rng.normal(0, 1.0, cluster.size)
    a = _expit(1.0 + difficulty[cluster] + noise)
    b = _expit(1.2 + difficulty[cluster] + shift[cluster] + noise)
    right = rng.random(cluster.size) < _expit(1.0 + difficulty[cluster] + 0.5 * noise)
    mix = rng.dirichlet(np.ones(N_CLASSES) * 2, sizes.size)
    gold = (rng.random(cluster.size)[:, None] > np.cumsum(mix[cluster], axis=1)).sum(axis=1)
    pred = np.where(right, gold, (gold + 1 + rng.integers(0, N_CLASSES - 1, cluster.size)) % N_CLASSES)
    return cluster, a, b, np.stack([gold, pred], axis=1), right.astype(float)


def _f1(codes: np.ndarray, weights: np.ndarray) -> np.ndarray:
    return weighted_f1_weights(codes, weights, n_classes=N_CLASSES)


def _truth(sizes, spread: float) -> dict[str, float]:
    """The super-population's values: 60,000 studies in the design's proportions (about 10^6 items)."""
    _, a, b, codes, _ = _draw(np.random.default_rng(99), [sizes[i % len(sizes)] for i in range(60_000)], spread)
    return {"mean": a.mean(), "difference": b.mean() - a.mean(),
            "weighted_f1": float(_f1(codes, np.ones((1, len(codes))))[0])}


def _plain_cluster_bootstrap(statistic, n: int, design: Design, seed: int) -> tuple[float, float]:
    """The percentile interval of the cluster bootstrap, unwidened: the method that falls short."""
    boot = np.concatenate([statistic(w) for w in design.weight_blocks(n, resamples=RESAMPLES, seed=seed)])
    return tuple(np.percentile(boot[~np.isnan(boot)], [2.5, 97.5]))


@pytest.fixture(scope="module")
def coverage() -> dict[str, float]:
    """Share of simulated evals whose ci95 covers the truth, by ``design/spread/metric/method``."""
    hits: dict[str, int] = {}
    for name, sizes in DESIGNS.items():
        for spread in SPREADS:
            truth = _truth(sizes, spread)
            rng = np.random.default_rng(20261203)
            for sim in range(SIMULATIONS):
                cluster, a, b, codes, right = _draw(rng, sizes, spread)
                every = np.ones(cluster.size, dtype=bool)
                est_a, est_b = Estimator.mean(a.tolist(), (0.0, 1.0)), Estimator.mean(b.tolist(), (0.0, 1.0))
                est_f1 = Estimator(codes, _f1, every, (0.0, 1.0))
                clustered = Design(tuple(cluster))
                found = {"ours": {"mean": estimate(est_a, clustered, seed=sim, resamples=RESAMPLES)["ci95"],
                                  "weighted_f1": estimate(est_f1, clustered, seed=sim, resamples=RESAMPLES)["ci95"],
                                  "difference": paired_difference(est_a, est_b, clustered, seed=sim,
                                                                  resamples=RESAMPLES)["ci95"]},
                         "items": {"mean": estimate(est_a, Design(), seed=sim, resamples=RESAMPLES)["ci95"]},
                         "plain": {"mean": _plain_cluster_bootstrap(lambda w: weighted_mean(a, w), a.size, clustered,
                                                                    sim),
                                   "difference": _plain_cluster_bootstrap(lambda w: weighted_mean(b - a, w), a.size,
                                                                          clustered, sim)}}
                for method, intervals in found.items():
                    for metric, (lo, hi) in intervals.items():
                        key = f"{name}/{spread}/{metric}/{method}"
                        hits[key] = hits.get(key, 0) + (lo <= truth[metric] <= hi)
    return {key: count / SIMULATIONS for key, count in hits.items()}


def _pooled(coverage: dict[str, float], design: str, metric: str, method: str = "ours") -> float:
    return float(np.mean([coverage[f"{design}/{spread}/{metric}/{method}"] for spread in SPREADS]))


@pytest.mark.parametrize("metric", ["mean", "weighted_f1", "difference"])
def test_at_the_ebs_design_the_interval_covers_the_truth_at_least_93_percent_of_the_time(coverage, metric):
    assert _pooled(coverage, "ebs", metric) >= 0.93, coverage
    assert all(coverage[f"ebs/{spread}/{metric}/ours"] >= 0.91 for spread in SPREADS), coverage


@pytest.mark.parametrize("metric", ["mean", "weighted_f1", "difference"])
def test_at_the_balanced_design_the_interval_covers_the_truth_92_to_97_percent_of_the_time(coverage, metric):
    assert all(0.92 <= coverage[f"balanced/{spread}/{metric}/ours"] <= 0.97 for spread in SPREADS), coverage


@pytest.mark.parametrize("metric", ["mean", "difference"])
def test_the_plain_cluster_bootstrap_falls_short_at_the_ebs_design(coverage, metric):
    # the method the suite used before: what the few-cluster method is measured against
    assert _pooled(coverage, "ebs", metric, "plain") < 0.90, coverage


def test_item_bootstrap_undercovers_clustered_items(coverage):
    assert _pooled(coverage, "balanced", "mean", "items") < 0.85, coverage


def test_iid_interval_agrees_with_scipy_bootstrap():
    values = np.random.default_rng(5).beta(2, 3, size=300)
    ours = mean_metric(values, resamples=4000, seed=3)
    theirs = scipy_stats.bootstrap((values,), np.mean, n_resamples=4000, method="percentile", confidence_level=0.95,
                                   random_state=np.random.default_rng(11)).confidence_interval
    assert ours["value"] == pytest.approx(values.mean(), abs=1e-6)
    assert ours["ci95"][0] == pytest.approx(theirs.low, abs=0.004)
    assert ours["ci95"][1] == pytest.approx(theirs.high, abs=0.004)
    assert ours["n_clusters"] == ours["n"] == 300


def test_without_clusters_the_interval_is_the_old_item_bootstrap():
    # --cluster-by none gives the intervals of before clusters: the same draws, the same percentiles
    values = np.random.default_rng(8).integers(0, 2, size=97).astype(float)
    index = resample_indices(len(values), resamples=500, seed=42)
    old = np.round(np.nanpercentile(values[index].mean(axis=1), [2.5, 97.5]), 6).tolist()
    assert mean_metric(values, resamples=500, seed=42)["ci95"] == old


def test_miller_clustered_standard_error_by_hand():
    s = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0])
    clusters = ["a", "a", "a", "b", "b", "c", "c"]
    mean, n = s.mean(), len(s)
    iid = ((s - mean) ** 2).sum() / n ** 2
    cross = sum((s[i] - mean) * (s[j] - mean) for i in range(n) for j in range(n)
                if i != j and clusters[i] == clusters[j])
    assert clustered_se(s, clusters) == pytest.approx((np.sqrt(iid), np.sqrt(iid + cross / n ** 2)))


def test_cluster_bootstrap_spread_matches_millers_clustered_se():
    rng = np.random.default_rng(17)
    cluster = np.repeat(np.arange(40), 5)
    s = (rng.random(200) < _expit(rng.normal(0, 1.5, 40)[cluster])).astype(float)
    _, se_clustered = clustered_se(s, cluster)
    weights = Design(tuple(cluster)).weights(200, resamples=8000, seed=1)
    assert weighted_mean(s, weights).std() == pytest.approx(se_clustered, rel=0.08)


def test_strata_keep_their_cluster_counts():
    strata = ("x",) * 6 + ("y",) * 4
    clusters = (1, 1, 2, 2, 3, 3, 4, 4, 5, 5)
    weights = Design(clusters, strata).weights(10, resamples=200, seed=3)
    assert (weights[:, :6].sum(axis=1) == 6).all() and (weights[:, 6:].sum(axis=1) == 4).all()
    assert (weights[:, 0] == weights[:, 1]).all()  # a cluster is drawn whole
    assert Design(clusters, strata).n_clusters(10) == 5 and Design(clusters, strata).n_strata(10) == 2


def test_weighted_statistics_equal_the_statistics_of_the_drawn_samples():
    rng = np.random.default_rng(4)
    codes = encode_labels(rng.choice(["None", "causes", "treats"], 50).tolist(),
                          rng.choice(["None", "causes", "treats", None], 50).tolist())
    index = resample_indices(50, resamples=30, seed=9)
    counts = np.stack([np.bincount(row, minlength=50) for row in index]).astype(float)
    assert weighted_f1_weights(codes, counts) == pytest.approx(weighted_f1_batch(codes[index]))
    matrix = rng.integers(0, 5, size=(50, 5)).astype(float)
    matrix[rng.random((50, 5)) < 0.2] = np.nan
    assert mds_weights(matrix, counts) == pytest.approx(mds_batch(matrix[index]))


def test_a_clustered_mean_from_cluster_sums_equals_the_mean_under_item_weights():
    rng = np.random.default_rng(11)
    clusters = tuple(rng.integers(0, 9, 400).tolist())
    strata = tuple("ab"[c % 2] for c in clusters)
    values = rng.random(400)
    values[rng.random(400) < 0.1] = np.nan  # items where the metric is not defined
    est = Estimator.mean([None if np.isnan(v) else v for v in values])
    by_items = Estimator(est.data, lambda data, w: weighted_mean(data, w), est.defined)  # not the cluster-sum path
    for design in (Design(clusters), Design(clusters, strata)):
        fast, slow = estimate(est, design, resamples=300, seed=5), estimate(by_items, design, resamples=300, seed=5)
        assert fast == slow and fast["ci95"][0] < fast["value"] < fast["ci95"][1]


def test_a_subset_design_draws_what_a_design_of_the_kept_items_draws():
    rng = np.random.default_rng(12)
    clusters = tuple(f"study {c}" for c in rng.integers(0, 12, 300))
    strata = tuple("xyz"[int(c[-1]) % 3] for c in clusters)
    keep = rng.random(300) < 0.6
    keep &= ~np.isin(clusters, ["study 0", "study 5"])  # two clusters go whole: the others' codes close up
    for full in (Design(clusters), Design(clusters, strata)):
        picked = Design(tuple(c for c, k in zip(clusters, keep) if k),
                        None if full.strata is None else tuple(s for s, k in zip(strata, keep) if k))
        sub = full.subset(keep)
        assert [c.tolist() for c in sub.cells(int(keep.sum()))] == [c.tolist() for c in picked.cells(int(keep.sum()))]
        assert np.array_equal(sub.weights(int(keep.sum()), resamples=50, seed=3),
                              picked.weights(int(keep.sum()), resamples=50, seed=3))


def test_one_cluster_has_no_interval():
    metric = mean_metric([1.0, 0.0, 1.0], design=Design(("s", "s", "s")))
    assert metric["ci95"] == [None, None] and (metric["n"], metric["n_clusters"]) == (3, 1)
    assert metric["value"] == pytest.approx(2 / 3, abs=1e-6)


def test_paired_difference_is_the_difference_of_means_on_shared_items():
    a, b = np.array([1.0, 0, 1, 1, 0, 1]), np.array([1.0, 1, 1, 0, 1, 1])
    every = np.ones(6, dtype=bool)
    diff = paired_difference(Estimator(a, weighted_mean, every), Estimator(b, weighted_mean, every),
                             Design(("p", "p", "q", "q", "r", "r")), resamples=500, seed=1)
    assert diff["value"] == pytest.approx(b.mean() - a.mean(), abs=1e-6)
    assert diff["n"] == 6 and diff["n_clusters"] == 3
    assert diff["ci95"][0] <= diff["value"] <= diff["ci95"][1]


def test_power_follows_millers_formula_for_a_mean():
    rng = np.random.default_rng(23)
    cluster = np.repeat(np.arange(20), 5)
    s = (rng.random(100) < _expit(rng.normal(0.5, 1.0, 20)[cluster])).astype(float)
    result = power_analysis(Estimator.mean(s.tolist()), Design(tuple(cluster)), metric="m", difference=0.05,
                            correlation=0.5, resamples=4000)
    se_iid, se_clustered = clustered_se(s, cluster)
    omega2 = 2 * s.var() * (1 - 0.5)
    deff = (se_clustered / se_iid) ** 2
    expected = (scipy_stats.norm.ppf(0.975) + scipy_stats.norm.ppf(0.8)) ** 2 * omega2 * deff / 0.05 ** 2
    assert result.items_needed == pytest.approx(expected, rel=0.12)
    assert result.design_effect == pytest.approx(deff, rel=0.12)
    assert result.clusters_needed == pytest.approx(result.items_needed / 5, abs=1)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.text(min_size=1, max_size=6), st.text(min_size=1, max_size=6)), min_size=1, max_size=40))
def test_cluster_codes_are_the_ranks_numpy_gives_the_joined_keys(keys):
    strata, clusters = zip(*keys)
    joined = np.array([f"{s}\x1f{c}" for s, c in keys])
    assume(all(ch >= "\x20" for s in strata for ch in s) and not any("\x00" in c for c in clusters))
    stratum_code, cluster_code = Design(clusters, strata).cells(len(keys))
    assert stratum_code.tolist() == np.unique(np.array(strata), return_inverse=True)[1].ravel().tolist()
    assert cluster_code.tolist() == np.unique(joined, return_inverse=True)[1].ravel().tolist()


@pytest.mark.parametrize("p", [0.975, 0.95, 0.995, 0.75])
def test_the_t_quantile_of_the_few_cluster_widening_is_scipys(p):
    from fieldeval.stats import T_SERIES_DF, t_quantile

    # every whole df where the exact series is used, both sides of the switch to the expansion, and far above
    dfs = [*range(1, T_SERIES_DF + 50), 2_000, 4_096, 10**4, 10**5 + 1, 10**6, 10**9]
    ours = np.array([t_quantile(p, df) for df in dfs])
    np.testing.assert_allclose(ours, scipy_stats.t.ppf(p, dfs), rtol=1e-12, atol=0)


def test_a_clustered_interval_is_widened_by_the_t_quantile_of_its_clusters_less_strata():
    from math import sqrt

    from fieldeval.stats import Design, Z_975, widening

    # 12 clusters in 2 strata: t with 10 degrees of freedom, from SciPy, with the small-sample factor
    design = Design(clusters=tuple(f"c{i % 12}" for i in range(48)), strata=tuple(f"s{i % 12 // 6}" for i in range(48)))
    assert widening(design, 48) == pytest.approx(sqrt(12 / 11) * scipy_stats.t.ppf(0.975, 10) / Z_975, rel=1e-12)


@pytest.mark.parametrize("n", [1, 7, 3001, 260_001])
@pytest.mark.parametrize("layout", ["items", "clusters", "strata"])
def test_the_mean_of_each_resample_is_its_weighted_mean_under_the_same_draws(n, layout):
    """Design.mean_draws sums the draws where they land, in blocks of its own size; where it draws every item
    (values that seldom repeat, or fewer than COUNTED_FROM items), each value is the weighted mean under the
    matching row of weight_blocks (within_weight_blocks), which count the same draws."""
    rng = np.random.default_rng(n)
    data = rng.random(n) if n >= COUNTED_FROM else rng.random(n).round(1)
    clusters = tuple(rng.integers(0, max(1, n // 40), n).tolist()) if layout != "items" else None
    strata = tuple((c % 3 for c in clusters)) if layout == "strata" else None
    design = Design(clusters, strata)
    resamples = 3 if n > 100_000 else 301
    for within in [False, True]:
        blocks = design.within_weight_blocks if within else design.weight_blocks
        expected = np.concatenate([w @ data / w.sum(axis=1) for w in blocks(n, resamples=resamples, seed=11)])
        found = design.mean_draws(data, resamples=resamples, seed=11, within=within)
        np.testing.assert_allclose(found, expected, rtol=1e-12, atol=0)


def test_counted_draws_of_a_share_follow_its_exact_bootstrap_law():
    # 6,000 items of 0/1: the resampled count of ones is Binomial(6000, share) exactly; counted (not drawn) here
    from fieldeval.stats._bootstrap import _Tally

    data = np.zeros(6_000)
    data[:1_800] = 1.0
    assert _Tally.of(np.zeros(len(data), dtype=np.int64), data).counted
    ones = np.rint(Design().mean_draws(data, resamples=20_000, seed=4) * len(data)).astype(int)
    edges = np.arange(1_680, 1_921, 8)  # bins of 8 counts over +/- 4.5 standard deviations, the tails apart
    found = np.histogram(ones, bins=np.concatenate([[0], edges, [len(data) + 1]]))[0]
    law = scipy_stats.binom(len(data), 0.3)
    expected = np.diff(law.cdf(np.concatenate([[-1], edges - 1, [len(data)]]))) * len(ones)
    assert scipy_stats.chisquare(found, expected).pvalue > 1e-3


def test_mixed_counted_and_drawn_clusters_keep_the_within_bootstrap_law():
    # counted clusters (many items, few values), drawn ones (values that do not repeat) and one-valued ones
    # (no draw at all) together: the mean and spread of the within bootstrap, and its law against item draws
    from fieldeval.stats._bootstrap import _Tally

    rng = np.random.default_rng(6)
    parts = [rng.integers(0, 3, 900) / 2, rng.integers(0, 2, 700).astype(float), rng.random(300), rng.random(150),
             np.full(400, 0.25), np.full(50, 1.0)]
    data = np.concatenate(parts)
    clusters = tuple(np.repeat(np.arange(len(parts)), [len(p) for p in parts]).tolist())
    design = Design(clusters)
    tally = _Tally.of(design.cells(len(data))[1], data)
    assert len(tally.counted) == 2 and tally.drawn.sum() == 450 and tally.fixed == 0.25 * 400 + 50
    draws = design.mean_draws(data, resamples=20_000, seed=8, within=True)
    variance = sum(len(p) * p.var() for p in parts) / len(data) ** 2  # each cluster's items drawn i.i.d.
    assert abs(draws.mean() - data.mean()) < 5 * np.sqrt(variance / len(draws))
    assert draws.var() == pytest.approx(variance, rel=0.05)
    item_draws = np.concatenate([w @ data / w.sum(axis=1) for w in design.within_weight_blocks(
        len(data), resamples=20_000, seed=9, block=2_000)])
    assert scipy_stats.ks_2samp(draws, item_draws).pvalue > 1e-3


def test_commands_run_blas_on_one_thread_unless_the_environment_sets_its_threads(monkeypatch):
    # OpenBLAS's idle threads spin after each small product: a fifth of score ebs's CPU at 44,000 rows
    from threadpoolctl import threadpool_info

    from fieldeval.stats.threads import BLAS_THREAD_VARIABLES, one_blas_thread

    def blas_threads() -> list[int]:
        return [info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"]

    for name in BLAS_THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    before = blas_threads()
    assert before  # numpy's BLAS is loaded
    with one_blas_thread():
        assert blas_threads() == [1] * len(before)
    assert blas_threads() == before
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    with one_blas_thread():
        assert blas_threads() == before
