"""Fusions: a few ops of the model computed as one, the speed layer's substitutes for forms the
model writes plainly. ``transformer/fused.py`` puts them in a model's sub-layers (the setting
``fused``); each equals the plain ops it replaces, in value and gradient
(``tests/minitensor/speed/test_fusions.py``).

- :func:`linears`: x W_1 + b_1, …, x W_n + b_n as one product, x [W_1 … W_n]: the Q, K and V
  projections of one input, which then read it once;
- :func:`linear_relu`: max(0, x W + b), on a GPU the bias and the max in one kernel each way;
- :func:`dropout_add_layer_norm`: LayerNorm(x + Dropout(sub)), on a GPU one kernel each way.
"""
from __future__ import annotations

import numpy as np

from .. import cuda
from ..autograd import Function
from ..backend import matmul as _matmul
from ..errors import ShapeError
from ..ops.dropout import check_probability, dropout
from ..ops.elementwise import relu
from ..ops.linalg import Linear, Products, _autocast_input, _weight_in, linear
from ..ops.norm import layer_norm
from ..tensor import Tensor, as_tensor, as_tensors


class Linears(Products, Function):
    """y_i = x W_i + b_i for i = 1..n, every W_i (in, out): the Q, K and V projections of one input.

    One product x [W_1 … W_n] gives the n outputs, column blocks of one (rows, n·out) array.
    dx = Σ_i G_i W_iᵀ = [G_1 … G_n] [W_1 … W_n]ᵀ, dW_i = x₂ᵈᵀ G_i, db_i = Σ G_i over rows. An
    output nothing used adds nothing to dx. The steps that form the outputs and dx are the
    methods ``products`` and ``products_grad``, which a faster route overrides.
    """

    @staticmethod
    def products(xp, x, w, biases):
        """[x W_i + b_i for each i], for x (rows, in) and w = [W_1 … W_n] (in, n·out)."""
        y, n_out = _matmul(x, w), w.shape[1] // len(biases)
        ys = [y[:, i * n_out:(i + 1) * n_out] for i in range(len(biases))]
        for y_i, b in zip(ys, biases):
            if b is not None:
                y_i += b          # in place, as Linear adds its bias
        return ys

    @staticmethod
    def products_grad(xp, grads, w, rows: int):
        """Σ_i G_i W_iᵀ, a missing G_i (None) counting as zeros."""
        n_out = w.shape[1] // len(grads)
        gs = [xp.zeros((rows, n_out), w.dtype) if g is None else g for g in grads]
        return _matmul(xp.concatenate(gs, axis=1), w.T)

    @staticmethod
    def forward(ctx, x, *params, dtype=None):
        ws, bs = params[0::2], params[1::2]
        for w, b in zip(ws, bs):
            if w.ndim != 2 or w.shape[0] != x.shape[-1] or w.shape != ws[0].shape:
                raise ShapeError(f"linears: input of shape {tuple(x.shape)} does not fit weight of shape "
                                 f"{tuple(w.shape)} (the weights must all be (in_features, out_features) with "
                                 f"in_features = {x.shape[-1]} and the first one's out_features)")
            if b is not None and b.shape != w.shape[1:]:
                raise ShapeError(f"linears: bias of shape {tuple(b.shape)} does not fit weight of shape {tuple(w.shape)}")
        ctx.w_dtypes, ctx.b_dtypes = [w.dtype for w in ws], [None if b is None else b.dtype for b in bs]
        ws = [_weight_in(w, dtype) for w in ws]
        w = ctx.xp.concatenate(ws, axis=1)                    # [W_1 … W_n], (in, n out)
        ctx.save_for_backward(x, w)
        n_in, n_out = ws[0].shape
        ys = ctx.fn.products(ctx.xp, x.reshape(-1, n_in), w, bs)
        return tuple(y_i.reshape(x.shape[:-1] + (n_out,)) for y_i in ys)

    @staticmethod
    def backward(ctx, grads):
        x, w = ctx.saved
        needs = ctx.needs_input_grad
        x2, n_out = x.reshape(-1, x.shape[-1]), w.shape[1] // len(grads)
        g2 = [None if g is None else g.reshape(-1, n_out) for g in grads]
        out = [ctx.fn.products_grad(ctx.xp, g2, w, x2.shape[0]).reshape(x.shape) if needs[0] else None]
        for i, g in enumerate(g2):
            nw, nb = needs[1 + 2 * i], needs[2 + 2 * i]
            # dW and db in the parameters' own dtype (float32 under autocast), each rounded once
            out.append(ctx.fn.product(x2.T, g, ctx.w_dtypes[i]) if nw and g is not None else None)
            out.append(ctx.fn.column_sums(ctx.xp, g, ctx.b_dtypes[i]) if nb and g is not None else None)
        return tuple(out)


def linears(x, weights, biases=None) -> tuple:
    """(x @ W_1 + b_1, …, x @ W_n + b_n) for weights W_i all (in, out) and biases (out,) or None:
    several linear maps of one input (the Q, K and V projections of self-attention) in one
    matrix product, which reads x once.
    Runs in 16-bit inside ``amp.autocast`` as :func:`minitensor.functional.linear` does."""
    x = as_tensor(x)
    weights = [as_tensor(w, x) for w in weights]
    biases = [None] * len(weights) if biases is None else [None if b is None else as_tensor(b, x) for b in biases]
    if not weights or len(biases) != len(weights):
        raise ValueError(f"linears: needs one or more weights and as many biases (or None), "
                         f"got {len(weights)} and {len(biases)}")
    x, dt = _autocast_input(x, *weights)
    params = [p for pair in zip(weights, biases) for p in pair]
    return Linears.apply(x, *params, dtype=dt)


def linear_relu(x, weight, bias) -> Tensor:
    """max(0, x @ weight + bias): the feed-forward layer's first half. Where the kernels run and
    take the bias, the product without its bias and then one kernel each way for the bias and
    the max (no mask kept); elsewhere ``relu(linear(x, weight, bias))``."""
    x = as_tensor(x)
    weight, bias = as_tensor(weight, x), as_tensor(bias, x)
    if cuda.kernels_may_run(x.xp):
        kernel = cuda.launcher("bias_relu")
        x16, dt = _autocast_input(x, weight)
        if kernel.applies(dt or np.result_type(x16.dtype, weight.dtype), weight.shape[-1], bias):
            return kernel.FusedBiasRelu.apply(Linear.apply(x16, weight, None, dtype=dt), bias)
    return relu(linear(x, weight, bias))


def dropout_add_layer_norm(sub, x, weight, bias, p: float = 0.0, training: bool = True, eps: float = 1e-5) -> Tensor:
    """LayerNorm(x + Dropout(sub)): the post-norm residual connection around a sub-layer whose
    output is ``sub`` (Sections 3.1 and 5.4), with the LayerNorm's ``weight`` and ``bias``.
    Where the kernels run, one kernel each way (the dropout mask drawn inside it and drawn again
    by the backward); elsewhere, and for p = 1, the three ops."""
    check_probability("dropout_add_layer_norm: p", p)
    sub, x = as_tensors(sub, x)
    w, b = as_tensor(weight, x), as_tensor(bias, x)
    if sub.shape != x.shape:
        raise ShapeError(f"dropout_add_layer_norm: the sub-layer's output has shape {tuple(sub.shape)}, "
                         f"the residual {tuple(x.shape)}: they must be the same")
    p = p if training else 0.0
    if p < 1.0 and cuda.kernels_may_run(x.xp):
        kernel = cuda.launcher("layer_norm")
        if kernel.applies(x.data, w.data, b.data, sub.data):
            return kernel.FusedDropoutAddLayerNorm.apply(sub, x, w, b, p=p, eps=eps)
    return layer_norm(x + dropout(sub, p, training), w, b, eps)
