"""Devices and array modules.

A tensor lives on a device: ``"cpu"`` keeps a ``numpy.ndarray``, ``"cuda"`` keeps a
``cupy.ndarray``. Ops never pick an array module from a global: they ask
:func:`array_module` about their inputs. CuPy is imported lazily, on the first
request for ``"cuda"``, so that the NumPy path has no GPU dependency at all.
"""
from __future__ import annotations

import os

import numpy as np

from .errors import DeviceError

_cupy = None          # the cupy module once imported
_cupy_error = None    # why importing it failed, if it did

CUDA_HELP = (
    "install the GPU extra that matches your CUDA toolkit, e.g. "
    "pip install -e '.[cuda12]' or pip install -e '.[cuda13]'"
)


def _import_cupy():
    global _cupy, _cupy_error
    if _cupy is None and _cupy_error is None:
        try:
            import cupy  # noqa: PLC0415 (lazy on purpose)

            _cupy = cupy
        except Exception as e:  # ImportError, or a CUDA library that fails to load
            _cupy_error = e
    return _cupy


def cuda_available() -> bool:
    """True when CuPy imports and sees at least one CUDA GPU."""
    cp = _import_cupy()
    if cp is None:
        return False
    try:
        return cp.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def cupy():
    """The cupy module, or a :class:`DeviceError` saying how to get a working one."""
    cp = _import_cupy()
    if cp is None:
        raise DeviceError(f"device 'cuda' needs CuPy, which failed to import ({_cupy_error!r}); {CUDA_HELP}")
    if not cuda_available():
        raise DeviceError("device 'cuda' requested but CuPy finds no CUDA GPU on this machine")
    return cp


def normalize_device(device) -> str:
    """Map ``None``/``"cpu"``/``"cuda"``/``"cuda:0"`` to ``"cpu"`` or ``"cuda"``."""
    if device is None:
        return "cpu"
    name = str(device)
    if name == "cpu":
        return "cpu"
    if name == "cuda" or (name.startswith("cuda:") and name[5:].isdigit()):
        return "cuda"
    raise DeviceError(f"unknown device {device!r}: use 'cpu', 'cuda' or 'cuda:N'")


def array_module(array):
    """numpy for a numpy array, cupy for a cupy array."""
    if isinstance(array, np.ndarray):
        return np
    if _cupy is not None and isinstance(array, _cupy.ndarray):
        return _cupy
    raise TypeError(f"expected a numpy or cupy array, got {type(array).__name__}")


def is_array(obj) -> bool:
    """True for a numpy or cupy ndarray."""
    return isinstance(obj, np.ndarray) or (_cupy is not None and isinstance(obj, _cupy.ndarray))


def device_of(array) -> str:
    return "cpu" if isinstance(array, np.ndarray) else "cuda"


def memory_bytes(device: str) -> int | None:
    """The memory of ``device`` in bytes: the machine's physical memory for "cpu", the GPU's for
    "cuda" (None where it cannot be told)."""
    if normalize_device(device) == "cpu":
        try:
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):  # not a POSIX system
            return None
    return int(cupy().cuda.runtime.memGetInfo()[1])


def xp_for(device: str):
    """The array module that holds arrays on ``device``."""
    return np if normalize_device(device) == "cpu" else cupy()


def to_device(array, device: str):
    """Copy ``array`` to ``device`` (no copy when it is already there)."""
    device = normalize_device(device)
    if device == "cpu":
        return array if isinstance(array, np.ndarray) else array.get()
    cp = cupy()
    return array if isinstance(array, cp.ndarray) else cp.asarray(array)


def to_numpy(array) -> np.ndarray:
    return array if isinstance(array, np.ndarray) else array.get()


def index_add_rows(xp, target, ids, rows) -> None:
    """``target[ids[i]] += rows[i]`` for a 1-D integer ``ids`` and ``rows`` (N, D), repeats adding up.

    On NumPy: sort the ids, sum each run of equal ids with one ``add.reduceat``, and add
    each sum once (much faster than ``np.add.at`` on rows).
    """
    if xp is not np:
        scatter_add(xp, target, ids, rows)
        return
    if ids.size == 0:
        return
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    starts = np.flatnonzero(np.r_[True, sorted_ids[1:] != sorted_ids[:-1]])
    target[sorted_ids[starts]] += np.add.reduceat(rows[order], starts, axis=0)


def scatter_add(xp, target, index, values) -> None:
    """``target[index] += values`` where repeated indices add up (unbuffered): ``ufunc.at``,
    which NumPy and CuPy share (``cupyx.scatter_add`` is deprecated in CuPy 14 and warns)."""
    xp.add.at(target, index, values)


def on_gpu(xp) -> bool:
    """True when ``xp`` is CuPy (the hand-written kernels may apply)."""
    return xp is not np


def matmul(a, b):
    """``a @ b`` over the last two axes, on either device. CuPy refuses batched bfloat16
    products: those are formed in float32 and rounded back once."""
    if a.dtype.name == "bfloat16" and type(a) is not np.ndarray and max(a.ndim, b.ndim) > 2:
        return (a.astype(np.float32) @ b.astype(np.float32)).astype(a.dtype)
    return a @ b
