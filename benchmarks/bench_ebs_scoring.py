"""EBS scoring speed: the cached index against the obvious per-row oaklib calls.

The obvious way, per row: oaklib ``label()``, ``ancestors()`` twice and a BFS
over ``hierarchical_parents()``, as the upstream post-hoc scorer does. Both
score the same rows (the 100 suite cases against several predictions each)
on the same ontology, and the scores must be identical.

Run: ``FIELDEVAL_DATA_DIR=../shared/data .venv/bin/python benchmarks/bench_ebs_scoring.py``
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import deque

from fieldeval.benchmarks.ebs.enums import load_enums
from fieldeval.benchmarks.ebs.suite import load_suite
from fieldeval.ontology import default_selector, load_index
from scorers.ebs import hierarchy_score, enum_score, parse_label_curie, score_ebs

PREDICTIONS = [
    "forest biome [ENVO:01000174]",
    "temperate broadleaf forest biome [ENVO:01000202]",
    "terrestrial biome [ENVO:00000446]",
    "biome [ENVO:00000428]",
    "marine biome [ENVO:00000447]",
    "cropland biome [ENVO:01000245]",
    "Forest Biome [ENVO:01000174]",
    "not an answer",
]


def obvious_score(adapter, response: str, ideal: str, allowed: frozenset[str] | None) -> float:
    """The per-row oaklib way: label(), ancestors() twice, BFS over hierarchical_parents()."""
    pred, truth = parse_label_curie(response), parse_label_curie(ideal)
    if pred is None:
        return 0.0
    canonical = adapter.label(pred.curie)
    valid = canonical is not None and canonical.lower() == pred.label.lower()
    truth_anc = set(adapter.ancestors(truth.curie, predicates=["rdfs:subClassOf"], reflexive=False))
    pred_anc = set(adapter.ancestors(pred.curie, predicates=["rdfs:subClassOf"], reflexive=False))
    if pred.curie == truth.curie:
        rel, start, target = "exact", None, None
    elif pred.curie in truth_anc:
        rel, start, target = "ancestor", truth.curie, pred.curie
    elif truth.curie in pred_anc:
        rel, start, target = "descendant", pred.curie, truth.curie
    else:
        rel, start, target = "unrelated", None, None
    hops = 0 if rel == "exact" else None
    if start is not None:
        seen, queue = {start}, deque([(start, 0)])
        while queue and hops is None:
            node, dist = queue.popleft()
            for parent in adapter.hierarchical_parents(node):
                if parent == target:
                    hops = dist + 1
                    break
                if parent not in seen:
                    seen.add(parent)
                    queue.append((parent, dist + 1))
    in_enum = None if allowed is None else pred.curie in allowed
    return round(0.1 + 0.1 * valid + 0.5 * hierarchy_score(rel, hops) + 0.3 * enum_score(in_enum), 10)


def main() -> None:
    from oaklib import get_adapter

    suite, enums = load_suite(), load_enums()
    rows = [(p, case.ideal, enums.get(case.template)) for case in suite.cases for p in PREDICTIONS]
    index = load_index()
    adapter = get_adapter(default_selector())
    adapter.label("ENVO:00000428")  # parse the file before timing

    start = time.perf_counter()
    slow = [obvious_score(adapter, p, ideal, allowed) for p, ideal, allowed in rows]
    slow_s = time.perf_counter() - start
    start = time.perf_counter()
    fast = [score_ebs(p, ideal, index=index, allowed=allowed).ontology_score for p, ideal, allowed in rows]
    fast_s = time.perf_counter() - start
    assert fast == slow, "index scores differ from the per-row oaklib scores"

    print(f"rows scored:              {len(rows)} (identical scores: yes)")
    print(f"obvious per-row oaklib:   {slow_s / len(rows) * 1e6:10.1f} us/row")
    print(f"cached index:             {fast_s / len(rows) * 1e6:10.1f} us/row")
    print(f"speed-up:                 {slow_s / fast_s:10.0f}x")

    bare = "import fieldeval.ontology, scorers.ebs"
    warm = bare + "; fieldeval.ontology.load_index()"
    for _ in range(2):  # warm the disk cache of the files themselves
        subprocess.run([sys.executable, "-c", warm], check=True)
    timings = {}
    for name, code in [("imports only", bare), ("imports + warm index", warm)]:
        runs = []
        for _ in range(5):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True)
            runs.append(time.perf_counter() - start)
        timings[name] = min(runs)
    extra = timings["imports + warm index"] - timings["imports only"]
    print(f"warm-cache start-up cost: {extra:10.3f} s beyond imports (budget 0.5 s)")


if __name__ == "__main__":
    main()
