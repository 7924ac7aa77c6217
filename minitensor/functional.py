"""The public ops: ``import minitensor.functional as F``.

This module is the list of what is public. Each function lives in ``minitensor/ops/``,
directly under the :class:`~minitensor.autograd.Function` whose forward and backward it
calls; it checks and converts its arguments there (Python numbers and arrays are accepted
wherever a tensor is, and take the dtype of the tensor they meet).

The table at the end, :data:`TENSOR_METHODS`, holds the same functions as the operators and
methods of :class:`~minitensor.tensor.Tensor`, so ``a + b``, ``x.sum()`` and ``F.sum(x)`` are one
code path; ``minitensor/__init__.py`` binds them with :func:`bind_tensor_methods`.
"""
from __future__ import annotations

import numpy as np

from . import backend
from .autograd import backward
from .ops.attention import scaled_dot_product_attention
from .ops.compare import argmax, equal, greater, greater_equal, less, less_equal, logical_not, not_equal
from .ops.dropout import dropout
from .ops.elementwise import (
    add, cast, div, exp, log, masked_fill, mul, neg, pow, relu, sigmoid, sqrt, sub, tanh, where,
)
from .ops.embedding import embedding
from .ops.linalg import linear, matmul
from .ops.loss import cross_entropy
from .ops.norm import layer_norm
from .ops.reduce import logsumexp, max, mean, sum
from .ops.shape import broadcast_to, concat, getitem, permute, reshape, split, stack, to_device, transpose
from .ops.softmax import log_softmax, softmax
from .tensor import Tensor

__all__ = [
    "add", "sub", "mul", "div", "pow", "neg", "exp", "log", "sqrt", "tanh", "relu", "sigmoid", "cast", "to_device",
    "matmul", "linear", "sum", "mean", "max", "logsumexp", "softmax", "log_softmax",
    "reshape", "transpose", "permute", "getitem", "concat", "stack", "split", "broadcast_to",
    "where", "masked_fill", "dropout", "embedding", "layer_norm", "cross_entropy",
    "scaled_dot_product_attention", "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
    "logical_not", "argmax",
]


# ----------------------------------------------------------------- Tensor's operators and methods
def _reflected(op):
    def reflected(self, other):
        return op(other, self)
    reflected.__name__ = f"r{op.__name__}"
    return reflected


def _to(self, device) -> Tensor:
    """This tensor on ``device``: itself when it is there already; differentiable."""
    return self if backend.device_of(self.data) == backend.normalize_device(device) else to_device(self, device)


TENSOR_METHODS = {
    "__add__": add, "__radd__": _reflected(add), "__sub__": sub, "__rsub__": _reflected(sub),
    "__mul__": mul, "__rmul__": _reflected(mul), "__truediv__": div, "__rtruediv__": _reflected(div),
    "__pow__": pow, "__rpow__": _reflected(pow), "__matmul__": matmul, "__rmatmul__": _reflected(matmul),
    "__neg__": neg, "__getitem__": getitem,
    "__eq__": equal, "__ne__": not_equal, "__lt__": less, "__le__": less_equal, "__gt__": greater,
    "__ge__": greater_equal, "__invert__": logical_not, "argmax": argmax,
    "backward": backward,
    "sum": sum, "mean": mean, "max": max, "logsumexp": logsumexp, "softmax": softmax, "log_softmax": log_softmax,
    "exp": exp, "log": log, "sqrt": sqrt, "tanh": tanh, "relu": relu, "sigmoid": sigmoid,
    "reshape": reshape, "view": reshape, "transpose": transpose, "permute": permute, "broadcast_to": broadcast_to,
    "split": split, "masked_fill": masked_fill, "T": property(transpose),
    "to": _to, "cpu": lambda self: _to(self, "cpu"), "cuda": lambda self: _to(self, "cuda"),
    "astype": cast, "float": lambda self: cast(self, np.float32), "double": lambda self: cast(self, np.float64),
}


def bind_tensor_methods() -> None:
    """Make :data:`TENSOR_METHODS` the operators and methods of :class:`Tensor` (called once, by
    ``minitensor/__init__.py``, as DeZero's ``setup_variable``)."""
    for name, method in TENSOR_METHODS.items():
        setattr(Tensor, name, method)
