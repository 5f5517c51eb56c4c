"""Per-zone time limit inside a training task.

A zone runs in the task's thread; one daemon watchdog thread per worker process watches the deadline
and, when it passes, raises :class:`ZoneTimeout` in that thread (``PyThreadState_SetAsyncExc``).
Python delivers it at the trainer's next bytecode, so a trainer that loops in Python (boosting
iterations, epochs) stops within moments; one stuck in a single long C call stops when that call
returns. The driver's backstop (a forced ``ray.cancel`` of an overdue task, then the zones rerun one
per task) covers the rest. ``ZoneTimeout`` derives from ``BaseException`` so that a trainer's
``except Exception`` does not swallow it.
"""

from __future__ import annotations

import ctypes
import threading
import time


class ZoneTimeout(BaseException):
    """A zone ran past ``zone_timeout_s``."""


def _raise_in(thread_id: int, exc_type: type[BaseException] | None) -> None:
    # A NULL exception clears a pending asynchronous exception of that thread.
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc_type) if exc_type else None
    )


class Watchdog:
    """Raise :class:`ZoneTimeout` in the armed thread once its deadline passes."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._deadline: float | None = None
        self._thread_id = 0
        self._fired = False
        threading.Thread(target=self._watch, name="zone-watchdog", daemon=True).start()

    def arm(self, seconds: float) -> None:
        """Start the clock for the calling thread."""
        with self._cond:
            self._thread_id = threading.get_ident()
            self._deadline = time.monotonic() + seconds
            self._fired = False
            self._cond.notify()

    def disarm(self) -> bool:
        """Stop the clock; return whether the deadline had passed (a pending timeout is cleared)."""
        with self._cond:
            fired, self._deadline = self._fired, None
            if fired:
                _raise_in(self._thread_id, None)
            return fired

    def _watch(self) -> None:
        with self._cond:
            while True:
                if self._deadline is None:
                    self._cond.wait()
                    continue
                remaining = self._deadline - time.monotonic()
                if remaining > 0:
                    self._cond.wait(remaining)
                    continue
                self._fired, self._deadline = True, None
                _raise_in(self._thread_id, ZoneTimeout)


_WATCHDOG: Watchdog | None = None


def watchdog() -> Watchdog:
    """The process's watchdog (started on first use)."""
    global _WATCHDOG
    if _WATCHDOG is None:
        _WATCHDOG = Watchdog()
    return _WATCHDOG
