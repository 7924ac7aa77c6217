"""The signals that end a command, and handling them while a block of work runs.

Ctrl-C sends SIGINT; ``kill``, ``timeout`` and batch schedulers send SIGTERM; a closed terminal
sends SIGHUP; a reader of the output that went away (``... | head``) ends a command quietly
(:func:`closed_pipe`; training stops as a signal stops it, :data:`CLOSED_STDOUT`). Every command
treats them alike: what was finished is kept under its final name and a line says so. Training finishes the update in flight and saves; other commands stop where
they are (SIGTERM and SIGHUP raise :class:`Stopped`, which is a ``KeyboardInterrupt``, so they
take the path Ctrl-C takes).
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

ENDING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
EXIT_CLOSED_PIPE = 128 + signal.SIGPIPE  # what a shell reports for a program ended by SIGPIPE (`... | head -1`)


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


class StopRequest:
    """A handler for a loop that stops at its next safe point (after the update in flight): the
    first SIGINT, SIGTERM or SIGHUP is kept in ``name`` for the loop to read, and
    ``announce(name, again)`` says what will happen (``again``: how to stop at once); a second
    one stops at once, as Ctrl-C usually does."""

    def __init__(self, announce):
        self.name, self.announce = None, announce

    def __call__(self, signum, frame):
        if self.name is not None:
            raise KeyboardInterrupt
        self.request(signal.Signals(signum).name)

    def request(self, name: str) -> None:
        """Ask for a stop for a reason other than a signal (:data:`CLOSED_STDOUT`); the first reason stands."""
        if self.name is not None:
            return
        self.name = name
        self.announce(name, {"SIGINT": "press Ctrl-C again", CLOSED_STDOUT: "press Ctrl-C"}.get(name, f"send {name} again"))


CLOSED_STDOUT = "stdout closed"  # the reader of the output went away: a stop, as a signal asks for


def raise_stopped(signum, frame):
    """A handler that ends the command as Ctrl-C would, naming the signal."""
    raise Stopped(signal.Signals(signum).name)


def close_stdout() -> None:
    """Point stdout at /dev/null, so that Python's own flush at exit does not fail on the closed pipe again."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def closed_pipe() -> int:
    """The reader of stdout went away: stdout is closed for good (:func:`close_stdout`), and the
    status to end with is the one a shell gives a program that SIGPIPE ended."""
    close_stdout()
    return EXIT_CLOSED_PIPE
