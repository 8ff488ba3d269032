"""The dashboard's diff of two runs: what each benchmark's section shows at its top when a base run is chosen."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fieldeval.errors import UsageError

SHOWN = 10  # worse and better items shown in each section


def pick_run(base: str, run: str | None, stored: Sequence[str]) -> str | None:
    """The run to diff against ``base``: ``run`` when stored, else the newest other stored run (None: none)."""
    if run and run in stored and run != base:
        return run
    others = [run_id for run_id in stored if run_id != base]
    return others[-1] if others else None


def api_diff(store: Any, base: str, run: str, *, benchmark: str | None, base_model: str | None,
             model: str | None) -> Any:
    """``GET /api/evaluations/diff``: one benchmark's diff; NotFound for an unknown run, 422 when the runs share
    several benchmarks and none is chosen."""
    from starlette.responses import JSONResponse

    from fieldeval.service.views import NotFound
    from fieldeval.store.diff import run_diff

    stored = {summary.run_id for summary in store.list_runs()}
    for run_id in (base, run):
        if run_id not in stored:
            raise NotFound(f"run {run_id!r}: not a stored run; GET /api/evaluations lists them")
    diffs = run_diff(store, base, run, benchmark=benchmark or None, base_model=base_model, model=model)
    if len(diffs) > 1:
        return JSONResponse({"message": f"benchmark: runs {base} and {run} share "
                                        f"{', '.join(d['benchmark'] for d in diffs)}; pass benchmark= with one of them"},
                            status_code=422)
    return diffs[0]


def diff_sections(store: Any, base: str | None, run: str | None) -> dict[str, Any] | None:
    """``{"base", "run", "benchmarks": {bench: section}, "note"}`` for the page, or None without a base.

    A section holds the diff (:func:`fieldeval.store.diff.diff_rows`), the models it paired, the
    worse and better items (first :data:`SHOWN`), the unchanged count, the transition rows to draw and
    the flips; a benchmark the runs cannot be diffed on carries ``note`` instead.
    """
    if not base:
        return None
    from fieldeval.store.diff import diff_rows, pick_model, shared_benchmarks, updown, worse_better

    stored = [summary.run_id for summary in store.list_runs()]
    if base not in stored:
        return {"base": base, "run": None, "benchmarks": {}, "note": f"base run {base!r} is not stored"}
    other = pick_run(base, run, stored)
    if other is None:
        return {"base": base, "run": None, "benchmarks": {}, "note": "no other stored run to diff against the base"}
    base_rows, rows = store.run_rows(base), store.run_rows(other)
    try:
        benches = shared_benchmarks(base, base_rows, other, rows, None)
    except UsageError as error:
        return {"base": base, "run": other, "benchmarks": {}, "note": str(error)}
    sections: dict[str, Any] = {}
    for bench in benches:
        try:
            models = (pick_model(base, bench, base_rows[bench], None, "--base-model"),
                      pick_model(other, bench, rows[bench], None, "--model"))
            diff = diff_rows(base, base_rows, other, rows, bench)
        except UsageError as error:
            sections[bench] = {"note": str(error)}
            continue
        worse, better, unchanged, unscored = worse_better(diff["items"])
        transitions = diff["transitions"]
        kind = "dimension" if transitions and "dimension" in transitions[0] else (
            "class" if transitions and "class" in transitions[0] else "relationship")
        sections[bench] = {"diff": diff, "base_model": models[0], "model": models[1], "worse": worse[:SHOWN],
                           "better": better[:SHOWN], "n_worse": len(worse), "n_better": len(better),
                           "unchanged": unchanged, "unscored": unscored, "kind": kind,
                           "transitions": updown(transitions) if kind == "dimension" else transitions}
    return {"base": base, "run": other, "benchmarks": sections, "note": None}
