"""Run groups: the shards of one sharded run, checked and merged into one stored run.

Each shard is a stored run with ``run_group``, ``shard_index`` (1-based) and
``shard_count`` set, and the fingerprint of its settings. A merge refuses
unless the group's shards are exactly 1..N, all ``completed``, share their
settings, hold disjoint items and together hold every planned item of the
suite (``--allow-partial`` merges the rest as a ``partial`` run); then it re-aggregates the union of their
stored rows with the same seeded bootstrap (:func:`fieldeval.run.entries.benchmark_entries`)
and stores the result as one run with ``shard_index`` NULL. The merged run
stores no rows of its own: its payload's ``run_group`` lists the shards with
``"rows": "shards"``, and the store reads a merged run's responses from them
(a shard cannot be deleted while a merged run refers to it). The store holds at most one
merged run per group (a unique index, checked in the save's transaction), so of two concurrent
merges one is stored and the other is refused as already merged.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from fieldeval.errors import UsageError
from fieldeval.store.schema import iso, utcnow

if TYPE_CHECKING:
    from fieldeval.store.core import Store


@dataclass(frozen=True)
class Shard:
    """One stored shard of a run group.

    Attributes:
        run_id: the shard's run id.
        index: 1-based shard index (pytest-split's ``--group``).
        count: shard count (``--splits``).
        status: ``completed`` or ``interrupted``.
        settings: the run-wide settings it ran with.
        settings_hash: their fingerprint.
        payload: the shard's saved report payload.
    """

    run_id: str
    index: int
    count: int
    status: str
    settings: dict[str, Any]
    settings_hash: str | None
    label: str | None
    git_commit: str | None
    created_at: datetime
    payload: dict[str, Any]


@dataclass(frozen=True)
class MergedRun:
    """A merge's outcome: the stored run's id, its payload (gates included) and the shards it joined."""

    run_id: str
    payload: dict[str, Any]
    shards: tuple[str, ...]

    @property
    def gates_passed(self) -> bool:
        """Whether every gate of the merged run passed."""
        return all(gate["passed"] for gate in self.payload["gates"])


def _group_runs(store: Store, name: str) -> tuple[list[Shard], list[str]]:
    """The group's shards, and the ids of runs that are already its merge."""
    t = store.tables.evaluations
    with store.engine.connect() as conn:
        runs = conn.execute(sa.select(t).where(t.c.run_group == name).order_by(t.c.shard_index, t.c.run_id)).all()
    shards = [Shard(r.run_id, r.shard_index, r.shard_count, r.status, r.settings or {}, r.settings_hash, r.label,
                    r.git_commit, r.created_at, r.payload) for r in runs if r.shard_index is not None]
    return shards, [r.run_id for r in runs if r.shard_index is None]


def _first_difference(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    """``seed 7 != 20261130`` for the first top-level setting that differs."""
    key = next((k for k in sorted({*a, *b}) if a.get(k) != b.get(k)), "settings")
    return f"{key} {a.get(key)!r} != {b.get(key)!r}"


def check_shards(name: str, shards: Sequence[Shard], merged: Sequence[str], url: str, *,
                 allow_partial: bool = False) -> int:
    """The shard count; a usage error when the group is empty, merged, incomplete, duplicated or mixed."""
    if merged:
        raise UsageError(f"run group {name!r}: already merged as {merged[0]}; see `fieldeval runs show {merged[0]}`, "
                         f"or `fieldeval runs delete {merged[0]}` to merge again")
    if not shards:
        raise UsageError(f"run group {name!r}: no shards in the store {url}; run each shard with "
                         f"`pytest evals --splits N --group K --run-group {name}`")
    counts = sorted({s.count for s in shards})
    if len(counts) > 1:
        raise UsageError(f"run group {name!r}: shards disagree on the shard count ({', '.join(map(str, counts))}); "
                         "run every shard with the same --splits")
    count = counts[0]
    for index, times in Counter(s.index for s in shards).items():
        if times > 1:
            ids = ", ".join(s.run_id for s in shards if s.index == index)
            raise UsageError(f"run group {name!r}: shard {index} is stored {times} times ({ids}); "
                             "delete the stale one with `fieldeval runs delete RUN`")
    missing = sorted(set(range(1, count + 1)) - {s.index for s in shards})
    if missing:
        raise UsageError(f"run group {name!r}: shard(s) {', '.join(map(str, missing))} of {count} missing; run "
                         f"`pytest evals --splits {count} --group K --run-group {name}` for each")
    for shard in shards:
        if shard.status != "completed" and not (allow_partial and shard.status == "partial"):
            hint = (", or pass --allow-partial to merge it as a partial run" if shard.status == "partial" else "")
            raise UsageError(f"run group {name!r}: shard {shard.index} ({shard.run_id}) is {shard.status}, not "
                             f"completed; resume it with `pytest evals --resume {shard.run_id}` or delete it and run "
                             f"that shard again{hint}")
    first = shards[0]
    for shard in shards[1:]:
        if shard.settings_hash != first.settings_hash:
            raise UsageError(f"run group {name!r}: shard {shard.index} ({shard.run_id}) ran with other settings than "
                             f"shard {first.index} ({first.run_id}): {_first_difference(shard.settings, first.settings)}"
                             "; run every shard with the same options")
    return count


def shard_rows(store: Store, name: str, shards: Sequence[Shard]) -> dict[str, list[dict]]:
    """The union of the shards' recorded rows by benchmark; a usage error when an item is in two shards."""
    t = store.tables.evaluation_responses
    owner: dict[tuple[str, str], int] = {}
    rows: dict[str, list[dict]] = {}
    with store.engine.connect() as conn:
        for shard in shards:
            query = sa.select(t.c.benchmark, t.c.metrics, t.c.row_extra).where(t.c.run_id == shard.run_id)
            for bench, metrics, extra in conn.execute(query):
                if extra is None or "nodeid" not in extra:
                    raise UsageError(f"run group {name!r}: shard {shard.index} ({shard.run_id}) was stored without "
                                     "its full rows (before run groups); run that shard again")
                key = (bench, extra["nodeid"])
                if key in owner:
                    raise UsageError(f"run group {name!r}: item {key[1]} is in shard {owner[key]} and shard "
                                     f"{shard.index}; the shards overlap, run every shard with the same --splits")
                owner[key] = shard.index
                rows.setdefault(bench, []).append({**(metrics or {}), **extra})
    return rows


def _combinations(rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """``{label: model}`` of the matrix combinations among the rows (a matrix cell's row names its ``model_name``),
    so a model's thresholds gate each combination of it in the merge, as in the session."""
    return {str(row["model"]): str(row["model_name"]) for row in rows if row.get("model_name") and row.get("model")}


def _errors(shards: Sequence[Shard]) -> Counter[tuple[str, str]]:
    """Failed items by (benchmark, model), summed over the shards."""
    errors: Counter[tuple[str, str]] = Counter()
    for shard in shards:
        for bench, models in (shard.payload.get("benchmarks") or {}).items():
            for model, entry in models.items():
                errors[(bench, model)] += int(entry.get("errors") or 0)
    return errors


def planned_items(settings: Mapping[str, Any]) -> dict[tuple[str, str], list[str]]:
    """The suite's planned case keys by (benchmark, model), from the shards' settings (empty for older shards)."""
    cases = settings.get("cases") or {}
    models = settings.get("models") or {}
    return {(bench, model): list(keys) for bench, keys in cases.items() for model in models.get(bench, [])}


def missing_items(planned: Mapping[tuple[str, str], Sequence[str]], rows: Mapping[str, Sequence[dict]],
                  errored: Sequence[tuple[str, str, str]] = ()) -> list[str]:
    """``bench model case`` of each planned item that no shard scored nor errored on, in suite order."""
    from fieldeval.rows import case_key

    seen = {(bench, str(row.get("model")), case_key(row)) for bench, bench_rows in rows.items() for row in bench_rows}
    seen |= set(errored)
    return [f"{bench} {model} {key}" for (bench, model), keys in planned.items() for key in keys
            if (bench, model, key) not in seen]


def _errored_items(store: Store, shards: Sequence[Shard]) -> list[tuple[str, str, str, bool]]:
    """(benchmark, model, case key, whether it is an epoch of a repeated item) of the shards' errored items."""
    t = store.tables.evaluation_errors
    with store.engine.connect() as conn:
        found = conn.execute(sa.select(t.c.benchmark, t.c.model, t.c.item_id)
                             .where(t.c.run_id.in_([s.run_id for s in shards]))).all()
    return [(bench, model, *_errored_case(item, model)) for bench, model, item in found]


def _errored_case(nodeid: str, model: str) -> tuple[str, bool]:
    """An errored item's case key from its node id, and whether it is an epoch (``...-MODEL-e2]``) of a repeated
    item, whose scored epochs' rows record the same case key."""
    import re

    from fieldeval.rows import case_key

    params = nodeid.split("[", 1)[1].removesuffix("]") if "[" in nodeid else nodeid
    epoch = re.fullmatch(rf"(.+)-{re.escape(model)}-e\d+", params)
    if epoch:
        return epoch.group(1), True
    return case_key({"nodeid": nodeid, "model": model}), False


def _errored_epochs(errored: Sequence[tuple[str, str, str, bool]]) -> dict[tuple[str, str], Counter[str]]:
    """The errored epochs of repeated items by (benchmark, model), counted by case key over every shard: an item
    whose epochs ran in two shards counts once."""
    found: dict[tuple[str, str], Counter[str]] = {}
    for bench, model, case, repeated in errored:
        if repeated:
            found.setdefault((bench, model), Counter())[case] += 1
    return found


def _shared(values: Sequence[Any]) -> Any:
    """The value every shard has, else None."""
    return values[0] if values and all(v == values[0] for v in values) else None


def merge_group(store: Store, name: str, tool: Mapping[str, Any], *, allow_partial: bool = False,
                max_errors: int | None = None, baseline_run: str | None = None, tolerance: float = 0.0) -> MergedRun:
    """Check the group's shards, re-aggregate their union, gate it and store it as one run.

    Args:
        store: the store the shards were written to.
        name: the ``--run-group`` the shards ran with.
        tool: the project's ``[tool.fieldeval]`` table: its thresholds gate the merged run, with the
            shards' ``--fail-under`` and ``--gate-on``, as they gate a pytest session.
        allow_partial: merge partial shards, and a union that lacks planned items, as a ``partial`` run.
        max_errors: let the gates judge a partial merge with at most this many unscored planned items.
        baseline_run: gate the merged run against this stored run (paired differences), as
            ``pytest --baseline-run`` does.
        tolerance: the drop the baseline gate tolerates.

    Returns:
        The merged run: stored with ``run_group`` ``name``, ``shard_count`` N and ``shard_index`` NULL.

    Raises:
        UsageError: no shards, already merged, a shard missing, stored twice, not completed, with other
            settings, an item in two shards, or (without ``allow_partial``) planned items missing from the union.

    Example:
        >>> merge_group(store, "9876543210", tool_settings(Path.cwd())).run_id  # doctest: +SKIP
        'run_5d0c9e1a'
    """
    from fieldeval.rows import by_nodeid
    from fieldeval.run.entries import benchmark_entries
    from fieldeval.run.gates import gate_results
    from fieldeval.run.report import gated_as
    from fieldeval.run.gates import check_gate
    from fieldeval.settings import load_thresholds

    from fieldeval.run.gates import error_gates
    from fieldeval.stats.paired import differences, regression_gates

    shards, merged = _group_runs(store, name)
    count = check_shards(name, shards, merged, store.url, allow_partial=allow_partial)
    settings = shards[0].settings
    gates = load_thresholds(dict(tool), settings.get("fail_under", []))
    for gate in gates:
        check_gate(gate)
    if baseline_run:
        store.run_settings(baseline_run)  # a usage error naming the store when it is not stored
    rows = shard_rows(store, name, shards)
    errors = _errors(shards)
    planned = planned_items(settings)
    errored = _errored_items(store, shards)
    missing = missing_items(planned, rows, [(bench, model, case) for bench, model, case, _ in errored])
    if missing and not allow_partial:
        raise UsageError(f"run group {name!r}: the shards' union lacks {len(missing)} of "
                         f"{sum(len(v) for v in planned.values())} planned items (first: {', '.join(missing[:3])}); "
                         "run them (e.g. `pytest evals --resume RUN` on the shard that left them out), "
                         "or pass --allow-partial")
    partial = bool(missing) or any(s.status == "partial" for s in shards)
    cluster_by = settings.get("cluster_by") or "benchmark"
    entries = benchmark_entries(rows, errors, seed=settings["seed"], resamples=settings["resamples"],
                                errored_epochs=_errored_epochs(errored),
                                cluster_by=cluster_by, planned={k: len(v) for k, v in planned.items()})
    all_rows = [row for bench_rows in rows.values() for row in bench_rows]
    payload = {
        "run_id": "run_" + secrets.token_hex(4),
        "started_at": iso(min(s.created_at for s in shards)),
        "ontology_version": settings.get("ontology_version"),
        "benchmarks": entries,
        "cache": {"mode": _shared([(s.payload.get("cache") or {}).get("mode") for s in shards]),
                  "hits": sum(1 for r in all_rows if r.get("cached")),
                  "misses": sum(1 for r in all_rows if not r.get("cached"))},
        "gates": gate_results(gates, entries, on=settings.get("gate_on", "point"), ran=sorted(entries),
                              interval=settings.get("gate_interval", "clusters"),
                              model_ids=gated_as({model for models in entries.values() for model in models},
                                                 _combinations(all_rows))),
        "run_group": {"name": name, "shards": [s.run_id for s in shards], "rows": "shards"},
        "status": "partial" if partial else "completed",
    }
    audits = {}  # each benchmark's gold-data findings, from the shards (they share the data they were run on)
    for shard in shards:
        for bench, findings in (shard.payload.get("audit") or {}).items():
            audits.setdefault(bench, findings)
    if audits:
        payload["audit"] = audits
    payload["gates"] += error_gates(entries, payload["status"], max_errors)
    if baseline_run:
        diffs, notes = differences(baseline_run, store.run_rows(baseline_run), payload["run_id"], rows,
                                   seed=settings["seed"], resamples=settings["resamples"], cluster_by=cluster_by,
                                   tolerance=tolerance)
        payload["baseline"] = {"run": baseline_run, "differences": diffs, "notes": notes}
        payload["gates"] += regression_gates(diffs, tolerance=tolerance,
                                             interval=settings.get("gate_interval", "clusters"))
    meta = {
        "label": _shared([s.label for s in shards]) or f"merge of run group {name}",
        "corpus_version": {b: v for b, v in (settings.get("corpus_versions") or {}).items() if v},
        "content_hash": {b: v for b, v in (settings.get("content_hashes") or {}).items() if v},
        "git_commit": _shared([s.git_commit for s in shards]),
        "status": payload["status"], "completed_at": utcnow(),
        "items_planned": sum(e["planned"] for models in entries.values() for e in models.values()),
        "items_done": sum(e["items"] for models in entries.values() for e in models.values()),
        "items_errored": sum(e["errors"] for models in entries.values() for e in models.values()),
        "run_group": name, "shard_index": None, "shard_count": count,
        "settings": settings, "settings_hash": shards[0].settings_hash,
        "rows_from": [s.run_id for s in shards],  # the merged run refers to its shards' rows, never copies them
    }
    try:
        store.save_run(payload, {bench: by_nodeid(bench_rows) for bench, bench_rows in rows.items()}, meta)
    except sa.exc.IntegrityError:  # the store's one merged run per group: a concurrent merge committed first
        check_shards(name, *_group_runs(store, name), store.url, allow_partial=allow_partial)
        raise
    return MergedRun(payload["run_id"], payload, tuple(s.run_id for s in shards))


__all__ = ["MergedRun", "Shard", "check_shards", "merge_group", "missing_items", "planned_items", "shard_rows"]
