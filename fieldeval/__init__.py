"""fieldeval: pytest-native evaluation of language models on field-science tasks."""

from __future__ import annotations

from fieldeval.benchmark import Benchmark, Chart, CliGroups, Dashboard, Metric, RunMeta, StoreColumns, get_benchmark, option
from fieldeval.calls.client import Completion, ModelClient, complete, completion_fields
from fieldeval.errors import UsageError
from fieldeval.calls.failures import ModelCallError
from fieldeval.inputs import write_tsv


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
