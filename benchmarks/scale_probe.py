"""A pytest plugin for ``bench_scale.py``: when each process collected, ran its last item, and its peak RSS.

Loaded with ``-p scale_probe`` (``benchmarks/`` on ``PYTHONPATH``); each pytest
process (controller and every xdist worker) appends one JSON line to
``$FIELDEVAL_SCALE_PROBE`` at ``pytest_unconfigure``.
"""

from __future__ import annotations

import json
import os
import resource
import time

_times: dict[str, float] = {}


def pytest_configure(config) -> None:
    _times["configured"] = time.time()


def pytest_collection_finish(session) -> None:
    _times["collected"] = time.time()
    _times["items"] = len(session.items)


def pytest_runtest_logreport(report) -> None:
    if report.when == "teardown":
        _times["last_item"] = time.time()


def pytest_unconfigure(config) -> None:
    path = os.environ.get("FIELDEVAL_SCALE_PROBE")
    if not path:
        return
    role = config.workerinput["workerid"] if hasattr(config, "workerinput") else "controller"
    line = {"role": role, "pid": os.getpid(), "unconfigured": time.time(), **_times,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\n")
