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

import ctypes
import os
import sys

# OpenBLAS cores whose single-precision kernels use AVX2 at most (its names, as
# ``openblas_get_corename`` reports them, lower-cased)
_AVX2_CORES = {"haswell", "zen", "sandybridge", "nehalem", "core2", "prescott", "atom", "barcelona",
               "bulldozer", "piledriver", "steamroller", "excavator", "penryn", "dunnington"}
# name prefixes of the entry points, from the plain build to NumPy's scipy-openblas64
_PREFIXES = ("scipy_openblas_", "openblas_")
_SUFFIXES = ("64_", "")


def _openblas():
    """The loaded OpenBLAS library (ctypes), found among the process's mapped files, or None."""
    import numpy  # noqa: F401, PLC0415 (loads NumPy's BLAS before we look for it)

    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "openblas" in line.lower() and "/" in line}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    return None


def _call(lib, name: str, restype, *args: int):
    """Call OpenBLAS's ``name`` (whatever prefix and suffix this build gives it) with int ``args``."""
    for prefix in _PREFIXES:
        for suffix in _SUFFIXES:
            fn = getattr(lib, f"{prefix}{name}{suffix}", None)
            if fn is not None:
                fn.restype, fn.argtypes = restype, [ctypes.c_int] * len(args)
                return fn(*args)
    return None


def set_threads(n: int) -> bool:
    """Make NumPy's OpenBLAS use ``n`` threads from now on; False where there is no OpenBLAS
    this module can reach (another BLAS keeps its own setting)."""
    if n < 1:
        raise ValueError(f"BLAS threads must be >= 1, got {n}")
    lib = _openblas()
    if lib is None or _call(lib, "get_num_threads", ctypes.c_int) is None:
        return False
    _call(lib, "set_num_threads", None, n)
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
    """{"library", "core", "threads", "forced_core", "cpu_avx512"}: the BLAS NumPy loaded
    (None where it is not an OpenBLAS this module can query), the kernels it runs, its thread
    count, the ``OPENBLAS_CORETYPE`` it was given (None when unset) and whether the CPU has
    AVX-512."""
    lib = _openblas()
    out = {"library": None, "core": None, "threads": None,
           "forced_core": os.environ.get("OPENBLAS_CORETYPE") or None, "cpu_avx512": cpu_has_avx512()}
    if lib is not None:
        config = _call(lib, "get_config", ctypes.c_char_p)
        core = _call(lib, "get_corename", ctypes.c_char_p)
        out["library"] = config.decode() if config else "OpenBLAS"
        out["core"] = core.decode() if core else None
        out["threads"] = _call(lib, "get_num_threads", ctypes.c_int)
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
