"""How many pytest-xdist workers an eval session starts: as many as its items can use.

A session's model calls run concurrently in its one solving process whatever ``-n`` is (``--concurrency``
threads, :mod:`fieldeval.calls.pool`). Workers add only the scoring and pytest's own per-item work, spread
over CPUs, and each costs a process start: the interpreter, pytest and its plugins, the engine and the
benchmarks' data, about 1 CPU-s on the development machine, against 2 ms an item (``benchmarks/RESULTS.md``).
So a worker pays back only with many items on a CPU of its own. The controller starts
``min(-n, usable CPUs, items // ITEMS_PER_WORKER)`` workers, and none (the session runs in this process)
below two, with one line saying so; ``--workers-as-given`` starts ``-n`` as given. Only a command whose
modules are all eval modules is sized: other tests keep the workers they were given.
"""

from __future__ import annotations

import math
import os

import pytest

from fieldeval.defaults import ITEMS_PER_WORKER

SIZED_DISTS = frozenset({"load", "loadscope", "loadfile", "loadgroup", "worksteal"})  # not "each" (all run all)


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity, as a container or ``taskset`` sets it)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def sized(asked: int, items: int, cpus: int) -> int:
    """Workers for ``items`` eval items on ``cpus`` CPUs when ``asked`` were asked for: 0 means this process alone."""
    workers = min(asked, cpus, items // ITEMS_PER_WORKER)
    return workers if workers >= 2 else 0


def size_workers(config: pytest.Config, items: int, *, cpus: int | None = None) -> str | None:
    """Give xdist the workers the session's ``items`` can use (before xdist starts any); the line saying so when
    that is not what ``-n`` asked for, else None."""
    from fieldeval.run.command import only_eval_modules

    option = config.option
    asked = getattr(option, "numprocesses", None)
    tx = getattr(option, "tx", None) or []
    if not asked or getattr(option, "dist", "no") not in SIZED_DISTS or any(spec != "popen" for spec in tx):
        return None  # no -n, --dist each, or workers elsewhere (--tx ssh=...): as given
    if getattr(option, "splits", None):  # pytest-split: this shard runs its part of the items
        items = math.ceil(items / option.splits)
    cpus = usable_cpus() if cpus is None else cpus
    workers = sized(int(asked), items, cpus)
    if workers == asked or not only_eval_modules(config):
        return None
    if workers:
        option.numprocesses, option.tx = workers, ["popen"] * workers
    else:
        option.numprocesses, option.tx, option.dist = 0, [], "no"
    started = f"runs {workers} workers" if workers else "runs in this process"
    return (f"fieldeval: -n {asked} {started}: {items:,} eval items on {cpus} CPU(s) (a worker per CPU and per "
            f"{ITEMS_PER_WORKER:,} items at most, none below two; the model calls run concurrently either way); "
            f"--workers-as-given starts {asked}")


__all__ = ["ITEMS_PER_WORKER", "size_workers", "sized", "usable_cpus"]
