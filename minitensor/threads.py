"""Worker threads for memory-bound NumPy work (the optimizer's update).

NumPy's elementwise loops run on one core, but they release the GIL while they run. An
update over many large arrays, cut into cache-sized pieces and the pieces shared among one
thread per core, therefore runs on every core; and each piece's several passes (Adam makes
a dozen) stay in the core's cache instead of streaming the whole array from memory a dozen
times.

``MINITENSOR_THREADS`` sets the number of threads; by default, one per core this process
may run on, or the share :func:`limit` gave it (data-parallel ranks that share one machine's
cores). With one thread the work runs in the calling thread.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

from . import environment

PIECE = 1 << 16  # elements per piece: 256 KiB of float32 per array, so a piece's arrays fit in cache

_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_limit: int | None = None


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def limit(n: int | None) -> None:
    """Use at most ``n`` threads from now on (None: one per core again). ``MINITENSOR_THREADS``,
    when set, still wins: a user's explicit choice is never overridden."""
    global _limit
    if n is not None and n < 1:
        raise ValueError(f"a thread limit must be >= 1, got {n}")
    _limit = n


def count() -> int:
    """How many threads share the work (``MINITENSOR_THREADS``, else the usable cores)."""
    n = environment.value("MINITENSOR_THREADS")  # (a bad value raises VariableError, naming it)
    if n is not None:
        return n
    return _limit or cores()


def pieces(n: int, size: int | None = None) -> list[slice]:
    """``range(n)`` cut into slices of at most ``size`` (default :data:`PIECE`) elements."""
    size = size or PIECE
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


def share(work, items: list) -> None:
    """Call ``work(worker, its_items)`` for each of the ``k = count()`` workers, at once, and
    return when all are done (an exception in any worker is raised here). Each worker's
    ``its_items`` is an iterator that hands it the next item not yet taken by any worker, so
    every item goes to exactly one worker and a worker whose core is busy with something else
    takes fewer (why: OpenBLAS's threads keep a core spinning for a while after a product;
    docs/design.md, "Items taken, not dealt")."""
    global _pool, _pool_size
    k = min(count(), len(items))
    if k <= 1:
        if items:
            work(0, items)
        return
    if _pool_size < k:  # (more threads asked for since the pool was made)
        if _pool is not None:
            _pool.shutdown(wait=False)
        _pool, _pool_size = ThreadPoolExecutor(max_workers=k, thread_name_prefix="minitensor"), k
    taken = _Taker(items)
    futures = [_pool.submit(work, i, iter(taken)) for i in range(1, k)]
    work(0, iter(taken))  # the calling thread takes a share too
    for f in futures:
        f.result()


class _Taker:
    """The items of one :func:`share`, each handed out once, in order, to whichever worker asks."""

    def __init__(self, items: list):
        self.items, self.next, self.lock = items, 0, threading.Lock()

    def __iter__(self):
        while True:
            with self.lock:
                i = self.next
                self.next += 1
            if i >= len(self.items):
                return
            yield self.items[i]
