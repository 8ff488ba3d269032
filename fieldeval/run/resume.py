"""``--resume RUN_ID``: the stored run's own settings for the session that completes it, or one line saying why not.

A resumed session takes the run's models, matrix, benchmark options and label
from the store (``settings["resume"]``, see :func:`resume_settings`); a command
line that asks for other values, or selects other benchmarks, is refused before
anything is written. A completed run has nothing to resume. One session at a
time holds a run's lease (:meth:`~fieldeval.store.runs.RunStore.take_lease`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
from collections.abc import Mapping, Sequence
from typing import Any

from fieldeval.errors import UsageError
from fieldeval.run.options import EngineOptions

# the engine options a resumed session takes from its run: what decides its items and numbers, and its label
RESUMED_OPTIONS = ("models", "matrix", "temperatures", "epochs", "seed", "resamples", "cluster_by", "fail_under",
                   "gate_on", "gate_interval", "run_label")
WORKER_KEY = "fieldeval_resumed"  # xdist workerinput: the controller's resolved options, as JSON
PLAN_LIMIT = 50_000  # a run of more planned items keeps no plan: resuming it completes its whole suite


def resumed_plan(settings: Mapping[str, Any] | None) -> list[str] | None:
    """The node ids of the eval items a stored run planned (``settings["resume"]["plan"]``), or None for a run
    that kept none (stored by an older fieldeval, or over :data:`PLAN_LIMIT` items)."""
    plan = ((settings or {}).get("resume") or {}).get("plan")
    return list(plan) if isinstance(plan, list) else None


def plan_tail(node_id: str) -> str:
    """A node id without its module's path (``test_ebs[forest_biome-case009-m]``): the same from any rootdir."""
    return node_id.split("::", 1)[-1]


class RunComplete(Exception):
    """The run to resume is complete: the one line to print, and nothing to do."""


def resume_settings(options: EngineOptions, bench_options: Mapping[str, Any]) -> dict[str, Any]:
    """What a resumed session takes from its stored run: the engine's :data:`RESUMED_OPTIONS` and every selected
    benchmark's options, as plain JSON values."""
    return _plain({"engine": {name: getattr(options, name) for name in RESUMED_OPTIONS},
                   "benchmarks": {name: _flag_values(opts) for name, opts in bench_options.items()}})


def holder() -> str:
    """Who holds a lease: this host and process."""
    return f"{socket.gethostname()}:{os.getpid()}"


def resolve(options: EngineOptions, bench_options: dict[str, Any], selected: Sequence[str],
            run: Mapping[str, Any]) -> tuple[EngineOptions, dict[str, Any]]:
    """The options of a session that resumes ``run`` (``get_run``'s dict): the run's own, where the command line
    left them at their defaults.

    Raises:
        RunComplete: the run is complete.
        UsageError: the run cannot be resumed by this command (other benchmarks, models or options), naming the
            difference.
    """
    run_id = run["run_id"]
    if run.get("status") == "completed":
        raise RunComplete(f"{run_id} is complete: nothing to resume")
    settings = run.get("settings") or {}
    stored = settings.get("resume")
    if not isinstance(stored, dict) or run.get("shard_index") is None and run.get("run_group"):
        raise UsageError(f"--resume {run_id}: the store does not hold the options it ran with (a merged run, or one "
                         "stored by an older fieldeval); run its items again under a new run id")
    benchmarks = sorted(settings.get("models") or stored.get("benchmarks") or {})
    if sorted(selected) != benchmarks:
        modules = " ".join(f"evals/test_{name}.py" for name in benchmarks)
        raise UsageError(f"--resume {run_id}: the run is of {', '.join(benchmarks) or 'no benchmark'}, this command "
                         f"selects {', '.join(sorted(selected)) or 'none'}; run `pytest {modules} --resume {run_id}`")
    differences: list[str] = []
    engine = _take(options, stored.get("engine") or {}, "", differences)
    taken = {name: _take(opts, (stored.get("benchmarks") or {}).get(name) or {}, name, differences)
             for name, opts in bench_options.items() if name in benchmarks}
    if differences:
        raise UsageError(f"--resume {run_id}: {'; '.join(differences)}; a resumed run keeps its own settings: drop "
                         "them, or start a new run")
    return engine, {**bench_options, **taken}


def check_inputs(run_id: str, settings: Mapping[str, Any], metas: Mapping[str, Any]) -> None:
    """A usage error when a benchmark's corpus or suite is not the one the run was scored on (its version or the
    hash of its content), for ``--resume``."""
    for name, meta in metas.items():
        for key, now in (("corpus_versions", meta.corpus_version), ("content_hashes", meta.content_hash)):
            then = (settings.get(key) or {}).get(name)
            if then is not None and now != then:
                what = "corpus version" if key == "corpus_versions" else "content"
                raise UsageError(f"--resume {run_id}: {name}'s {what} is {now!r} now, {then!r} when the run was "
                                 "scored; resume it with the same inputs, or start a new run")


def to_worker(options: EngineOptions, bench_options: Mapping[str, Any]) -> str:
    """The resolved options for xdist's workers, which must plan the controller's items."""
    return json.dumps(resume_settings(options, bench_options))


def from_worker(text: str, options: EngineOptions, bench_options: dict[str, Any]) -> tuple[EngineOptions, dict]:
    """A worker's options: its own command line's, with the controller's resolved values in place."""
    stored = json.loads(text)
    ignored: list[str] = []
    engine = _take(options, stored["engine"], "", ignored, force=True)
    return engine, {name: _take(opts, stored["benchmarks"].get(name) or {}, name, ignored, force=True)
                    for name, opts in bench_options.items()}


def _take(current: Any, stored: Mapping[str, Any], prefix: str, differences: list[str], *, force: bool = False) -> Any:
    """``current`` (an options dataclass) with each stored value in place of a default one; a value the command
    line set to something else is a difference (unless ``force``)."""
    changes = {}
    for f in dataclasses.fields(current):
        if "flag" not in f.metadata or f.name not in stored:
            continue
        value = _coerce(f, stored[f.name])
        now = getattr(current, f.name)
        if _plain(now) == _plain(value):
            continue
        if not force and _plain(now) != _plain(f.default):
            differences.append(f"{f.metadata['flag']} {_show(now)} (the run's: {_show(value)})")
            continue
        changes[f.name] = value
    return dataclasses.replace(current, **changes) if changes else current


def _flag_values(options: Any) -> dict[str, Any]:
    return {f.name: getattr(options, f.name) for f in dataclasses.fields(options) if "flag" in f.metadata}


def _coerce(f: dataclasses.Field, value: Any) -> Any:
    return tuple(value) if isinstance(f.default, tuple) and isinstance(value, list) else value


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _show(value: Any) -> str:
    if isinstance(value, tuple | list):
        return ", ".join(map(str, value)) or "none"
    return "none" if value is None else str(value)


__all__ = ["PLAN_LIMIT", "RESUMED_OPTIONS", "RunComplete", "WORKER_KEY", "plan_tail", "resumed_plan", "check_inputs", "from_worker", "holder", "resolve",
           "resume_settings", "to_worker"]
