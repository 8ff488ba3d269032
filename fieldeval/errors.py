"""The one exception type for user mistakes, and the one helper that turns it into one line and exit 2."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class UsageError(Exception):
    """Bad input from the user: one line naming the thing, the value and the fix.

    The CLI prints it as ``fieldeval: <message>`` and exits with status 2; the
    pytest plugin ends the session with the same line and exit status 2
    (:func:`exit_on_usage_error`).
    """


def exit_on_usage_error(step: Callable[[], T]) -> T:
    """Run ``step``; a user mistake ends the pytest session with its one line and exit status 2."""
    import pytest

    try:
        return step()
    except (UsageError, pytest.UsageError) as error:
        pytest.exit(" ".join(str(error).split()), returncode=2)
