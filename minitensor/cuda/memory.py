"""GPU memory statistics from CuPy's memory pool.

CuPy keeps freed blocks in a pool for reuse, so what ``nvidia-smi`` shows is the pool's size,
not what the program uses. :class:`PeakMemory` follows the bytes *in use* through a CuPy
memory hook (every allocation from and release to the pool) and keeps their maximum:

    with PeakMemory() as mem:
        loss = model(x); loss.backward(); opt.step()
    print(mem.peak_bytes / 2**30, "GiB at the peak of the step")
"""
from __future__ import annotations

from .. import backend


class PeakMemory:
    """Context manager: ``peak_bytes`` is the most pool memory in use at any moment inside it
    (including what was already in use when it started: parameters, optimizer state)."""

    def __init__(self):
        self.start_bytes = self.peak_bytes = self.in_use = self.end_bytes = 0
        self._hook = None

    def __enter__(self):
        cp = backend.cupy()
        pool = cp.get_default_memory_pool()
        self.start_bytes = self.in_use = self.peak_bytes = pool.used_bytes()
        tracker = self

        class _Hook(cp.cuda.MemoryHook):
            name = "minitensor_peak_memory"

            def malloc_postprocess(self, **kw):
                tracker.in_use += kw["mem_size"]
                if tracker.in_use > tracker.peak_bytes:
                    tracker.peak_bytes = tracker.in_use

            def free_postprocess(self, **kw):
                tracker.in_use -= kw["mem_size"]

        self._hook = _Hook()
        self._hook.__enter__()
        return self

    def __exit__(self, *exc):
        self._hook.__exit__(*exc)
        self.end_bytes = backend.cupy().get_default_memory_pool().used_bytes()
        return False


def memory_stats() -> dict:
    """Bytes in use and held by CuPy's pool, and the device's free and total memory."""
    cp = backend.cupy()
    pool = cp.get_default_memory_pool()
    free, total = cp.cuda.runtime.memGetInfo()
    return {"pool_used_bytes": int(pool.used_bytes()), "pool_held_bytes": int(pool.total_bytes()),
            "device_free_bytes": int(free), "device_total_bytes": int(total)}
