"""The one exception type for user mistakes: a single line, exit status 2."""

from __future__ import annotations


class UsageError(Exception):
    """Bad input from the user: one line naming the thing, the value and the fix.

    The CLI prints it as ``fieldeval: <message>`` and exits with status 2; the
    pytest plugin turns it into ``pytest.UsageError`` (also exit status 2).
    """
