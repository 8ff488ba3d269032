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

import pytest

_times: dict[str, float] = {}


def pytest_configure(config) -> None:
    _times["configured"] = time.time()


def _rss_mb(field: str = "VmRSS") -> float:
    """The process's resident memory now (``VmRSS``) or at its peak (``VmHWM``), from /proc (0 where there is
    none)."""
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            line = next(line for line in handle if line.startswith(f"{field}:"))
    except (OSError, StopIteration):
        return 0.0
    return int(line.split()[1]) / 1024


def _peak_mb() -> float:
    """This process's peak resident memory. ``VmHWM`` is this program's own; ``ru_maxrss`` (where there is no
    /proc) also counts the parent's memory at the fork before ``exec``, as Linux carries it over."""
    return _rss_mb("VmHWM") or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def pytest_collection_finish(session) -> None:
    _times["collected"] = time.time()
    _times["items"] = len(session.items)
    _times["rss_collected_mb"] = _rss_mb()


def pytest_runtest_logreport(report) -> None:
    if report.when == "teardown":
        _times["last_item"] = time.time()
        _times["cpu_last_item"] = time.process_time()
        _times["rss_last_item_mb"] = _rss_mb()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session):
    _times["sessionfinish"] = time.time()
    try:
        return (yield)
    finally:
        _times["sessionfinished"] = time.time()


@pytest.hookimpl(tryfirst=True)
def pytest_terminal_summary(terminalreporter) -> None:
    _times["terminal_summary"] = time.time()


@pytest.hookimpl(tryfirst=True)
def pytest_unconfigure(config) -> None:
    path = os.environ.get("FIELDEVAL_SCALE_PROBE")
    if not path:
        return
    role = config.workerinput["workerid"] if hasattr(config, "workerinput") else "controller"
    line = {"role": role, "pid": os.getpid(), "unconfigured": time.time(), "cpu_unconfigured": time.process_time(),
            **_times,
            "peak_rss_mb": _peak_mb()}
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\n")
