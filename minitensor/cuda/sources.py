"""The ``.cu`` sources of this folder as text, for NVRTC (``build.py``) and for the CPU
emulator (``emulator/``) alike."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

FOLDER = Path(__file__).resolve().parent
SOURCES = ("layer_norm.cu", "softmax.cu", "flash_attention.cu", "flash_attention_tc.cu", "cross_entropy.cu", "dropout.cu",
           "adam.cu", "loss_scale.cu", "bias_relu.cu", "cast.cu")
_INCLUDE = '#include "common.cuh"'


def with_common(text: str) -> str:
    """Kernel text with ``common.cuh`` pasted in place of its ``#include`` line."""
    return text.replace(_INCLUDE, (FOLDER / "common.cuh").read_text(), 1)


@lru_cache(maxsize=None)
def source(filename: str) -> str:
    """The text of ``filename`` with ``common.cuh`` pasted in."""
    return with_common((FOLDER / filename).read_text())


def instantiations(filename: str) -> list[str]:
    """Every instantiation of ``filename``'s kernels that its launcher can ask for."""
    from . import KERNELS, launcher  # noqa: PLC0415 (the launchers import this module)

    for name in KERNELS:
        module = launcher(name)
        if filename in getattr(module, "SOURCES", (module.SOURCE,)):
            return module.instantiations(filename) if hasattr(module, "SOURCES") else module.instantiations()
    raise ValueError(f"no launcher compiles {filename}")
