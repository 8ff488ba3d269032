"""Which shard of which sharded run a session is, and the settings every shard of one run must share.

A sharded run is N pytest sessions (often N CI jobs), each with pytest-split's
``--splits N --group K`` and the same ``--run-group NAME``; ``fieldeval runs
merge NAME`` (:mod:`fieldeval.store.groups`) stores their union as one run. The
settings fingerprint holds everything that changes the numbers, so shards run
with different options are refused rather than merged.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from fieldeval.benchmark import Benchmark

if TYPE_CHECKING:
    import pytest

    from fieldeval.run.options import EngineOptions

RUN_GROUP_ENV = "GITHUB_RUN_ID"


class RunFacts(Protocol):
    """What the settings of a run are read from (a session): its benchmarks, their inputs, models and options."""

    config: pytest.Config
    options: EngineOptions
    bench_options: Mapping[str, Any]
    selected: Sequence[str]

    def benchmark(self, name: str) -> Benchmark: ...

    def context(self, name: str) -> Any: ...

    def models_for(self, name: str) -> list: ...

    def matrix_models(self) -> list[str]: ...


def shard_of(config: pytest.Config) -> tuple[int, int]:
    """``(index, count)`` from pytest-split's ``--group`` and ``--splits`` (1-based); ``(1, 1)`` when unsplit."""
    splits, group = getattr(config.option, "splits", None), getattr(config.option, "group", None)
    return (int(group), int(splits)) if splits and group else (1, 1)


def settings_hash(settings: dict[str, Any]) -> str:
    """``sha256:<hex>`` of the settings as canonical JSON."""
    text = json.dumps(settings, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def run_settings(session: RunFacts, ontology_version: Any) -> dict[str, Any]:
    """What makes the numbers: models, bootstrap and clustering, ontology, corpora, benchmark options, gates,
    and every case of the suite (so a merge can tell when the shards' union lacks planned items)."""
    metas = {name: session.benchmark(name).run_meta(session.context(name)) for name in session.selected}
    settings = json.loads(json.dumps({
        "models": {name: session.models_for(name) for name in session.selected},
        "seed": session.options.seed,
        "resamples": session.options.resamples,
        "ontology_version": ontology_version,
        "corpus_versions": {name: meta.corpus_version for name, meta in metas.items()},
        "content_hashes": {name: meta.content_hash for name, meta in metas.items()},
        "scoring": {name: meta.scoring for name, meta in metas.items() if meta.scoring},
        "benchmark_options": {name: dataclasses.asdict(session.bench_options[name]) for name in session.selected},
        "fail_under": list(session.options.fail_under),
        "gate_on": session.options.gate_on,
        "gate_interval": session.options.gate_interval,
        "cluster_by": session.options.cluster_by,
    }, default=str))  # plain JSON values; the case ids (texts already) are not copied through it (100,000 of them)
    settings["cases"] = {name: session.benchmark(name).case_ids(session.context(name)) for name in session.selected}
    return settings


def run_group_meta(session: RunFacts, ontology_version: Any, plan_ids: list[str] | None = None) -> dict[str, Any]:
    """The store's run-group fields of a session: ``run_group``, ``shard_index``, ``shard_count``, settings (with
    ``plan_ids``, the node ids of the run's planned eval items, which ``--resume`` completes and no more)."""
    index, count = shard_of(session.config)
    if session.options.matrix_job is not None:  # one job per model of the matrix
        index, count = session.options.matrix_job, len(session.matrix_models())
    from fieldeval.run.resume import PLAN_LIMIT, resume_settings

    settings = run_settings(session, ontology_version)
    fingerprint = settings_hash(settings)  # a shard's label or --resume options never keep it from its group
    settings["resume"] = resume_settings(session.options, {name: session.bench_options[name]
                                                           for name in session.selected})
    settings["resume"]["plan"] = list(plan_ids) if plan_ids is not None and len(plan_ids) <= PLAN_LIMIT else None
    return {"run_group": session.options.run_group or os.environ.get(RUN_GROUP_ENV) or None,
            "shard_index": index, "shard_count": count, "settings": settings, "settings_hash": fingerprint}


__all__ = ["RUN_GROUP_ENV", "RunFacts", "run_group_meta", "run_settings", "settings_hash", "shard_of"]
