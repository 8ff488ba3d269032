"""Signals during a session: SIGTERM ends it as Ctrl-C does, and the final save is shielded from both.

pytest turns SIGINT into KeyboardInterrupt and still finishes the session
(report, store); it leaves SIGTERM (a cancelled CI job, ``timeout``) to kill
the process with nothing written. :class:`Interrupts` gives SIGTERM the
Ctrl-C path, tells ``on_signal`` first (the session stops starting model
calls there and then, in every process, instead of at the end), counts every
signal within a second of the last one it counted (``timeout`` and a terminal
both deliver to the process and its group) as that one, and, once
:meth:`Interrupts.shield` is called, defers the first while the report is
written and the run stored, so a signal that arrives then cannot lose them. A
signal sent again after that second stops the process at once: ``on_stop``
keeps the run for ``fieldeval runs push`` when its store write may not have
committed, one line says so, and the exit status is 130.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, NoReturn

SIGNALS = (signal.SIGINT, signal.SIGTERM)
REPEAT_S = 1.0  # a second delivery of the same stop request (process and process group)
STOPPED_EXIT = 130  # 128 + SIGINT, as a shell reports a process stopped by Ctrl-C


class Interrupts:
    """SIGINT and SIGTERM handling of one pytest process, from configure to unconfigure."""

    def __init__(self, on_signal: Callable[[str], None] | None = None, on_stop: Callable[[], str | None] | None = None,
                 *, clock: Callable[[], float] = time.monotonic, exit: Callable[[int], NoReturn] = os._exit) -> None:
        self.on_signal = on_signal  # told first, e.g. to stop starting model calls at once
        self.on_stop = on_stop  # told before a stop at once: keeps the unsaved run, returns the line saying where
        self.previous: dict[int, Any] = {}
        self.received: list[str] = []
        self.shielded_at: int | None = None  # signals received before the shield went up
        self._clock = clock
        self._exit = exit
        self._counted_at = float("-inf")  # when the last counted signal came: the repeat window starts there

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
        now = self._clock()
        if now - self._counted_at < REPEAT_S:  # the same request again; the window is not moved by it
            return
        self._counted_at = now
        self.received.append(name)
        if self.on_signal is not None:
            try:
                self.on_signal(name)
            except Exception:  # noqa: BLE001 - the interrupt itself must still happen
                pass
        if self.shielded_at is not None:
            if len(self.received) == self.shielded_at + 1:
                sys.stderr.write(f"\nfieldeval: {name} received while saving the run; finishing the save first "
                                 "(send it again to stop at once)\n")
                return
            self._stop_now(name)
        raise KeyboardInterrupt(name)

    def _stop_now(self, name: str) -> NoReturn:
        """End the process now with one line and exit status 130, the run kept by ``on_stop`` first."""
        kept = None
        if self.on_stop is not None:
            try:
                kept = self.on_stop()
            except Exception as error:  # noqa: BLE001 - stopping must still happen
                kept = f"the run could not be kept ({' '.join(str(error).split()) or type(error).__name__})"
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        line = f"fieldeval: {name} again while saving the run: stopped at once" + (f"; {kept}" if kept else "")
        try:
            sys.stderr.write("\n" + line + "\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        self._exit(STOPPED_EXIT)

    def restore(self) -> None:
        """Put back the handlers from before :meth:`install`."""
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        self.previous.clear()


__all__ = ["STOPPED_EXIT", "Interrupts"]
