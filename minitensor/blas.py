"""Which BLAS NumPy's matrix products run on, which kernels it chose, and whether a setting
holds it back.

On the CPU almost all of a Transformer's arithmetic is matrix products, and NumPy hands them
to the BLAS it was built with (OpenBLAS for the wheels on PyPI). OpenBLAS picks its kernels
for the CPU it finds when it loads, unless the environment variable ``OPENBLAS_CORETYPE``
names a core: then it uses that core's kernels whatever the CPU can do, and an AVX2 core
named on an AVX-512 CPU makes large float32 products about half as fast (``docs/performance.md``).
The variable is read once, when NumPy loads, so only the process's
environment can change it; :func:`advice` says when it would help.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

# OpenBLAS cores whose single-precision kernels use AVX2 at most (its names, as
# ``openblas_get_corename`` reports them, lower-cased)
_AVX2_CORES = {"haswell", "zen", "sandybridge", "nehalem", "core2", "prescott", "atom", "barcelona",
               "bulldozer", "piledriver", "steamroller", "excavator", "penryn", "dunnington"}


def _numpy_blas() -> dict | None:
    """threadpoolctl's record of the BLAS NumPy loaded (OpenBLAS, MKL or BLIS, on any system),
    or None where it finds none. With several loaded, the one inside NumPy's folder."""
    import numpy  # noqa: PLC0415 (loads NumPy's BLAS before we look for it)
    try:
        from threadpoolctl import threadpool_info  # noqa: PLC0415
    except ImportError:  # (a dependency; a checkout run without installing may lack it: nothing to read then)
        return None

    found = [lib for lib in threadpool_info() if lib.get("user_api") == "blas"]
    mine = [lib for lib in found  # numpy.libs/ (Linux, Windows wheels), numpy/.dylibs/ (macOS)
            if any(part.startswith("numpy") for part in Path(lib.get("filepath") or "").parts[-3:-1])]
    return (mine or found or [None])[0]


def set_threads(n: int) -> bool:
    """Make NumPy's BLAS use ``n`` threads from now on (threadpoolctl: OpenBLAS, MKL or BLIS);
    False where there is no BLAS it can reach."""
    if n < 1:
        raise ValueError(f"BLAS threads must be >= 1, got {n}")
    if _numpy_blas() is None:
        return False
    from threadpoolctl import threadpool_limits  # noqa: PLC0415

    threadpool_limits(limits=n, user_api="blas")  # called, not entered: the limit stays
    return True


def cpu_has_avx512() -> bool:
    """Whether the CPU reports AVX-512 Foundation (read from /proc/cpuinfo; False elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return "avx512f" in line.split()
    except OSError:
        pass
    return False


def info() -> dict:
    """{"library", "core", "threads", "forced_core", "cpu_avx512"}: the BLAS NumPy loaded and its
    version (None where threadpoolctl finds none), the kernels it runs (OpenBLAS's core name;
    None for other BLAS), its thread count, the ``OPENBLAS_CORETYPE`` it was given (None when
    unset) and whether the CPU has AVX-512."""
    lib = _numpy_blas()
    out = {"library": None, "core": None, "threads": None,
           "forced_core": os.environ.get("OPENBLAS_CORETYPE") or None, "cpu_avx512": cpu_has_avx512()}
    if lib is not None:
        out["library"] = f"{lib.get('internal_api')} {lib.get('version') or ''}".strip()
        out["core"] = lib.get("architecture") if lib.get("internal_api") == "openblas" else None
        out["threads"] = lib.get("num_threads")
    return out


def advice(details: dict | None = None) -> str | None:
    """One sentence when ``OPENBLAS_CORETYPE`` holds OpenBLAS to AVX2 kernels on a CPU with
    AVX-512 (None otherwise): the setting, its cost, and what to do."""
    d = info() if details is None else details
    core = (d.get("core") or "").lower()
    if not (d.get("forced_core") and d.get("cpu_avx512") and core in _AVX2_CORES):
        return None
    return (f"note: OPENBLAS_CORETYPE={d['forced_core']} makes NumPy's OpenBLAS use {d['core']} (AVX2) kernels "
            "on this AVX-512 CPU; start Python without it (env -u OPENBLAS_CORETYPE ...) for faster matrix "
            "products (1.8x on large ones where this was measured)")


def print_advice(device: str = "cpu") -> str | None:
    """Print :func:`advice` on stderr when training on the CPU would be held back; return it."""
    note = advice() if device == "cpu" else None
    if note:
        print(note, file=sys.stderr)
    return note
