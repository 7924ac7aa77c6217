"""Embedding lookup: rows of a weight matrix picked by integer ids."""
from __future__ import annotations

import numpy as np

from .. import backend
from ..autograd import Function
from ..errors import ShapeError
from ..tensor import Tensor, as_ids, as_tensor


class Embedding(Function):
    """y[..., :] = W[ids[...], :] for W (V, D).

    The gradient of W adds each output row's gradient into the row it came from; an id
    that appears n times receives n contributions. ids get no gradient.
    """

    @staticmethod
    def forward(ctx, ids, weight):
        if ids.dtype.kind not in "iu":
            raise ShapeError(f"embedding: ids must be integers, got dtype {ids.dtype}")
        if weight.ndim != 2:
            raise ShapeError(f"embedding: weight must be (num_embeddings, dim), got shape {tuple(weight.shape)}")
        # checked on the host only: on the GPU it would cost a device sync on every call
        if ctx.xp is np and ids.size and (int(ids.min()) < 0 or int(ids.max()) >= weight.shape[0]):
            raise ShapeError(
                f"embedding: ids must lie in [0, {weight.shape[0]}), got values from {int(ids.min())} to {int(ids.max())}"
            )
        ctx.save_for_backward(ids)
        ctx.weight_shape = weight.shape
        return weight[ids]

    @staticmethod
    def backward(ctx, grad):
        (ids,) = ctx.saved
        xp = ctx.xp
        gw = xp.zeros(ctx.weight_shape, dtype=grad.dtype)
        backend.index_add_rows(xp, gw, ids.reshape(-1), grad.reshape(-1, ctx.weight_shape[1]))
        return None, gw


def embedding(ids, weight) -> Tensor:
    """Rows of ``weight`` (V, D) picked by integer ``ids`` (...) -> (..., D)."""
    weight = as_tensor(weight)
    ids = as_ids(ids, weight)
    return Embedding.apply(ids, weight)
