"""The host's side of ``common.cuh``'s turns: the report of a wait that gave up.

Blocks that add into one sum take turns (``await_turn``), and a wrong turn would hang the
launch: so a wait gives up after a bound (at once on the emulator) and writes what it waited
for into five words on the device, which stay zero until then. A kernel that takes turns gets
them from :func:`stall_words`, and its launcher calls :func:`after_launch`, which reads them
without stopping the host: on a GPU it starts a copy into pinned host memory behind the
launch and looks at it at a later call, once that copy is done, so an update never waits for
it; on the emulator the launch has ended and it looks at once. A report raises
:class:`StalledTurns`, naming the turn; :func:`check_all` reads them now (at the end of a run:
``mt.cuda.check_turns``).
"""
from __future__ import annotations

import numpy as np

from .build import device_key

WORDS = 5   # given up (0 or 1), the caller's two numbers that name the flag, the turn, what the flag held


class StalledTurns(RuntimeError):
    """A block of a kernel that takes turns gave up waiting for its turn: what that launch added
    is wrong (a bug in the kernel's turns, or a GPU stalled for the whole bound)."""


class _Watch:
    """One device's words, and the copy of them on its way to the host."""

    def __init__(self, xp):
        self.on_gpu = device_key(xp) != "emulator"
        self.words = xp.zeros(WORDS, dtype=np.int32)
        self.host = _pinned(xp) if self.on_gpu else None
        self.copied = None          # the event after the copy in flight, if one is
        self.what = ("", ("", ""))  # the kernel the words were last read after, and its two numbers' names

    def read(self, now: bool) -> np.ndarray | None:
        """The words as the host last saw them: on a GPU the copy's, once it is done (``now``: wait
        for the device and read them directly); None while a copy is still on its way."""
        if not self.on_gpu:
            return self.words
        if now:
            self.copied = None
            return self.words.get()
        if self.copied is None or not self.copied.done:
            return None
        self.copied = None
        return self.host.copy()

    def send(self, xp, what: tuple) -> None:
        """Start copying the words to the host behind the work queued so far, the launch of ``what``
        the last of it (not while a stream is being captured into a graph, where a copy to the host
        is refused)."""
        if not self.on_gpu or self.copied is not None or xp.cuda.get_current_stream().is_capturing():
            return
        self.what = what
        self.words.data.copy_to_host_async(self.host.ctypes.data, self.host.nbytes)
        self.copied = xp.cuda.Event(block=False, disable_timing=True)
        self.copied.record()

    def raise_reported(self, words: np.ndarray | None) -> None:
        if words is None or words[0] == 0:
            return
        _, a, b, turn, held = (int(w) for w in words)
        self.words.fill(0)   # later launches wait again (a report also ends every wait still going)
        if self.on_gpu:
            self.host[...] = 0
        kernel, (first, second) = self.what
        raise StalledTurns(
            f"{kernel}: a block gave up waiting for turn {turn} on the flag of {first} {a}, {second} {b}, "
            f"which held {held} (common.cuh's await_turn: after its bound on a GPU, at once on the emulator, "
            f"where only a block that starts later could have passed that turn). What that launch added is "
            f"wrong: this is a bug in the kernel's turns, or a GPU that ran nothing of the launch for the "
            f"whole bound.")


_watches: dict = {}


def _pinned(xp):
    import cupyx  # noqa: PLC0415  (CuPy's companion module: only on the GPU route)
    return cupyx.zeros_pinned(WORDS, dtype=np.int32)


def _watch(xp) -> _Watch:
    key = device_key(xp)
    watch = _watches.get(key)
    if watch is None:
        watch = _watches[key] = _Watch(xp)
    return watch


def stall_words(xp):
    """This device's report words (int32, :data:`WORDS` of them), for a kernel that takes turns."""
    return _watch(xp).words


def after_launch(xp, kernel: str, numbers: tuple[str, str]) -> None:
    """After a launch of ``kernel`` (its flags named by ``numbers``, e.g. ("batch·head", "query
    tile")): raise :class:`StalledTurns` if a report has reached the host, and send the words on
    their way for a later call. Never waits for the device."""
    watch = _watch(xp)
    if not watch.on_gpu:
        watch.what = (kernel, numbers)   # the emulated launch has ended: its words are read now
    watch.raise_reported(watch.read(now=False))
    watch.send(xp, (kernel, numbers))


def check_all() -> None:
    """Read the words now (waiting for the device) on every device a kernel that takes turns has
    run on, and raise :class:`StalledTurns` on a report (none ran: nothing to do)."""
    for watch in list(_watches.values()):
        watch.raise_reported(watch.read(now=True))
