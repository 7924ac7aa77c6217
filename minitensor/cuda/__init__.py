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
``MINITENSOR_WGMMA=1`` (or :func:`set_wgmma`) puts the 16-bit flash kernels' products on
Hopper's warpgroup instructions (wgmma) where they apply; ``MINITENSOR_ONE_PASS_BACKWARD=1``
(or :func:`set_one_pass_backward`) runs their backward in one pass. Both are off until measured
on a GPU.

Without a GPU, the same kernels run on the CPU through the emulator
(:mod:`minitensor.cuda.emulator`): ``MINITENSOR_CUDA=emulate`` or :func:`emulate` makes the
ops take their kernel routes on NumPy arrays, with strict checks of barriers, shuffles,
arguments and launch limits (``check="race"`` and ``check="memory"`` add a shared-memory race
tracker and AddressSanitizer; ``MINITENSOR_EMULATOR_CHECK`` sets them from the environment).
"""
from __future__ import annotations

import importlib
from contextlib import ContextDecorator

import numpy as np

from .. import environment
from ..backend import cuda_available, cupy
from .graphs import Graph, from_host
from .memory import PeakMemory, memory_stats

ATTENTION_MODES = environment.VARIABLES["MINITENSOR_ATTENTION"].kind.names  # auto, flash, fused
# "auto" takes the flash kernel from this many keys on. Below it cuBLAS's products plus the
# fused softmax win: our flash kernels run on the CUDA cores (see flash_attention.cu). On an
# H200 the fused path took half flash's time up to 2048 keys and about the same at 4096, where
# its scores needed 8 GiB (docs/performance/2026-11.md, "GPU: the first session").
FLASH_MIN_KEYS = 4096
# The tensor-core flash kernels (float16 and bfloat16 inputs, head size 32, 64 or 128; float32 in TF32
# while set_tf32 is on, head size 32 or 64) are taken up to FLASH_TC_SHORT_KEYS keys and from
# FLASH_TC_MIN_KEYS on: at every length, since on an H200 (forward + backward, 16384 tokens, 8 heads
# of 64) the bf16 ones took 0.58-0.73x the time of cuBLAS plus the fused softmax from 128 to 2048
# keys and 0.08x at 4096, the TF32 ones 0.79-1.07x and 0.26x, with memory flat (docs/performance/2026-11.md,
# "GPU: attention by the instruction"). Where a card showed a middle range that the fused path
# wins, raising FLASH_TC_MIN_KEYS above FLASH_TC_SHORT_KEYS would give it to that path.
FLASH_TC_SHORT_KEYS = 512
FLASH_TC_MIN_KEYS = 0

EMULATOR_CHECKS = (None, *environment.VARIABLES["MINITENSOR_EMULATOR_CHECK"].kind.names)  # off, race, memory

class _Settings(dict):
    """The kernel switches. Each is read from its environment variable where it is first used (a
    bad value raises :class:`minitensor.environment.VariableError` there, naming the variable, and
    never at import), then held here; ``set_kernels`` and the others change them."""

    FROM_ENVIRONMENT = {
        "kernels": lambda: environment.switch("MINITENSOR_KERNELS"),
        "attention": lambda: environment.value("MINITENSOR_ATTENTION"),
        "emulate": lambda: environment.value("MINITENSOR_CUDA") == "emulate",
        "check": lambda: environment.value("MINITENSOR_EMULATOR_CHECK"),
        "wgmma": lambda: environment.switch("MINITENSOR_WGMMA"),
        "one_pass": lambda: environment.switch("MINITENSOR_ONE_PASS_BACKWARD"),
    }

    def __missing__(self, key):
        self[key] = self.FROM_ENVIRONMENT[key]()
        return self[key]


_settings = _Settings()


def is_available() -> bool:
    """True when CuPy is installed and sees a CUDA GPU."""
    return cuda_available()


def device_count() -> int:
    """How many CUDA GPUs CuPy sees (0 without CuPy)."""
    if not cuda_available():
        return 0
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


# ------------------------------------------------------------------ the CPU emulator
class emulate(ContextDecorator):
    """Run the hand-written kernels on the CPU emulator (:mod:`minitensor.cuda.emulator`):
    the ops then take their kernel routes on NumPy arrays. ``emulate()`` turns it on from
    now on, ``emulate(False)`` off; ``with emulate(check="race"):`` for a block of code.

    ``check``: None (barriers, shuffles, arguments, launch limits, NaN-filled fresh memory),
    ``"race"`` (and a shared-memory race tracker) or ``"memory"`` (and AddressSanitizer, one
    subprocess per launch). Environment: ``MINITENSOR_CUDA=emulate``,
    ``MINITENSOR_EMULATOR_CHECK=race|memory``.
    """

    def __init__(self, enabled: bool = True, check: str | None = None):
        if check not in EMULATOR_CHECKS:
            raise ValueError(f"check must be one of {EMULATOR_CHECKS}, got {check!r}")
        self._prev = (_settings["emulate"], _settings["check"])
        _settings["emulate"] = bool(enabled)
        _settings["check"] = check

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _settings["emulate"], _settings["check"] = self._prev
        return False


def emulating() -> bool:
    """Whether NumPy arrays take the kernel routes, through the emulator."""
    return _settings["emulate"]


def emulator_check() -> str | None:
    """The emulator's extra check: None, ``"race"`` or ``"memory"``."""
    return _settings["check"]


def kernels_may_run(xp) -> bool:
    """Whether the hand-written kernels may run on arrays of ``xp``: CuPy arrays with the
    kernels on, or NumPy arrays while emulating (each op still checks that its kernel
    applies to the shapes and dtypes at hand)."""
    if not _settings["kernels"]:
        return False
    return _settings["emulate"] if xp is np else True


KERNELS = ("layer_norm", "softmax", "flash_attention", "cross_entropy", "dropout", "adam", "loss_scale", "bias_relu",
           "cast")


def launcher(name: str):
    """The Python launcher of one kernel (one of :data:`KERNELS`), imported on first use: the
    launchers bring the NVRTC build and the CPU emulator, which a run on NumPy never needs."""
    if name not in KERNELS:
        raise ValueError(f"no kernel named {name!r}; the kernels are {KERNELS}")
    return importlib.import_module(f"{__name__}.{name}")


def attention_mode() -> str:
    return _settings["attention"]


def set_attention(mode: str) -> None:
    """``"auto"``, ``"flash"`` (whenever it applies) or ``"fused"`` (never flash)."""
    if mode not in ATTENTION_MODES:
        raise ValueError(f"attention mode must be one of {ATTENTION_MODES}, got {mode!r}")
    _settings["attention"] = mode


def set_wgmma(enabled: bool) -> None:
    """Whether the 16-bit tensor-core flash kernels (head sizes 32 and 64) run their products
    as Hopper's warpgroup products (wgmma, compute capability 9.0; the emulator models them)
    rather than mma.sync. Off by default: the emulator checks them, but no GPU has measured
    them yet (:mod:`minitensor.cuda.flash_attention`)."""
    _settings["wgmma"] = bool(enabled)


def wgmma_enabled() -> bool:
    return _settings["wgmma"]


def set_one_pass_backward(enabled: bool) -> None:
    """Whether the 16-bit tensor-core flash backward runs in one pass (dQ added up by the key
    blocks in a fixed order, 5 products a tile) rather than two (7 products a tile, no shared sums).
    Both are deterministic. Off by default: the emulator checks it, but no GPU has measured it yet
    (:mod:`minitensor.cuda.flash_attention`)."""
    _settings["one_pass"] = bool(enabled)


def one_pass_backward_enabled() -> bool:
    return _settings["one_pass"]


# ------------------------------------------------------------------ TF32
def set_tf32(enabled: bool) -> None:
    """Let float32 matrix products use TF32 tensor cores (10-bit mantissa inputs, float32
    accumulation), as ``torch.backends.cuda.matmul.allow_tf32`` does; attention's too (the
    tensor-core flash kernels, head sizes 32 and 64). Needs compute capability 8.0 or newer;
    off by default."""
    cp = cupy()
    from cupy._core import _routines_linalg as linalg  # noqa: PLC0415 (CuPy is optional: imported once it is in use)

    linalg.set_compute_type(cp.float32, linalg.COMPUTE_TYPE_TF32 if enabled else linalg.COMPUTE_TYPE_DEFAULT)


def tf32_enabled() -> bool:
    if not cuda_available():
        return False
    cp = cupy()
    from cupy._core import _routines_linalg as linalg  # noqa: PLC0415 (CuPy is optional: imported once it is in use)

    return linalg.get_compute_type(cp.float32) == linalg.COMPUTE_TYPE_TF32


def check_turns() -> None:
    """Raise :class:`minitensor.cuda.turns.StalledTurns` if a kernel whose blocks take turns (the
    one-pass attention backward) gave up a wait on any device, reading the report now (the
    kernels' launchers read it at later launches, without waiting: this is for the end of a run)."""
    importlib.import_module(f"{__name__}.turns").check_all()   # as launcher(): the kernels' side, loaded on use


__all__ = ["is_available", "device_count", "kernels_enabled", "set_kernels", "use_kernels", "emulate", "emulating",
           "emulator_check", "kernels_may_run", "launcher", "KERNELS", "attention_mode", "set_attention", "set_wgmma",
           "wgmma_enabled", "set_one_pass_backward", "one_pass_backward_enabled", "set_tf32", "tf32_enabled",
           "PeakMemory", "memory_stats", "FLASH_MIN_KEYS", "FLASH_TC_SHORT_KEYS", "FLASH_TC_MIN_KEYS", "Graph",
           "from_host", "check_turns"]
