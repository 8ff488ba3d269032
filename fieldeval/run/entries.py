"""A run's report entries and gate results, computed from its rows: one path for a session and a merge.

:func:`benchmark_entries` is what ``report["evals"]["benchmarks"]`` holds; a
pytest session computes it from the rows its items recorded, ``fieldeval runs
merge`` from the union of its shards' stored rows. Both order each model's rows
by node id before the seeded bootstrap, so the same items give the same numbers
however they were spread over processes or machines.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from fieldeval.benchmark import Benchmark, get_benchmark
from fieldeval.rows import by_nodeid, case_key, without_clusters
from fieldeval.stats.epochs import collapse_epochs, epoch_summary, has_epochs
from fieldeval.run.totals import model_totals


def benchmark_entries(rows: Mapping[str, Sequence[dict]], errors: Mapping[tuple[str, str], int], *,
                      seed: int, resamples: int, cluster_by: str = "benchmark",
                      planned: Mapping[tuple[str, str], int] | None = None,
                      errored_epochs: Mapping[tuple[str, str], Mapping[str, int]] | None = None,
                      ) -> dict[str, dict[str, dict]]:
    """``{bench: {model: entry}}``: each benchmark's ``aggregate`` plus planned, scored, errors and totals.

    An item asked K times (``--epochs``) counts once: in ``items`` and ``planned`` whatever its epochs did, in
    ``scored`` when any epoch scored, in ``errors`` when any epoch errored.

    Args:
        rows: the recorded rows by benchmark, in any order (each has ``model`` and ``nodeid``).
        errors: failed items by (benchmark, model); a model with errors only still gets an entry.
        seed: the bootstrap seed.
        resamples: the bootstrap resamples.
        cluster_by: ``benchmark``: intervals resample the clusters the rows carry; ``none``: items.
        planned: items planned by (benchmark, model), each epoch of a repeated item one; default: the scored and
            errored ones.
        errored_epochs: the errored epochs of repeated items by (benchmark, model), counted by the item's case key.

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
            epoch_rows = by_model.get(model, [])
            model_rows = collapse_epochs(epoch_rows) if has_epochs(epoch_rows) else epoch_rows  # one row per item
            scored_rows = without_clusters(model_rows) if cluster_by == "none" else model_rows
            bench = get_benchmark(name)
            entry = bench.aggregate(scored_rows, seed=seed, resamples=resamples)
            repeated = Counter((errored_epochs or {}).get((name, model)) or {})
            samples = Counter({case_key(row): int(row.get("epochs") or 1) for row in model_rows}) + repeated
            if repeated:  # an item counts once, whichever of its epochs errored
                entry["items"] = len(samples)
                entry["errors"] = len(repeated)
            else:
                entry["items"] = len(model_rows) + errors.get((name, model), 0)
                entry["errors"] = errors.get((name, model), 0)
            entry["scored"] = len(model_rows)
            repeats = max(samples.values()) if epoch_rows is not model_rows or repeated else 1  # K epochs per item
            entry["planned"] = max(round((planned or {}).get((name, model), 0) / repeats), entry["items"])
            entry["totals"] = model_totals(epoch_rows)
            sent = options_sent(epoch_rows)
            if sent is not None:
                entry["options_sent"] = sent
            if epoch_rows is not model_rows:
                metric = epoch_metric(bench, epoch_rows)
                if metric is not None:
                    rows_for_ci = without_clusters(epoch_rows) if cluster_by == "none" else epoch_rows
                    entry["epochs"] = epoch_summary(rows_for_ci, metric, seed=seed, resamples=resamples)
            out[name][model] = entry
    return out


def options_sent(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any] | list[dict[str, Any]] | None:
    """The options the model was sent for these rows' answers (only those it takes: a plugin without a
    temperature shows none): the one set when every item had it, else each distinct set; None when no row says.

    Example:
        >>> options_sent([{"options": {"max_tokens": 64}}, {"options": {"max_tokens": 64}}])
        {'max_tokens': 64}
    """
    distinct: dict[str, dict[str, Any]] = {}
    for row in rows:
        sent = row.get("options")
        if isinstance(sent, dict):
            distinct.setdefault(json.dumps(sent, sort_keys=True), sent)
    if not distinct:
        return None
    found = [distinct[key] for key in sorted(distinct)]
    return found[0] if len(found) == 1 else found


def epoch_metric(bench: Benchmark, rows: Sequence[Mapping[str, Any]]) -> str | None:
    """The per-row score whose variance an epoch run splits: the first headline metric the rows carry as a
    number, else ``correct`` (a classification's), else None."""
    for name in [*bench.headline, "correct"]:
        if any(isinstance(r.get(name), bool | int | float) for r in rows):
            return name
    return None


__all__ = ["benchmark_entries", "epoch_metric"]
