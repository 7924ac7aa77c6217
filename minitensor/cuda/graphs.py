"""CUDA graphs: a function's device work captured once and replayed, its launches costing the
host one call instead of hundreds.

A captured graph keeps each launch's arguments as they were at the capture: a scalar argument is
baked in, a pointer is read at the replay. So whatever changes from one call to the next must sit
in device memory: the inputs (the caller copies each call's into the arrays the capture read),
and the numbers the host works out each time (Adam's step size, the dropout seed), which a
launcher hands over with :func:`from_host`. Outside a capture that copies them to the device at
once; during one (where CUDA allows no copy from the host) it gives device memory the graph
reads, and :meth:`Graph.replay` writes it from the same function before each replay, so the
numbers are those of the call at hand. Dropout's offsets into its random stream are kernel
arguments, baked like any other: each replay must start from a reseed (``mt.manual_seed``), as
the trainer's updates do, or it draws the capture's masks again.

:class:`Graph` captures on a stream of its own, into a memory pool of its own: the addresses the
graph writes at each replay then belong to it alone, and nothing allocated between replays can
be handed one of them.
"""
from __future__ import annotations

import numpy as np

_collecting: dict | None = None   # while a Graph captures: key -> (device array, values), in order


def capturing() -> bool:
    """Whether a :class:`Graph` is capturing now."""
    return _collecting is not None


def from_host(xp, values, key=None):
    """``values()`` (a NumPy array) on the device. While a :class:`Graph` captures: device memory
    that the graph reads, written from ``values()`` before each replay (one array per ``key``
    in a capture, where a key is given). Otherwise one copy now."""
    if _collecting is None:
        return xp.asarray(values())
    if key is not None and key in _collecting:
        return _collecting[key][0]
    first = np.asarray(values())
    device = xp.empty(first.shape, dtype=first.dtype)
    _collecting[key if key is not None else len(_collecting)] = (device, values)
    return device


class Graph:
    """``fn()``'s device work captured into a CUDA graph; :meth:`replay` runs it again and returns
    what ``fn`` returned at the capture (device arrays the replay wrote anew). ``fn`` may not copy
    between host and device or read a device value on the host: CUDA refuses both in a capture."""

    def __init__(self, xp, fn):
        global _collecting
        self.xp = xp
        self.pool = xp.cuda.MemoryPool()          # the graph's own memory (see the module's docstring)
        self.stream = xp.cuda.Stream(non_blocking=True)
        collected: dict = {}
        with xp.cuda.using_allocator(self.pool.malloc), self.stream:
            self.stream.begin_capture()
            _collecting = collected
            try:
                self.result = fn()
            except BaseException:
                _collecting = None
                try:
                    self.stream.end_capture()
                except Exception:  # noqa: BLE001  (the capture's own error is the one to report)
                    pass
                raise
            _collecting = None
            self.graph = self.stream.end_capture()
        self.host_values = list(collected.values())

    def replay(self):
        """Write the host's numbers of this call into the graph's memory, then launch the graph,
        both on the current stream (so in order with the inputs the caller copied there)."""
        for device, values in self.host_values:
            device.set(np.ascontiguousarray(values(), dtype=device.dtype).reshape(device.shape))
        self.graph.launch()
        return self.result
