"""``fieldeval runs diff``: two runs whose item outcomes a table sets, checked against pandas and scipy."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from scipy.stats import binomtest

from fieldeval.cli import main
from fieldeval.store import declared_columns, open_store

RELATIONSHIPS = ["exact", "descendant", "ancestor", "unrelated", "parse failure"]
SCORE = {"exact": 1.0, "descendant": 0.6, "ancestor": 0.4, "unrelated": 0.0, "parse failure": 0.0}
# (case, base outcome, run outcome): the fake model of each run answers from this table
EBS_TABLE = [(f"case{i:03d}", RELATIONSHIPS[i % 5], RELATIONSHIPS[(i * 3 + i // 5) % 5]) for i in range(40)]
GOLD = ["Location_of", "Interacts_with", "None"]
RE_TABLE = [(f"pair{i:03d}", GOLD[i % 3], (i * 7) % 5 < 3, (i * 11) % 4 < 2) for i in range(45)]
DIMS = ["hazard_recognition", "impact_reasoning", "uncertainty_handling", "action_relevance",
        "geographic_specificity"]
IBF_TABLE = [(f"ibf_{i:04d}", [(i + d) % 5 for d in range(5)], [(i * 2 + d * 3) % 5 for d in range(5)])
             for i in range(30)]


def _row(bench: str, model: str, case: str, **scores) -> dict:
    return {"benchmark": bench, "model": model, "case_id": case, "case_key": f"t-{case}", "cluster": case,
            "nodeid": f"evals/test_{bench}.py::t[{case}-{model}]", "response_text": f"answer <{case}> [/]",
            "response_time_s": 0.01, "prompt_tokens": None, "completion_tokens": None, "est_cost_usd": None,
            "cached": False, **scores}


def _ebs(outcome: str) -> dict:
    return {"relationship": None if outcome == "parse failure" else outcome, "stratum": "forest biome",
            "hop_distance": 0, "hierarchy_score": SCORE[outcome], "in_template_enum": True, "curie_label_valid": True,
            "parse_success": outcome != "parse failure", "exact_match": outcome == "exact",
            "ontology_score": SCORE[outcome]}


def _re(gold: str, correct: bool) -> dict:
    return {"gold": gold, "prediction": gold if correct else GOLD[(GOLD.index(gold) + 1) % 3], "valid": True,
            "correct": correct}


def _save(store, run_id: str, rows: dict[str, list[dict]]) -> None:
    from fieldeval.benchmark import benchmarks

    installed = benchmarks()
    payload = {"run_id": run_id, "started_at": "2026-06-01T10:00:00Z", "ontology_version": "envo test",
               "benchmarks": {bench: {model: {**installed[bench].aggregate([r for r in bench_rows if r["model"] == model],
                                                                        seed=1, resamples=50),
                                              "items": sum(r["model"] == model for r in bench_rows), "errors": 0}
                                      for model in sorted({r["model"] for r in bench_rows})}
                              for bench, bench_rows in rows.items()}}
    store.save_run(payload, rows, {"label": run_id})


def save_two_runs(url: str) -> None:
    """Store run_0000000a (model m) and run_0000000b (models m2 and, in EBS, other) with the tables' outcomes."""
    with open_store(url, columns=declared_columns(), create=True) as store:
        base = {"ebs": [_row("ebs", "m", case, **_ebs(a)) for case, a, _ in EBS_TABLE],
                "microbiorel": [_row("microbiorel", "m", case, **_re(gold, a)) for case, gold, a, _ in RE_TABLE],
                "ibf": [_row("ibf", "m", case, **dict(zip(DIMS, a))) for case, a, _ in IBF_TABLE]}
        # the run drops the first two EBS cases and adds one, and holds a second model
        run = {"ebs": [_row("ebs", "m2", case, **_ebs(b)) for case, _, b in EBS_TABLE[2:]]
               + [_row("ebs", "m2", "case999", **_ebs("exact"))]
               + [_row("ebs", "other", case, **_ebs("exact")) for case, _, _ in EBS_TABLE],
               "microbiorel": [_row("microbiorel", "m2", case, **_re(gold, b)) for case, gold, _, b in RE_TABLE],
               "ibf": [_row("ibf", "m2", case, **dict(zip(DIMS, b))) for case, _, b in IBF_TABLE]}
        _save(store, "run_0000000a", base)
        _save(store, "run_0000000b", run)


@pytest.fixture
def store_url(tmp_path) -> str:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    save_two_runs(url)
    return url


def _diff(capsys, store_url: str, *args: str) -> dict:
    assert main(["runs", "diff", "run_0000000a", "run_0000000b", "--store", store_url, "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def _exact_mcnemar(b: int, c: int) -> float:
    """The two-sided exact McNemar p-value as an explicit binomial sum (independent of scipy)."""
    n, k = b + c, min(b, c)
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n)


def test_ebs_diff_lists_worse_items_worst_first_with_both_scores(store_url, capsys):
    diff = _diff(capsys, store_url, "--benchmark", "ebs", "--model", "m2")
    frame = pd.DataFrame(EBS_TABLE[2:], columns=["case_id", "a", "b"])
    frame["base"], frame["run"] = frame["a"].map(SCORE), frame["b"].map(SCORE)
    frame["delta"] = frame["run"] - frame["base"]
    expected = frame.sort_values(["delta", "case_id"])[["case_id", "base", "run", "delta"]]
    assert [i["case_id"] for i in diff["items"]] == list(expected["case_id"])
    assert [i["delta"] for i in diff["items"]] == pytest.approx(list(expected["delta"]))
    assert diff["paired_items"] == len(frame)
    assert (diff["only_in_base"], diff["only_in_run"]) == (["case000", "case001"], ["case999"])


def test_ebs_transitions_equal_a_crosstab_of_relationships(store_url, capsys):
    diff = _diff(capsys, store_url, "--benchmark", "ebs", "--model", "m2")
    frame = pd.DataFrame(EBS_TABLE[2:], columns=["case_id", "a", "b"])
    table = pd.crosstab(frame["a"], frame["b"])
    expected = {(f, t): int(table.loc[f, t]) for f in table.index for t in table.columns if table.loc[f, t]}
    assert {(e["from"], e["to"]): e["count"] for e in diff["transitions"]} == expected


def test_ebs_exact_match_flips_and_mcnemar_p_value(store_url, capsys):
    diff = _diff(capsys, store_url, "--benchmark", "ebs", "--model", "m2")
    frame = pd.DataFrame(EBS_TABLE[2:], columns=["case_id", "a", "b"])
    table = pd.crosstab(frame["a"] == "exact", frame["b"] == "exact")
    b, c = int(table.loc[True, False]), int(table.loc[False, True])
    (flip,) = diff["flips"]
    assert (flip["metric"], flip["worse"], flip["better"]) == ("exact_match", b, c)
    assert flip["p_value"] == pytest.approx(binomtest(b, b + c, 0.5).pvalue)
    assert flip["p_value"] == pytest.approx(_exact_mcnemar(b, c))


def test_microbiorel_transitions_per_gold_class_and_flips(store_url, capsys):
    diff = _diff(capsys, store_url, "--benchmark", "microbiorel")
    frame = pd.DataFrame(RE_TABLE, columns=["case_id", "gold", "a", "b"])
    word = {True: "correct", False: "wrong"}
    counts = frame.assign(a=frame["a"].map(word), b=frame["b"].map(word)).groupby(["gold", "a", "b"]).size()
    assert {(e["class"], e["from"], e["to"]): e["count"] for e in diff["transitions"]} == counts.to_dict()
    b, c = int((frame["a"] & ~frame["b"]).sum()), int((~frame["a"] & frame["b"]).sum())
    assert [(f["worse"], f["better"]) for f in diff["flips"]] == [(b, c)]
    assert diff["flips"][0]["p_value"] == pytest.approx(_exact_mcnemar(b, c))
    worse = [i["case_id"] for i in diff["items"] if i["delta"] < 0]
    assert sorted(worse) == sorted(frame.loc[frame["a"] & ~frame["b"], "case_id"])


def test_ibf_dimension_transitions_and_passing_all_five_flips(store_url, capsys):
    diff = _diff(capsys, store_url, "--benchmark", "ibf")
    for d, dim in enumerate(DIMS):
        frame = pd.DataFrame([(a[d], b[d]) for _, a, b in IBF_TABLE], columns=["a", "b"])
        table = pd.crosstab(frame["a"], frame["b"])
        expected = {(f, t): int(table.loc[f, t]) for f in table.index for t in table.columns if table.loc[f, t]}
        assert {(e["from"], e["to"]): e["count"] for e in diff["transitions"] if e["dimension"] == dim} == expected
    passes = pd.DataFrame([(min(a) >= 2, min(b) >= 2) for _, a, b in IBF_TABLE], columns=["a", "b"])
    b, c = int((passes["a"] & ~passes["b"]).sum()), int((~passes["a"] & passes["b"]).sum())
    assert [(f["metric"], f["worse"], f["better"]) for f in diff["flips"]] == [("threshold_pass_rate", b, c)]
    deltas = {case: sum(y) / 5 - sum(x) / 5 for case, x, y in IBF_TABLE}
    assert {i["case_id"]: i["delta"] for i in diff["items"]} == pytest.approx(deltas)


def test_each_diff_item_opens_in_both_runs_item_store_by_its_case_id(store_url, capsys):
    from fieldeval.store.items import find_item

    diff = _diff(capsys, store_url, "--benchmark", "ibf")
    with open_store(store_url, columns=declared_columns()) as store:
        for item in diff["items"]:
            for run_id, model in (("run_0000000a", "m"), ("run_0000000b", "m2")):
                assert find_item(store, run_id, item["case_id"], benchmark="ibf", model=model)["case_id"] == \
                    item["case_id"]


def test_a_run_with_several_models_and_no_model_chosen_is_one_line_and_exit_2(store_url, capsys):
    code = main(["runs", "diff", "run_0000000a", "run_0000000b", "--store", store_url, "--benchmark", "ebs"])
    err = capsys.readouterr().err
    assert code == 2 and err.strip().count("\n") == 0 and "--model" in err and "m2" in err


def test_json_of_several_shared_benchmarks_asks_for_one(store_url, capsys):
    code = main(["runs", "diff", "run_0000000a", "run_0000000b", "--store", store_url, "--json", "--model", "m2"])
    err = capsys.readouterr().err
    assert code == 2 and "--benchmark" in err and err.strip().count("\n") == 0


def test_the_tables_name_every_worse_item(store_url, capsys):
    assert main(["runs", "diff", "run_0000000a", "run_0000000b", "--store", store_url, "--benchmark",
                 "microbiorel", "--limit", "100"]) == 0
    out = capsys.readouterr().out
    frame = pd.DataFrame(RE_TABLE, columns=["case_id", "gold", "a", "b"])
    assert all(case in out for case in frame.loc[frame["a"] != frame["b"], "case_id"])


@pytest.fixture
def api(store_url, tmp_path):
    from fastapi.testclient import TestClient

    from fieldeval.service.app import create_app
    from tests.service_helpers import ROOT

    app = create_app(store_url, evals_dir=ROOT / "evals", token="tok", work_dir=tmp_path)
    with TestClient(app, base_url="http://127.0.0.1", headers={"Authorization": "Bearer tok"}) as client:
        yield client


def test_the_api_serves_the_same_diff_as_the_command(api, store_url, capsys):
    answer = api.get("/api/evaluations/diff", params={"base": "run_0000000a", "run": "run_0000000b",
                                                      "benchmark": "microbiorel"})
    assert answer.status_code == 200
    assert answer.json() == _diff(capsys, store_url, "--benchmark", "microbiorel")


def test_the_api_diff_of_an_unknown_run_is_404_and_of_several_benchmarks_422(api):
    unknown = api.get("/api/evaluations/diff", params={"base": "run_0000000a", "run": "run_ffffffff"})
    assert unknown.status_code == 404 and "run_ffffffff" in unknown.json()["message"]
    several = api.get("/api/evaluations/diff", params={"base": "run_0000000a", "run": "run_0000000b",
                                                       "model": "m2", "benchmark": ""})
    assert several.status_code == 422 and "benchmark" in several.json()["message"]


def test_a_benchmark_declares_its_own_item_diff_and_one_without_is_one_line(tmp_path, monkeypatch, capsys):
    import dataclasses

    import fieldeval.benchmark as benchmark_module
    from fieldeval.benchmark import ItemDiff, ItemView

    installed = dict(benchmark_module.benchmarks())
    tenfold = ItemDiff(score=lambda row: 10 * row["ontology_score"], binary_metric="exact_match",
                       binary=lambda row: bool(row["exact_match"]),
                       transitions=lambda pairs: [{"from": "base", "to": "run", "count": len(pairs)}])
    plants = dataclasses.replace(installed["ebs"], name="plants", items=ItemView(diff=tenfold))
    rocks = dataclasses.replace(installed["ebs"], name="rocks", items=ItemView())  # no item diff
    monkeypatch.setattr(benchmark_module, "benchmarks", lambda: {**installed, "plants": plants, "rocks": rocks})
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with open_store(url, columns=declared_columns(), create=True) as store:
        for run_id, side in (("run_0000000a", 0), ("run_0000000b", 1)):
            _save(store, run_id, {name: [{**_row("ebs", "m", case, **_ebs(outcomes[side])), "benchmark": name}
                                         for case, *outcomes in EBS_TABLE] for name in ("plants", "rocks")})
    found = _diff(capsys, url, "--benchmark", "plants")
    by_case = {item["case_id"]: item for item in found["items"]}
    for case, base, run in EBS_TABLE:
        assert (by_case[case]["base"], by_case[case]["run"]) == (10 * SCORE[base], 10 * SCORE[run])
    assert found["transitions"] == [{"from": "base", "to": "run", "count": len(EBS_TABLE)}]
    code = main(["runs", "diff", "run_0000000a", "run_0000000b", "--store", url, "--benchmark", "rocks"])
    err = capsys.readouterr().err
    assert code == 2 and err.strip().count("\n") == 0 and "rocks" in err
