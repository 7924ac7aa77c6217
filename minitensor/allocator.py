"""Keep freed array memory for reuse instead of handing it back to the OS (Linux, glibc).

Every op returns a new array, and a training step allocates and frees thousands of them,
many of a few hundred KiB to a few MiB (activations of shape batch × length × d_model).
glibc's ``malloc`` serves blocks above its *mmap threshold* (128 KiB to start with) with a
fresh ``mmap`` and returns them with ``munmap`` when freed; it also trims the top of its heap
when more than the *trim threshold* is free. Either way the next array of that size gets
pages the kernel has never mapped, and each first touch of a 4 KiB page is a page fault in
which the kernel zeroes the page. The zeroed pages also push the working set out of the
caches. So the mmap threshold is raised above the largest arrays of a CPU step (512 MiB), and
the trim threshold above what one step frees at its end (2 GiB), or the heap top is handed
back and faulted in again every step (``docs/design.md``, "Keeping freed memory", has the measurements).

:func:`keep_freed_memory` raises both thresholds with ``mallopt``, which is what
``GLIBC_TUNABLES=glibc.malloc.mmap_threshold=…:glibc.malloc.trim_threshold=…`` would do at
process start. The settings hold for the whole process, so a library never makes them on its
own: ``import minitensor`` leaves malloc as it is, and a program that trains calls
:func:`from_environment` at its start (the command line, the examples, the benchmarks do),
which applies them unless ``MINITENSOR_KEEP_FREED_MEMORY=0``. The cost is memory: up to
``trim_bytes`` of freed blocks stay in the process for reuse. On other C libraries (macOS,
musl) it does nothing and says so.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os

from . import environment

M_TRIM_THRESHOLD = -1   # from glibc's malloc.h
M_MMAP_THRESHOLD = -3

_state = {"applied": False, "why": "not asked"}


def keep_freed_memory(mmap_bytes: int = 512 << 20, trim_bytes: int = 2 << 30) -> bool:
    """Serve blocks up to ``mmap_bytes`` from the heap and keep up to ``trim_bytes`` of freed
    memory; True when the C library took both settings."""
    if os.name != "posix":
        _state.update(applied=False, why=f"not a POSIX system ({os.name})")
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError) as e:
        _state.update(applied=False, why=f"no mallopt in the C library ({e})")
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    ok = bool(mallopt(M_MMAP_THRESHOLD, int(mmap_bytes))) and bool(mallopt(M_TRIM_THRESHOLD, int(trim_bytes)))
    _state.update(applied=ok, why="mallopt accepted both thresholds" if ok else "mallopt refused a threshold")
    return ok


def release_free_memory() -> bool:
    """Hand the freed memory the raised thresholds keep back to the OS (glibc's ``malloc_trim``):
    for the end of a phase whose garbage the next one will not reuse, such as reading a corpus
    as text before training on its ids. True when the C library could release some."""
    if os.name != "posix":
        return False
    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes, trim.restype = (ctypes.c_size_t,), ctypes.c_int
    return bool(trim(0))


def status() -> dict:
    """Whether the thresholds were raised in this process, and why (not)."""
    return dict(_state)


def from_environment() -> bool:
    """:func:`keep_freed_memory` unless ``MINITENSOR_KEEP_FREED_MEMORY=0``: what a program that
    trains calls at its start. True when the thresholds are raised."""
    if not environment.switch("MINITENSOR_KEEP_FREED_MEMORY"):
        _state.update(applied=False, why="MINITENSOR_KEEP_FREED_MEMORY=0")
        return False
    return keep_freed_memory()
