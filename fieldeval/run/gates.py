"""Threshold gates: checked when the session starts, judged on the aggregated metrics when it ends."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fieldeval.benchmark import Benchmark, benchmarks
from fieldeval.errors import UsageError
from fieldeval.settings import Gate


def check_gate(gate: Gate) -> None:
    """A gate names an installed benchmark and one of its metrics, with a threshold in the metric's range."""
    bench = get_benchmark_for_gate(gate)
    metric = bench.metric(gate.metric)
    if not metric.low <= gate.threshold <= metric.high:
        raise UsageError(f"threshold {gate.bench}.{gate.metric}={gate.threshold:g}: must be between "
                         f"{metric.low:g} and {metric.high:g}")


def check_gate_options(max_errors: int | None, tolerance: float) -> None:
    """``--max-errors`` and ``--regression-tolerance`` as pytest and ``runs merge`` take them (a usage error if not)."""
    if max_errors is not None and max_errors < 0:
        raise UsageError(f"--max-errors {max_errors}: must be at least 0")
    if not tolerance >= 0:
        raise UsageError(f"--regression-tolerance {tolerance:g}: must be 0 or more "
                         "(a tolerated drop, in the metric's units)")


def get_benchmark_for_gate(gate: Gate) -> Benchmark:
    """The gate's benchmark; a usage error naming the installed ones when absent."""
    known = benchmarks()
    if gate.bench not in known:
        raise UsageError(f"threshold {gate.bench}.{gate.metric}: unknown benchmark {gate.bench!r}; "
                         f"choose from {', '.join(sorted(known))}")
    return known[gate.bench]


def gate_results(gates: Sequence[Gate], out: dict, *, on: str, ran: Sequence[str],
                 model_ids: Mapping[str, str] | None = None, interval: str = "clusters") -> list[dict]:
    """One result per gate and model of the payload's benchmarks (``out``).

    A gate on a benchmark of this run (``ran``) that scored nothing fails with a ``reason``
    instead of a value; gates on benchmarks the run did not include, and gates of models the
    run did not evaluate, are left out. A model asked for by an alias (``model_ids``: alias to
    model id) is gated as its model id, unless a gate names the alias itself. ``on="lower"`` gates on the
    lower bound of ``ci95`` (on new clusters), or of ``ci95_within`` when ``interval`` is ``within``.
    """
    ci_key = "ci95_within" if interval == "within" else "ci95"
    named = {gate.model for gate in gates if gate.model is not None}

    def gated_as(model: str) -> str:
        return model if model in named else (model_ids or {}).get(model, model)

    results = []
    for gate in gates:
        if gate.bench not in ran:
            continue
        name = f"{gate.bench}.{gate.metric}"
        entries = {m: e for m, e in out.get(gate.bench, {}).items() if gate.applies_to(gated_as(m))}
        if not entries and (gate.model is not None or out.get(gate.bench)):
            continue  # a gate of another model (e.g. a baseline's floor), or a default every model here overrides
        if not entries:
            results.append({"metric": name, "model": gate.model or "-", "gate_on": on, "value": None,
                            "threshold": gate.threshold, "passed": False,
                            "reason": f"{gate.bench} scored no items"})
        for model, entry in entries.items():
            value = (entry.get(gate.metric) or {}).get("value")
            if on == "lower" and value is not None:
                value = (entry[gate.metric].get(ci_key) or entry[gate.metric]["ci95"])[0]
            result = {"metric": name, "model": model, "gate_on": on, "value": value, "threshold": gate.threshold,
                      "passed": value is not None and value >= gate.threshold}
            if value is None and (entry.get(gate.metric) or {}).get("value") is not None:
                clusters = entry[gate.metric].get("n_clusters")
                result["reason"] = (f"{name} for {model} has no ci95 lower bound: its items come from only "
                                    f"{clusters} cluster(s); gate on the point value or add clusters")
            elif value is None and entry.get("scored"):
                result["reason"] = (f"{name} is not defined for any of {model}'s {entry['scored']} scored items "
                                    "(the lines above say why)")
            elif value is None:
                result["reason"] = f"{gate.bench} scored no items for {model} (every item errored or was left out)"
            results.append(result)
    return results


def error_gates(out: dict, status: str, max_errors: int | None, run_id: str | None = None) -> list[dict]:
    """A failed ``errors`` gate for a partial run (some planned items errored) unless ``max_errors`` allows it;
    its advice names the command that completes the run's own plan (``run_id``: the run's id)."""
    if status != "partial":
        return []
    planned = errors = 0
    for entry in (entry for models in out.values() for entry in models.values()):
        errored, scored, wanted = (int(entry.get(k) or 0) for k in ("errors", "scored", "planned"))
        items = int(entry.get("items", scored + errored) or 0)  # a repeated item once, scored and errored or not
        planned += wanted
        errors += errored + wanted - items  # errored, and (in a merge) missing
    if max_errors is not None and errors <= max_errors:
        return []
    allowed = max_errors or 0
    modules = " ".join(f"evals/test_{name}.py" for name in sorted(out)) or "evals"
    fix = (f"pass --max-errors {errors} to let the gates judge the scored items, or run the rest with "
           f"`pytest {modules} --resume {run_id or 'RUN_ID'}` (it runs only the run's own items)")
    return [{"metric": "errors", "model": "-", "gate_on": "count", "value": errors, "planned": planned,
             "threshold": allowed, "passed": False,
             "reason": f"the run is partial: {errors} of {planned} planned items errored or missing "
                       f"(at most {allowed} allowed; {fix})"}]


__all__ = ["check_gate", "check_gate_options", "error_gates", "gate_results", "get_benchmark_for_gate"]
