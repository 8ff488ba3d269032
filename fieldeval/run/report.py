"""A run's report (``report["evals"]``), its gates' verdicts and its status, from its rows, errors and plan.

Every function here reads what it is given and returns a value; none writes,
prints or reads a store (the baseline run's rows come in as a callable).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pytest

from fieldeval.calls.cells import Combination
from fieldeval.calls.client import model_ids
from fieldeval.errors import UsageError
from fieldeval.run.entries import benchmark_entries
from fieldeval.run.gates import error_gates, gate_results
from fieldeval.stats.paired import regression_gates

if TYPE_CHECKING:
    from fieldeval.run.intake import Intake
    from fieldeval.run.options import EngineOptions
    from fieldeval.run.progress import Progress
    from fieldeval.run.selection import Selection
    from fieldeval.settings import Gate

Key = tuple[str, str]  # (benchmark, model)
SAVE_FAILED = 2  # the run could not be saved whole (store down, disk full): one line, and CI fails


def build_payload(*, run_id: str, started_at: str, status: str, rows: Mapping[str, list[dict]], intake: Intake,
                  planned: Counter[Key], selection: Selection, gates: Sequence[Gate], options: EngineOptions,
                  baseline_rows: Callable[[], dict[str, list[dict]]], ended_at: str | None = None,
                  wall_s: float | None = None) -> dict:
    """``report["evals"]``: run id, the run's facts (``ended_at`` and ``wall_s``, the session's span start to end,
    once it has ended), every benchmark's metrics per model, cache counts, the gates'
    verdicts (errored items and the baseline run's too once ``status`` is not ``running``), rankings and audit."""
    from fieldeval.run.audit import run_audit

    out = benchmark_entries(rows, intake.errors, seed=options.seed, resamples=options.resamples,
                            cluster_by=options.cluster_by, planned=planned, errored_epochs=intake.errored_epochs)
    # every row is one (benchmark, model)'s: the cache hits are the entries' cached items (no pass over the rows)
    hits = sum(entry["totals"]["cached_items"] for entries in out.values() for entry in entries.values())
    ran = sorted({*selection.selected, *out})
    verdicts = gate_results(gates, out, on=options.gate_on, interval=options.gate_interval, ran=ran,
                            model_ids=gated_models(out, selection))
    unmatched = unmatched_gates(gates, out, ran)
    facts = run_facts(rows, selection)
    payload: dict[str, Any] = {
        "run_id": run_id,
        "started_at": started_at,
        **({"ended_at": ended_at, "wall_s": round(wall_s, 3)} if ended_at and wall_s is not None else {}),
        "ontology_version": facts.pop("ontology_version", None),
        **facts,
        "benchmarks": out,
        "cache": {"mode": options.cache, "hits": hits, "misses": sum(map(len, rows.values())) - hits},
        "gates": verdicts,
        "status": status,
    }
    if unmatched:
        payload["unmatched_thresholds"] = unmatched
    if options.cluster_by != "benchmark":
        payload["cluster_by"] = options.cluster_by
    ranking = rankings(out, rows, options)
    if ranking:
        payload["tied_with_best"] = ranking
    scoring = selection.scoring()
    if scoring:
        payload["scoring"] = scoring
    payload["audit"] = run_audit(ran, selection.benchmark, selection.context)
    if status != "running":  # judged once the session ends: errored items, then the baseline run
        verdicts += error_gates(out, status, options.max_errors, run_id)
        if options.baseline_run and out:
            payload["baseline"] = _compared(run_id, rows, baseline_rows, options)
            verdicts += regression_gates(payload["baseline"]["differences"], tolerance=options.regression_tolerance,
                                         interval=options.gate_interval)
    return payload


def run_facts(rows: Mapping[str, list[dict]], selection: Selection) -> dict[str, Any]:
    """Each run fact the benchmarks declare (``run_facts``): its one value across their rows, the sorted distinct
    values when they differ, None when no row has one."""
    values: dict[str, set] = {}
    for name in sorted({*selection.selected, *rows}):
        for key in selection.benchmark(name).run_facts:
            values.setdefault(key, set()).update(r[key] for r in rows.get(name, ()) if r.get(key))
    return {key: (sorted(found)[0] if len(found) == 1 else (sorted(found) or None)) for key, found in values.items()}


def _compared(run_id: str, rows: Mapping[str, list[dict]], baseline_rows: Callable[[], dict[str, list[dict]]],
              options: EngineOptions) -> dict:
    """``{"run", "differences", "notes"}``: this run against ``--baseline-run``, paired by case."""
    from fieldeval.stats.paired import differences

    try:
        base = baseline_rows()
    except UsageError as error:
        return {"run": options.baseline_run, "differences": [], "notes": [str(error)]}
    diffs, notes = differences(options.baseline_run, base, run_id, {name: list(r) for name, r in rows.items()},
                               seed=options.seed, resamples=options.resamples, cluster_by=options.cluster_by,
                               tolerance=options.regression_tolerance)
    return {"run": options.baseline_run, "differences": diffs, "notes": notes}


def unmatched_gates(gates: Sequence[Gate], out: Mapping[str, Mapping[str, Any]], ran: Sequence[str]) -> list[dict]:
    """The thresholds of a benchmark this run scored whose model neither ran nor is any llm model's name (a
    misspelling, most likely, which would otherwise leave its gate silently unchecked): ``{"model", "gates",
    "models_run"}`` each. A threshold of a known model that did not run (a baseline's floor) is not one."""
    ran_models = sorted({model for name in ran for model in out.get(name, {})})
    named = {gate.model for gate in gates if gate.model is not None and gate.bench in ran}
    unknown = named - set(ran_models)
    if not unknown:
        return []
    known = set(model_ids(unknown)) | {name for name in unknown if _is_model(name)}
    found = []
    for name in sorted(unknown - known):
        metrics = sorted(f"{g.bench}.{g.metric}" for g in gates if g.model == name and g.bench in ran)
        found.append({"model": name, "gates": metrics, "models_run": ran_models})
    return found


def _is_model(name: str) -> bool:
    import llm

    try:
        llm.get_model(name)
    except llm.UnknownModelError:
        return False
    return True


def gated_models(out: Mapping[str, Mapping[str, Any]], selection: Selection) -> dict[str, str]:
    """The model id each reported name is gated as: an llm alias's model id, and a matrix combination's
    (``gpt-4o-mini-t0.7``) model's, so a model's thresholds reach every combination of it."""
    names = {model for models in out.values() for model in models}
    combos = {str(c): c.model for bench in out for c in selection.models_for(bench) if isinstance(c, Combination)}
    return gated_as(names, combos)


def gated_as(names: set[str], combos: Mapping[str, str]) -> dict[str, str]:
    """The model id each name is gated as, given the matrix combinations' models (``{label: model}``)."""
    ids = model_ids(names | set(combos.values()))
    found = {name: ids[name] for name in names if name in ids}
    found.update({label: ids.get(model, model) for label, model in combos.items() if label in names})
    return found


def rankings(out: Mapping[str, Mapping[str, Any]], rows: Mapping[str, list[dict]], options: EngineOptions) -> dict:
    """``{bench: ranking}`` for each benchmark two or more models (or matrix combinations) scored: the best by
    its lead metric and those tied with it after Holm (:func:`fieldeval.stats.ranking.tied_with_best`)."""
    from fieldeval.stats.ranking import tied_with_best

    found = {}
    for bench, models in out.items():
        if len(models) > 1:
            ranking = tied_with_best(bench, list(rows.get(bench, [])), models, seed=options.seed,
                                     resamples=options.resamples, cluster_by=options.cluster_by)
            if ranking:
                found[bench] = ranking
    return found


def run_status(exitstatus: int, progress: Progress, errors: Counter[Key]) -> str:
    """``completed`` only when every planned item was scored and pytest ended normally; ``partial`` when
    every planned item ran but some errored; else ``interrupted``."""
    normal = exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
    if not normal or sum(progress.done.values()) < sum(progress.planned.values()):
        return "interrupted"
    return "partial" if sum(progress.errors.values()) or sum(errors.values()) else "completed"


def item_counts(payload: Mapping[str, Any], progress: Progress, epochs_of: Callable[[Key], int]) -> dict[str, int]:
    """The stored run's ``items_planned``, ``items_done`` and ``items_errored``: an item asked K times
    (``--epochs``) counts once, as its report entry counts it."""
    entries = {(bench, model): entry for bench, models in payload["benchmarks"].items()
               for model, entry in models.items()}
    counts = dict.fromkeys(("items_planned", "items_done", "items_errored"), 0)
    for key in {*progress.planned, *progress.done}:
        k, entry = epochs_of(key), entries.get(key)
        if k > 1 and entry is not None:
            found = (entry["planned"], entry["items"], entry["errors"])
        else:
            found = (round(progress.planned.get(key, 0) / k), progress.done.get(key, 0), progress.errors.get(key, 0))
        for name, n in zip(counts, found):
            counts[name] += n
    return counts


def stored_meta(payload: Mapping[str, Any], *, selection: Selection, options: EngineOptions, status: str,
                progress: Progress, intake: Intake, completed_at: str, git_commit: str | None,
                plan_ids: list[str] | None = None) -> dict[str, Any]:
    """What the store keeps of a run beside its payload and rows: label, corpus versions and hashes, commit,
    status, times, its run group and settings (:func:`~fieldeval.run.shards.run_group_meta`), its item counts and
    errored items."""
    from fieldeval.run.shards import run_group_meta

    metas = {name: selection.run_meta(name) for name in intake.rows()}
    return {
        "label": options.run_label,
        "corpus_version": {b: m.corpus_version for b, m in metas.items() if m.corpus_version},
        "content_hash": {b: m.content_hash for b, m in metas.items() if m.content_hash},
        "git_commit": git_commit,
        "status": status,
        "completed_at": completed_at,
        **run_group_meta(selection, payload.get("ontology_version"), plan_ids),
        **item_counts(payload, progress, selection.epochs_of),
        "errors": intake.failed_items,
    }


def recompute_inputs(options: EngineOptions, intake: Intake, progress: Progress) -> dict[str, Any]:
    """What a kept run's metrics are recomputed from besides its rows (``runs push`` checks them)."""
    return {"seed": options.seed, "resamples": options.resamples, "cluster_by": options.cluster_by,
            "errors": [[b, str(m), n] for (b, m), n in intake.errors.items()],
            "planned": [[b, str(m), n] for (b, m), n in progress.planned.items()],
            "errored_epochs": [[b, str(m), case, n] for (b, m), cases in intake.errored_epochs.items()
                               for case, n in cases.items()]}


def exit_status(pytest_status: int, payload: Mapping[str, Any], *, errors_allowed: bool, errored_only: bool,
                disk_full: bool) -> int:
    """The session's exit status once its report is built: a failed gate fails a passing session; errored items
    that ``--max-errors`` allows do not fail it (``errored_only``: they were its only failures) when every gate
    passed; a full disk is :data:`SAVE_FAILED` whatever else happened."""
    passed = all(gate["passed"] for gate in payload["gates"])
    if disk_full:
        return SAVE_FAILED
    if not passed and pytest_status == pytest.ExitCode.OK:
        return pytest.ExitCode.TESTS_FAILED
    if pytest_status == pytest.ExitCode.TESTS_FAILED and errors_allowed and passed and errored_only:
        return pytest.ExitCode.OK
    return pytest_status


__all__ = ["SAVE_FAILED", "build_payload", "exit_status", "gated_models", "item_counts", "rankings", "recompute_inputs",
           "run_facts", "run_status", "stored_meta"]
