"""Signals during a session: SIGTERM ends it as Ctrl-C does, and the final save is shielded from both.

pytest turns SIGINT into KeyboardInterrupt and still finishes the session
(report, store); it leaves SIGTERM (a cancelled CI job, ``timeout``) to kill
the process with nothing written. :class:`Interrupts` gives SIGTERM the
Ctrl-C path, tells ``on_signal`` first (the session stops starting model
calls there and then, in every process, instead of at the end), counts a signal repeated within a second (``timeout`` and a
terminal both deliver to the process and its group) as one, and, once
:meth:`Interrupts.shield` is called, defers both while the report is written
and the run stored, so a signal that arrives then cannot lose them. A signal
sent again later stops the session at once.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)
REPEAT_S = 1.0  # a second delivery of the same stop request (process and process group)


class Interrupts:
    """SIGINT and SIGTERM handling of one pytest process, from configure to unconfigure."""

    def __init__(self, on_signal: Callable[[str], None] | None = None) -> None:
        self.on_signal = on_signal  # told first, e.g. to stop starting model calls at once
        self.previous: dict[int, Any] = {}
        self.received: list[str] = []
        self.shielded_at: int | None = None  # signals received before the shield went up
        self._last = float("-inf")

    def install(self) -> None:
        """Take over SIGINT and SIGTERM (main thread only; pytester's in-process runs included)."""
        if self.previous or threading.current_thread() is not threading.main_thread():
            return
        for sig in SIGNALS:
            self.previous[sig] = signal.signal(sig, self._handle)

    def shield(self) -> None:
        """From now on the first signal waits until :meth:`restore` (the run is being saved); a second one does not."""
        self.shielded_at = len(self.received)

    def _handle(self, signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        now = time.monotonic()
        repeat, self._last = now - self._last < REPEAT_S, now
        if repeat:
            return
        self.received.append(name)
        if self.on_signal is not None:
            try:
                self.on_signal(name)
            except Exception:  # noqa: BLE001 - the interrupt itself must still happen
                pass
        if self.shielded_at is not None and len(self.received) == self.shielded_at + 1:
            sys.stderr.write(f"\nfieldeval: {name} received while saving the run; finishing the save first "
                             "(send it again to stop at once)\n")
            return
        raise KeyboardInterrupt(name)

    def restore(self) -> None:
        """Put back the handlers from before :meth:`install`."""
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        self.previous.clear()


__all__ = ["Interrupts"]
