"""BLAS on one thread while fieldeval computes its statistics (:func:`one_blas_thread`)."""

from __future__ import annotations

import contextlib
import os

BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def one_blas_thread() -> contextlib.AbstractContextManager:
    """A context in which BLAS runs on one thread, unless the environment sets its threads
    (:data:`BLAS_THREAD_VARIABLES`): fieldeval's matrix products are small, and OpenBLAS's idle threads spin
    after each one (a fifth of ``fieldeval score ebs``'s CPU at 44,000 rows, for no gain in wall time)."""
    if any(name in os.environ for name in BLAS_THREAD_VARIABLES):
        return contextlib.nullcontext()
    import numpy  # noqa: F401  (loads the BLAS the limit applies to)
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


__all__ = ["BLAS_THREAD_VARIABLES", "one_blas_thread"]
