"""A run's report entries and gate results, computed from its rows: one path for a session and a merge.

:func:`benchmark_entries` is what ``report["evals"]["benchmarks"]`` holds; a
pytest session computes it from the rows its items recorded, ``fieldeval runs
merge`` from the union of its shards' stored rows. Both order each model's rows
by node id before the seeded bootstrap, so the same items give the same numbers
however they were spread over processes or machines.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fieldeval.benchmark import get_benchmark
from fieldeval.totals import model_totals


def by_nodeid(rows: Iterable[Mapping[str, Any]]) -> list[dict]:
    """Rows in the one stable order every aggregation uses: by pytest node id."""
    return sorted(rows, key=lambda r: r["nodeid"])


def benchmark_entries(rows: Mapping[str, Sequence[dict]], errors: Mapping[tuple[str, str], int], *,
                      seed: int, resamples: int) -> dict[str, dict[str, dict]]:
    """``{bench: {model: entry}}``: each benchmark's ``aggregate`` plus items, errors and totals.

    Args:
        rows: the recorded rows by benchmark, in any order (each has ``model`` and ``nodeid``).
        errors: failed items by (benchmark, model); a model with errors only still gets an entry.
        seed: the bootstrap seed.
        resamples: the bootstrap resamples.

    Returns:
        The entries, benchmarks and models sorted by name.

    Example:
        >>> benchmark_entries({"ebs": rows}, {}, seed=20261130, resamples=1000)["ebs"]["ebs-baseline"]["items"]  # doctest: +SKIP
        100
    """
    out: dict[str, dict[str, dict]] = {}
    for name in sorted({*rows, *(bench for bench, _ in errors)}):
        by_model: dict[str, list[dict]] = defaultdict(list)
        for row in by_nodeid(rows.get(name, [])):
            by_model[row["model"]].append(row)
        out[name] = {}
        for model in sorted({*by_model, *(m for b, m in errors if b == name)}):
            model_rows = by_model.get(model, [])
            entry = get_benchmark(name).aggregate(model_rows, seed=seed, resamples=resamples)
            entry["items"] = len(model_rows) + errors.get((name, model), 0)
            entry["errors"] = errors.get((name, model), 0)
            entry["totals"] = model_totals(model_rows)
            out[name][model] = entry
    return out


__all__ = ["benchmark_entries", "by_nodeid"]
