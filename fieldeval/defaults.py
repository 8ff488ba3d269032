"""The engine's defaults, in a module that imports nothing: the pytest plugin registers its options from here
without loading the engine."""

from __future__ import annotations

MARKER = "fieldeval"  # @pytest.mark.fieldeval(benchmark=...): what makes a test an eval item
# what an eval item carries in its user_properties (they cross pytest-xdist)
ROW_KEY = "fieldeval.row"
ITEM_KEY = "fieldeval.item"
ERROR_KEY = "fieldeval.error"
CASE_KEY = "fieldeval.case_id"  # an errored item's case id (a scored item records its own in its row)
EPOCH_KEY = "fieldeval.epoch_of"  # an errored epoch's item: the case key its scored epochs' rows record
DEFAULT_REPORT = "reports/report.json"
DEFAULT_RETRIES = 4
DEFAULT_CALL_TIMEOUT_S = 120.0
DEFAULT_MAX_ANSWER_BYTES = 1_048_576
DEFAULT_CONCURRENCY = 16
DEFAULT_BATCH_MAX_WAIT_S = 86_400.0  # a day: both batch APIs promise results within 24 hours
ITEMS_PER_WORKER = 2000  # an xdist worker's start (~1 CPU-s) pays back over this many items (fieldeval.run.workers)
DEFAULT_RESAMPLES = 1000
DEFAULT_SEED = 20261130
CACHE_MODES: tuple[str, ...] = ("use", "refresh", "off", "replay")
