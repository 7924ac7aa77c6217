"""Compiling the ``.cu`` sources of this folder, and the choices every launcher shares.

On a GPU, each source is compiled by NVRTC (``cupy.RawModule``) the first time a launcher
asks for one of its template instantiations (a *name expression* such as
``"layer_norm_forward<float, 16>"``), once per device. CuPy keeps the binary, with the
mangled names of the instantiations, in its on-disk kernel cache (``~/.cupy/kernel_cache``),
so later processes load it instead of compiling (from CuPy 14.2 on: ``docs/design.md``
says what earlier versions did). The shared header
``common.cuh`` is pasted into the text in place of its ``#include`` line, so the cache key
covers the header too.

On NumPy arrays, when the emulator is on (``minitensor.cuda.emulate``), :func:`kernel`
hands out the same instantiation compiled for the CPU by :mod:`minitensor.cuda.emulator`,
and :func:`array_module` the emulated device's NumPy, so the launchers run unchanged.
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from .. import backend
from . import emulator, emulator_check, graphs
from .sources import source

# storage dtype name -> the C++ type the kernels are instantiated with (common.cuh)
CTYPES = {"float32": "float", "float16": "f16", "bfloat16": "bf16", "float64": "double"}


@lru_cache(maxsize=None)   # a launcher asks at every call, and a GPU update's host time counts
def ctype(dtype) -> str | None:
    """The kernels' name for ``dtype``, or None if no kernel takes it."""
    return CTYPES.get(np.dtype(dtype).name)


def acc_dtype(dtype) -> np.dtype:
    """What the kernels compute in (and save statistics in): float64 for float64, else float32."""
    return np.dtype(np.float64) if np.dtype(dtype) == np.float64 else np.dtype(np.float32)


def kernel(filename: str, expression: str, xp, options: tuple = ()):
    """The compiled kernel ``expression`` (a template instantiation) of ``filename`` for arrays
    of ``xp``: CuPy's, for the current device, or the emulator's for NumPy arrays. ``options``
    go to NVRTC (``SM90A``: Hopper's own instructions, such as wgmma)."""
    if xp is np or isinstance(xp, emulator.DeviceArrays):
        return emulator.kernel(filename, expression, emulator_check())
    return _gpu_kernel(filename, expression, int(xp.cuda.runtime.getDevice()), options)


# NVRTC's target for sm_90a: CuPy adds -arch=sm_90 after it, and NVRTC builds for sm_90a with both
# (tests/minitensor/cuda/test_nvrtc.py compiles under exactly these options)
SM90A = ("-arch=sm_90a",)


@lru_cache(maxsize=None)
def _gpu_kernel(filename: str, expression: str, device: int, options: tuple = ()):
    """One module per (source, instantiation, device): a module is loaded into one device's
    context, so a second GPU gets its own."""
    cp = backend.cupy()
    with cp.cuda.Device(device):
        module = cp.RawModule(code=source(filename), options=options, name_expressions=(expression,))
        return module.get_function(expression)


def array_module(x):
    """What a launcher allocates and copies with for arrays like ``x``: CuPy for CuPy arrays;
    for NumPy arrays (the emulator), NumPy whose ``empty``/``empty_like`` fill with NaN."""
    return emulator.arrays if isinstance(x, np.ndarray) else backend.array_module(x)


def items_per_lane(n: int, limit: int) -> int | None:
    """The smallest power of two k with 32·k >= n (a warp holding a row of n values in
    registers), or None when that exceeds ``limit``."""
    k = 1 << max(0, math.ceil(math.log2(max(1, math.ceil(n / 32)))))
    return k if k <= limit else None


def as4d(shape: tuple) -> tuple:
    """``shape`` (2 to 4 axes) padded with leading 1s to (B, H, T, ·): how the kernels index it."""
    return (1,) * (4 - len(shape)) + tuple(shape)


def no_pointer():
    """What a kernel gets for an absent array argument (a null pointer)."""
    return np.uint64(0)


def mask_view(xp, mask, shape4: tuple):
    """(array, four strides in elements) reading a bool ``mask`` broadcast to ``shape4``
    (B, H, Tq, Tk) without materialising it, or a null pointer and zeros for no mask."""
    if mask is None:
        return no_pointer(), np.int64(0), np.int64(0), np.int64(0), np.int64(0)
    if any(s < 0 for s in mask.strides):
        mask = xp.ascontiguousarray(mask)
    view = xp.broadcast_to(mask, shape4)  # a view: same first element, stride 0 on broadcast axes
    return (view,) + tuple(np.int64(s // view.itemsize) for s in view.strides)


def device_key(xp):
    """Which device the arrays of ``xp`` (as :func:`array_module` gives it) live on, for what a
    launcher keeps per device: "emulator", or (the CuPy module, the current device's number)."""
    if xp is np or isinstance(xp, emulator.DeviceArrays):
        return "emulator"
    return id(xp), xp.cuda.runtime.getDevice()


def address(a) -> int:
    """The device address of ``a``'s first element (a NumPy array's own, on the emulator)."""
    return a.ctypes.data if isinstance(a, np.ndarray) else a.data.ptr


PACK = {"float": 4, "f16": 8, "bf16": 8, "double": 2}   # values of each storage type in a 16-byte Pack


def packable(*arrays) -> bool:
    """Whether a kernel may move these (..., n) arrays in 16-byte packs (``Pack`` in common.cuh)
    without a pack leaving its row: every row starts 16-byte aligned."""
    return all(a.shape[-1] * a.itemsize % 16 == 0 and address(a) % 16 == 0 for a in arrays)


def one_launch_takes(arrays: list) -> bool:
    """Whether a kernel over many arrays in one launch can take these: one dtype that the
    kernels are instantiated for, every array C-contiguous (the kernel indexes each as flat)."""
    dtype = arrays[0].dtype
    return ctype(dtype) is not None and all(a.dtype == dtype and a.flags.c_contiguous for a in arrays)


def address_table(xp, groups: list, numbers=None) -> tuple:
    """For a kernel over many arrays in one launch (common.cuh, "many arrays in one launch"):
    ``(table, starts, total)`` on the device, sent in one host-to-device copy. ``groups`` is a
    list of equally long lists of arrays (weights, gradients, ...); ``table`` holds their
    addresses group after group (uint64), ``starts`` the running total of the first group's
    sizes (int64, one more entry than arrays). ``numbers``, where given, is a function giving
    floats that travel in the same copy and come back fourth, as a float64 device array: numbers
    that change from one call to the next, which a CUDA graph's replay asks for again
    (graphs.from_host)."""
    sizes = np.array([a.size for a in groups[0]], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    table = np.array([address(a) for group in groups for a in group], dtype=np.uint64)

    def block():
        values = np.array(numbers() if numbers is not None else (), dtype=np.float64)
        return np.concatenate([table.view(np.int64), starts, values.view(np.int64)])

    device = graphs.from_host(xp, block)
    found = device[:table.size].view(np.uint64), device[table.size:table.size + starts.size], int(starts[-1])
    return found + (device[table.size + starts.size:].view(np.float64),) if numbers is not None else found
