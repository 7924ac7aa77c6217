"""The ``.cu`` sources of this folder as text, for NVRTC (``build.py``) and for the CPU
emulator (``emulator.py``) alike."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

FOLDER = Path(__file__).resolve().parent
SOURCES = ("layer_norm.cu", "softmax.cu", "flash_attention.cu", "cross_entropy.cu", "dropout.cu", "adam.cu",
           "loss_scale.cu", "bias_relu.cu", "cast.cu")
_INCLUDE = '#include "common.cuh"'


def with_common(text: str) -> str:
    """Kernel text with ``common.cuh`` pasted in place of its ``#include`` line."""
    return text.replace(_INCLUDE, (FOLDER / "common.cuh").read_text(), 1)


@lru_cache(maxsize=None)
def source(filename: str) -> str:
    """The text of ``filename`` with ``common.cuh`` pasted in."""
    return with_common((FOLDER / filename).read_text())
