"""Sharded-run store and merge speed: does ``fieldeval runs merge`` stay linear in the items?

Simulates an EBS suite of N items (the tiny test suite's cases cycled, scored
by the real scorer against the tiny ontology, answered by a zero-latency model)
split over 4 shards as pytest-split would (contiguous chunks of the collection
order). Each shard is stored the way the plugin stores a run, then the group is
merged (checks, row load, seeded bootstrap over the union, the merged run
stored). Prints seconds per 1,000 items for the writes and for the merge at
each size; linear means the per-1,000 figures stay flat as N grows.

Run: ``.venv/bin/python benchmarks/bench_shard_merge.py [--store postgresql://...] [--items 5000 20000]``
(default store: a fresh SQLite file; with ``$FIELDEVAL_TEST_PG`` set, a fresh schema there too, dropped after).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import secrets
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from fieldeval.run.entries import benchmark_entries
from fieldeval.ontology import load_index
from fieldeval.store import declared_columns, open_store
from fieldeval.store.groups import merge_group
from scorers.ebs import score_ebs

ROOT = Path(__file__).resolve().parents[1]
SHARDS = 4
ANSWERS = [("soil_data", "cropland biome [ENVO:01000245]", "cropland biome [ENVO:01000245]"),
           ("soil_data", "forest biome [ENVO:01000174]", "coniferous forest biome [ENVO:01000196]"),
           ("air_data", "forest biome [ENVO:01000174]", "Forest, I would say.")]
SETTINGS = {"seed": 20261130, "resamples": 1000, "models": {"ebs": ["zero-latency"]}}


def simulated_rows(items: int) -> list[dict]:
    """``items`` scored EBS rows, the cases cycled, one node id each."""
    index = load_index(f"simpleobo:{ROOT / 'fixtures' / 'ontology' / 'tiny.obo'}")
    scored = [dataclasses.asdict(score_ebs(answer, ideal, index=index, allowed=None)) for _, ideal, answer in ANSWERS]
    rows = []
    for i in range(items):
        template, ideal, answer = ANSWERS[i % len(ANSWERS)]
        stratum = ideal.split(" [")[0]
        rows.append({"benchmark": "ebs", "model": "zero-latency", "case_id": f"case{i:05d}", "stratum": stratum,
                     "sampleData": template, "case_ideal": ideal, "response_text": answer,
                     "ontology_version": index.version, **scored[i % len(ANSWERS)], "response_time_s": 0.0,
                     "prompt_tokens": 100, "completion_tokens": 7, "est_cost_usd": None, "cached": False,
                     "nodeid": f"evals/test_ebs.py::test_ebs[{stratum.replace(' ', '_')}-case{i:05d}-zero-latency]"})
    return rows


def measure(url: str, items: int) -> tuple[float, float]:
    """Seconds to store the 4 shards, and to merge them, for ``items`` items."""
    rows = simulated_rows(items)
    group = "bench_" + secrets.token_hex(3)
    size = -(-items // SHARDS)
    with open_store(url, columns=declared_columns()) as store:
        started = time.perf_counter()
        for k in range(SHARDS):
            shard = rows[k * size:(k + 1) * size]
            payload = {"run_id": f"run_{secrets.token_hex(4)}", "started_at": "2026-06-01T10:00:00Z",
                       "benchmarks": benchmark_entries({"ebs": shard}, {}, seed=1, resamples=10)}
            store.save_run(payload, {"ebs": shard}, {"run_group": group, "shard_index": k + 1, "shard_count": SHARDS,
                                                     "settings": SETTINGS, "settings_hash": "sha256:bench"})
        written = time.perf_counter() - started
        started = time.perf_counter()
        merged = merge_group(store, group, {})
        merge_s = time.perf_counter() - started
    assert merged.payload["benchmarks"]["ebs"]["zero-latency"]["items"] == items
    return written, merge_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", action="append", help="store URL (repeatable); default: SQLite and $FIELDEVAL_TEST_PG")
    parser.add_argument("--items", type=int, nargs="+", default=[5000, 20000])
    args = parser.parse_args()
    with ExitStack() as stack:
        urls = args.store or [f"sqlite:///{stack.enter_context(tempfile.TemporaryDirectory())}/bench.db"]
        if not args.store and os.environ.get("FIELDEVAL_TEST_PG"):
            from tests.conftest import fresh_pg_store

            urls.append(stack.enter_context(fresh_pg_store()))
        print(f"{'store':<12} {'items':>7} {'write s':>8} {'merge s':>8} {'write s/1k':>11} {'merge s/1k':>11}")
        for url in urls:
            for items in args.items:
                written, merged = measure(url, items)
                print(f"{url.split(':')[0]:<12} {items:>7} {written:>8.2f} {merged:>8.2f} "
                      f"{written / items * 1000:>11.3f} {merged / items * 1000:>11.3f}")


if __name__ == "__main__":
    main()
