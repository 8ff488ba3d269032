"""The benchmarks the plugin knows: each module has the same small face.

A benchmark module defines ``NAME``, ``HEADLINE`` (metric names for the
terminal table), ``add_options(group)``, ``aggregate(rows, *, seed,
resamples)`` and ``write_outputs(rows, reports_dir)``.
"""

from __future__ import annotations

from types import ModuleType

from fieldeval.benchmarks import ebs, ibf, microbiorel

BENCHMARKS: dict[str, ModuleType] = {module.NAME: module for module in (ebs, ibf, microbiorel)}
