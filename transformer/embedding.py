"""Token embeddings scaled by √d_model (Section 3.4) and positional encodings (Section 3.5)."""
from __future__ import annotations

import math

import numpy as np

import minitensor as mt
import minitensor.functional as F
from minitensor import nn


def sinusoidal_table(max_len: int, d_model: int) -> np.ndarray:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)),  PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)).

    Returns a (max_len, d_model) float32 array. The wavelengths run geometrically from 2π
    to 10000·2π, so PE(pos + k) is a linear function of PE(pos) for any fixed offset k.
    """
    pos = np.arange(max_len, dtype=np.float64)[:, None]
    two_i = np.arange(0, d_model, 2, dtype=np.float64)[None, :]
    angle = pos / np.power(10000.0, two_i / d_model)
    table = np.zeros((max_len, d_model))
    table[:, 0::2] = np.sin(angle)
    table[:, 1::2] = np.cos(angle[:, : d_model // 2])
    return table.astype(np.float32)


class PositionalEncoding(nn.Module):
    """Adds position information to (B, T, d_model) embeddings, then applies dropout (Section 5.4).

    kind="sinusoidal": the fixed table of :func:`sinusoidal_table` (a buffer, not trained).
    kind="learned": a trained (max_len, d_model) table, initialised N(0, d_model^-0.5).
    """

    def __init__(self, d_model: int, max_len: int = 1024, dropout: float = 0.0, kind: str = "sinusoidal"):
        super().__init__()
        self.kind, self.max_len = kind, max_len
        if kind == "sinusoidal":
            self.register_buffer("table", mt.tensor(sinusoidal_table(max_len, d_model)), persistent=False)
        elif kind == "learned":
            self.table = nn.init.normal_(nn.Parameter(np.zeros((max_len, d_model), np.float32)), std=d_model**-0.5)
        else:
            raise ValueError(f"positional encoding kind must be 'sinusoidal' or 'learned', got {kind!r}")
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: mt.Tensor, offset: int = 0) -> mt.Tensor:
        T = x.shape[1]
        if offset + T > self.max_len:
            raise ValueError(f"sequence of length {offset + T} is longer than max_len={self.max_len}; "
                             "raise TransformerConfig.max_len")
        return self.dropout(x + self.table[offset:offset + T])


class ScaledEmbedding(nn.Module):
    """ids (B, T) -> weight[ids] · √d_model. Init N(0, d_model^-0.5), so the scaled vectors
    have unit variance and the tied pre-softmax projection starts with small logits."""

    def __init__(self, vocab_size: int, d_model: int):
        super().__init__()
        self.d_model = d_model
        self.scale = math.sqrt(d_model)
        self.weight = nn.init.normal_(nn.Parameter(np.zeros((vocab_size, d_model), np.float32)), std=d_model**-0.5)

    def forward(self, ids: mt.Tensor) -> mt.Tensor:
        return F.embedding(ids, self.weight) * self.scale
