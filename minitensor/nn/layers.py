"""The standard layers: Linear, Embedding, LayerNorm, Dropout, ReLU."""
from __future__ import annotations

import numpy as np

from .. import functional as F
from . import init
from .module import Module, Parameter


class Linear(Module):
    """y = x W + b with W of shape (in_features, out_features), as the paper writes xW + b.

    Init: W Glorot/Xavier uniform, U(±√(6/(in+out))); b zeros.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = init.xavier_uniform_(Parameter(np.zeros((in_features, out_features), np.float32)))
        self.bias = Parameter(np.zeros(out_features, np.float32)) if bias else None

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"{self.in_features}, {self.out_features}, bias={self.bias is not None}"


class Embedding(Module):
    """A lookup table: ids (...) -> rows (..., dim) of a (num_embeddings, dim) weight.

    Init: N(0, 1) entries (the Transformer rescales it: see transformer.model).
    """

    def __init__(self, num_embeddings: int, dim: int):
        super().__init__()
        self.num_embeddings, self.dim = num_embeddings, dim
        self.weight = init.normal_(Parameter(np.zeros((num_embeddings, dim), np.float32)))

    def forward(self, ids):
        return F.embedding(ids, self.weight)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.dim}"


class LayerNorm(Module):
    """Normalise the last axis to zero mean and unit variance, then scale and shift.

    Init: scale (weight) ones, shift (bias) zeros, so it starts as a pure normalisation.
    """

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.dim, self.eps = dim, eps
        self.weight = Parameter(np.ones(dim, np.float32))
        self.bias = Parameter(np.zeros(dim, np.float32))

    def forward(self, x):
        return F.layer_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}"


class Dropout(Module):
    """Inverted dropout with probability p while training; the identity in eval mode."""

    def __init__(self, p: float = 0.1):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout: p must be in [0, 1], got {p}")
        self.p = p

    def forward(self, x):
        return F.dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class ReLU(Module):
    """max(x, 0), as a module (for Sequential)."""

    def forward(self, x):
        return F.relu(x)
