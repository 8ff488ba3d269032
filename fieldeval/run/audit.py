"""The gold-data audit of a run: ``report["evals"]["audit"]`` and the terminal's line per benchmark with findings."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from fieldeval.benchmark import Benchmark
from fieldeval.errors import UsageError


def run_audit(names: Iterable[str], benchmark: Callable[[str], Benchmark],
              context: Callable[[str], Any]) -> dict[str, list[dict[str, Any]]]:
    """``{benchmark: [finding as JSON, ...]}`` for the run's benchmarks; an audit that cannot run is one finding
    of kind ``audit_error`` (the run's numbers stand without it)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for name in names:
        try:
            out[name] = [finding.as_dict() for finding in benchmark(name).audit(context(name))]
        except UsageError as error:
            out[name] = [{"kind": "audit_error", "message": f"the audit could not run: {error}", "count": 0,
                          "cases": []}]
    return out


def audit_lines(audit: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[str]:
    """One line per benchmark with findings: ``ebs: 1 gold-data finding; `fieldeval audit ebs```."""
    return [f"{name}: {len(found)} gold-data finding{'s' if len(found) != 1 else ''}; `fieldeval audit {name}`"
            for name, found in audit.items() if found]
