"""fieldeval: pytest-native evaluation of language models on field-science tasks."""

from __future__ import annotations

from fieldeval.benchmark import Benchmark, Chart, CliGroups, Dashboard, Metric, RunMeta, StoreColumns, get_benchmark, option
from fieldeval.calls.client import Completion, ModelClient, complete, completion_fields
from fieldeval.errors import UsageError
from fieldeval.calls.failures import ModelCallError
from fieldeval.inputs import write_tsv

__all__ = [
    "Benchmark",
    "Chart",
    "CliGroups",
    "Completion",
    "Metric",
    "ModelCallError",
    "ModelClient",
    "Dashboard",
    "RunMeta",
    "StoreColumns",
    "UsageError",
    "complete",
    "completion_fields",
    "get_benchmark",
    "option",
    "write_tsv",
]
