"""The signals that end a command, and handling them while a block of work runs.

Ctrl-C sends SIGINT; ``kill``, ``timeout`` and batch schedulers send SIGTERM; a closed terminal
sends SIGHUP. Every command treats them alike: what was finished is kept under its final name
and a line says so. Training finishes the update in flight and saves; other commands stop where
they are (SIGTERM and SIGHUP raise :class:`Stopped`, which is a ``KeyboardInterrupt``, so they
take the path Ctrl-C takes).
"""
from __future__ import annotations

import contextlib
import signal
import threading

ENDING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP ended the command, handled as Ctrl-C is."""

    def __init__(self, signal_name: str):
        super().__init__(signal_name)
        self.signal_name = signal_name


@contextlib.contextmanager
def handled(signals, handler):
    """While the block runs, ``handler(signum, frame)`` receives ``signals``; the previous handlers
    come back afterwards. Only the main thread receives signals, so elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def raise_stopped(signum, frame):
    """A handler that ends the command as Ctrl-C would, naming the signal."""
    raise Stopped(signal.Signals(signum).name)
