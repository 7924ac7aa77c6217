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
import time


# the signals that end a command, those of them this system has (Windows has no SIGHUP)
ENDING_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
OTHER_ENDING_SIGNALS = tuple(s for s in ENDING_SIGNALS if s != signal.SIGINT)  # stopped as Ctrl-C is
EXIT_CLOSED_PIPE = 128 + 13  # what a POSIX shell reports for a program SIGPIPE (13) ended (`... | head -1`)


@contextlib.contextmanager
def signals_held():
    """Hold back the ending signals (SIGINT, SIGTERM, SIGHUP) in this block (in the main thread, where Python runs
    signal handlers): one that arrives meanwhile is raised again when the block ends, to the
    handler it would have met, so a file being finished is never left half renamed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list = []
    before = {number: signal.signal(number, lambda number, frame: caught.append(number)) for number in ENDING_SIGNALS}
    try:
        yield
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)
        for number in dict.fromkeys(caught):   # each held signal once, in the order it came
            signal.raise_signal(number)


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


class StopPolicy:
    """When a training loop stops, asked between updates (:meth:`check`): when a signal (or a
    closed stdout) asked for a stop, or when the time budget, ``max_minutes`` of training (0:
    none), is spent. With several ranks, every rank asks before the same update and they agree
    in one small sum over the ranks: a signal to any rank stops them all after the same update,
    and rank 0's clock keeps the time. The first signal is announced by rank 0 through ``say``; a
    second one stops at once (:class:`StopRequest`)."""

    def __init__(self, comm, max_minutes: float, max_steps: int, step: int = 0, seconds_before: float = 0.0,
                 say=None):
        self.comm, self.max_minutes, self.max_steps = comm, max_minutes, max_steps
        self.say = say if comm.rank == 0 else None
        self.request = StopRequest(self._announce)
        self.clock = time.perf_counter() - seconds_before
        self.running = step  # the update running now, or let go by the last check (for the announcement)

    def seconds(self) -> float:
        """The seconds of training, those before a resume included."""
        return time.perf_counter() - self.clock

    def check(self, step: int) -> tuple[str | None, float]:
        """Before update ``step + 1``: why to stop now ("signal" or "max_minutes"; None: go on),
        and the fraction of the budget spent (updates or minutes, whichever is further; rank
        0's), for the learning rate's cool-down. Signals are held while it decides, so the
        announcement of one that comes meanwhile names the update that will be the last."""
        with signals_held():
            spent = self.seconds()
            progress = max(step / self.max_steps, spent / (60 * self.max_minutes) if self.max_minutes > 0 else 0.0)
            out_of_time = self.max_minutes > 0 and spent >= 60 * self.max_minutes
            signalled = self.request.name is not None
            if self.comm.world_size > 1:  # rank 0's clock, any rank's signal
                main = self.comm.rank == 0
                signalled, out_of_time, progress = self.comm.sum_on_host(
                    [signalled, out_of_time and main, progress if main else 0.0])
            self.running = step if signalled or out_of_time else step + 1
        if signalled and self.say and self.comm.world_size > 1:
            who = self.request.name or "another rank was asked to stop"
            self.say(f"{who}: stopping after update {step} and saving a checkpoint")
        return ("signal" if signalled else "max_minutes" if out_of_time else None), progress

    def _announce(self, name: str, again: str) -> None:
        if self.say is None:
            return
        if self.comm.world_size == 1:  # the update running now, or the one the last check let go
            self.say(f"{name}: stopping after update {self.running} and saving a checkpoint; {again} to stop at once")
        else:  # the ranks agree before the next update which update was the last (check)
            self.say(f"{name}: stopping when the ranks next agree, before the next update, and saving a "
                     f"checkpoint; {again} to stop at once")


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
