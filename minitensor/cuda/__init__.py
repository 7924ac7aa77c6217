"""CUDA support: ``minitensor.cuda.is_available()``, and (in this folder) the hand-written
kernels that the engine uses on CuPy arrays."""
from __future__ import annotations

from ..backend import cuda_available


def is_available() -> bool:
    """True when CuPy is installed and sees a CUDA GPU."""
    return cuda_available()


def device_count() -> int:
    """How many CUDA GPUs CuPy sees (0 without CuPy)."""
    if not cuda_available():
        return 0
    from ..backend import cupy  # noqa: PLC0415

    return int(cupy().cuda.runtime.getDeviceCount())
