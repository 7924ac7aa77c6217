"""CUDA support: device queries, the switches for the hand-written kernels and TF32, and
GPU memory statistics.

The kernels live beside this file, one ``.cu`` source and one Python launcher each:
``layer_norm``, ``softmax`` (fused scale + mask + softmax of attention scores) and
``flash_attention``. The engine's ops call them on CuPy arrays when they apply (see each
op) and use their plain xp code otherwise. Turn them off to compare:

    MINITENSOR_KERNELS=0 python ...          # or, in code:
    with minitensor.cuda.use_kernels(False): ...

``MINITENSOR_ATTENTION`` (or :func:`set_attention`) picks the attention path on the GPU:
``auto`` (flash for long key sequences, the fused softmax otherwise), ``flash``, ``fused``.
"""
from __future__ import annotations

import os
from contextlib import ContextDecorator

from ..backend import cuda_available

ATTENTION_MODES = ("auto", "flash", "fused")
# "auto" takes the flash kernel from this many keys on. Below it the scores are small and
# cuBLAS's tensor-core products plus the fused softmax are expected to win: our flash
# kernels run on the CUDA cores (see flash_attention.cu). Measured crossover: see
# benchmarks/results/ (the GPU session that runs benchmarks/kernels.py records it).
FLASH_MIN_KEYS = 512

_settings = {
    "kernels": os.environ.get("MINITENSOR_KERNELS", "1") != "0",
    "attention": os.environ.get("MINITENSOR_ATTENTION", "auto"),
}
if _settings["attention"] not in ATTENTION_MODES:
    raise ValueError(f"MINITENSOR_ATTENTION must be one of {ATTENTION_MODES}, got {_settings['attention']!r}")


def is_available() -> bool:
    """True when CuPy is installed and sees a CUDA GPU."""
    return cuda_available()


def device_count() -> int:
    """How many CUDA GPUs CuPy sees (0 without CuPy)."""
    if not cuda_available():
        return 0
    from ..backend import cupy  # noqa: PLC0415

    return int(cupy().cuda.runtime.getDeviceCount())


# ------------------------------------------------------------------ kernel switches
def kernels_enabled() -> bool:
    """Whether ops use the hand-written kernels on CuPy arrays (default: yes)."""
    return _settings["kernels"]


def set_kernels(enabled: bool) -> None:
    _settings["kernels"] = bool(enabled)


class use_kernels(ContextDecorator):
    """``with use_kernels(False):`` runs the plain CuPy code instead of the kernels (and back after)."""

    def __init__(self, enabled: bool = True):
        self.enabled = bool(enabled)

    def __enter__(self):
        self._prev = _settings["kernels"]
        _settings["kernels"] = self.enabled
        return self

    def __exit__(self, *exc):
        _settings["kernels"] = self._prev
        return False


def attention_mode() -> str:
    return _settings["attention"]


def set_attention(mode: str) -> None:
    """``"auto"``, ``"flash"`` (whenever it applies) or ``"fused"`` (never flash)."""
    if mode not in ATTENTION_MODES:
        raise ValueError(f"attention mode must be one of {ATTENTION_MODES}, got {mode!r}")
    _settings["attention"] = mode


# ------------------------------------------------------------------ TF32
def set_tf32(enabled: bool) -> None:
    """Let float32 matrix products use TF32 tensor cores (10-bit mantissa inputs, float32
    accumulation), as ``torch.backends.cuda.matmul.allow_tf32`` does. Needs compute
    capability 8.0 or newer; off by default."""
    from ..backend import cupy  # noqa: PLC0415

    cp = cupy()
    from cupy._core import _routines_linalg as linalg  # noqa: PLC0415

    linalg.set_compute_type(cp.float32, linalg.COMPUTE_TYPE_TF32 if enabled else linalg.COMPUTE_TYPE_DEFAULT)


def tf32_enabled() -> bool:
    if not cuda_available():
        return False
    from ..backend import cupy  # noqa: PLC0415

    cp = cupy()
    from cupy._core import _routines_linalg as linalg  # noqa: PLC0415

    return linalg.get_compute_type(cp.float32) == linalg.COMPUTE_TYPE_TF32


from .memory import PeakMemory, memory_stats  # noqa: E402

__all__ = ["is_available", "device_count", "kernels_enabled", "set_kernels", "use_kernels", "attention_mode",
           "set_attention", "set_tf32", "tf32_enabled", "PeakMemory", "memory_stats", "FLASH_MIN_KEYS"]
