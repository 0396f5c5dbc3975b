"""Commands that run until interrupted: SIGINT and SIGTERM set an event instead of raising."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["stop_on_signals"]


@contextmanager
def stop_on_signals(active: bool = True) -> Iterator[threading.Event]:
    """An event set by SIGINT or SIGTERM while inside; the previous handlers come back after.

    Off the main thread (where Python cannot install handlers) or with ``active`` false the
    event is only set by the caller.
    """
    stop = threading.Event()
    previous = {}
    if active and threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, lambda *_: stop.set())
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
