"""fieldeval: pytest-native evaluation of language models on field-science tasks."""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from fieldeval.benchmark import (Benchmark, Chart, CliGroups, Dashboard, Metric, RunMeta, StoreColumns,
                                     get_benchmark, option)
    from fieldeval.calls.client import Completion, ModelClient, complete, completion_fields
    from fieldeval.calls.failures import ModelCallError
    from fieldeval.errors import UsageError
    from fieldeval.inputs import write_tsv

# each public name and the module it lives in: imported when first used, so that the pytest plugin, which every
# pytest session in the environment loads, does not import the call engine
_HOMES = {
    **dict.fromkeys(("Benchmark", "Chart", "CliGroups", "Dashboard", "Metric", "RunMeta", "StoreColumns",
                     "get_benchmark", "option"), "fieldeval.benchmark"),
    **dict.fromkeys(("Completion", "ModelClient", "complete", "completion_fields"), "fieldeval.calls.client"),
    "ModelCallError": "fieldeval.calls.failures",
    "UsageError": "fieldeval.errors",
    "write_tsv": "fieldeval.inputs",
}


def __getattr__(name: str) -> _typing.Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'fieldeval' has no attribute {name!r}")
    value = getattr(_importlib.import_module(_HOMES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def items_frame(run_id: str, store=None):
    """A stored run's items as a pandas DataFrame, one row per item: the notebook's way in.

    ``store``: an open store, a store URL, or None (``$FIELDEVAL_STORE``, else ``reports/fieldeval.db``).
    See :func:`fieldeval.store.items.items_frame` for the columns.

    Example:
        >>> frame = fieldeval.items_frame("run_3b9e204a")  # doctest: +SKIP
        >>> frame[frame.ontology_score < 0.5][["case_id", "relationship", "response_text"]]  # doctest: +SKIP
    """
    from fieldeval.store.items import items_frame as frame

    return frame(run_id, store)

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
    "items_frame",
    "option",
    "write_tsv",
]
