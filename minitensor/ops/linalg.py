"""Matrix products: batched matmul, and the fused linear layer y = xW + b."""
from __future__ import annotations

import numpy as np

from .. import cuda
from ..amp import autocast_dtype, cast_once
from ..backend import matmul as _matmul
from ..autograd import Function
from ..errors import ShapeError
from ..tensor import Tensor, as_tensor, as_tensors
from .elementwise import Cast, relu


def _swap(a):
    """Transpose the last two axes."""
    return a.swapaxes(-1, -2)


class Products:
    """The three array steps of the ops below, plain: a product, a bias added in place, and column
    sums. A faster route of an op overrides them (``minitensor/speed/products.py``)."""

    @staticmethod
    def product(a, b, out_dtype=None):
        """a @ b over the last two axes, written in ``out_dtype`` (default: as it comes)."""
        c = _matmul(a, b)
        return c if out_dtype is None or c.dtype == out_dtype else c.astype(out_dtype)

    @staticmethod
    def add_bias(xp, y, b):
        """y += b in place (a float32 bias is added to a 16-bit y in float32 and rounded once); y."""
        y += b
        return y

    @staticmethod
    def column_sums(xp, g, dtype=None):
        """Σ over the rows of a 2-D g, in ``dtype`` (default: g's)."""
        return g.sum(axis=0, dtype=dtype)


class Matmul(Products, Function):
    """C = A @ B over the last two axes; leading axes broadcast.

    dC/dA · G = G @ Bᵀ,  dC/dB · G = Aᵀ @ G (then the engine sums broadcast axes away).
    Both inputs have at least 2 dimensions here (functional.matmul handles 1-D).
    """

    @staticmethod
    def forward(ctx, a, b):
        if a.shape[-1] != b.shape[-2]:
            raise ShapeError(
                f"matmul: shapes {tuple(a.shape)} and {tuple(b.shape)} do not align "
                f"(last axis of the first is {a.shape[-1]}, second-to-last of the second is {b.shape[-2]})"
            )
        ctx.save_for_backward(a, b)
        return ctx.fn.product(a, b)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved
        na, nb = ctx.needs_input_grad
        mm = ctx.fn.product
        return (mm(grad, _swap(b)) if na else None), (mm(_swap(a), grad) if nb else None)


def _autocast(*tensors):
    """Inside ``minitensor.amp.autocast``: floating inputs of a matrix product cast to its dtype
    (a differentiable cast, so float32 parameters get float32 gradients), each tensor once per
    block however many products read it (``amp.cast_once``)."""
    dt = autocast_dtype()
    if dt is None:
        return tensors
    return tuple(t if t is None or t.dtype == dt or t.dtype.kind != "f"
                 else cast_once(t, lambda t: Cast.apply(t, dtype=dt)) for t in tensors)


def _weight_in(w, dtype):
    """A weight's array in ``dtype`` under autocast (cast once per block: amp.cast_once), else as it is."""
    return w if dtype is None or w.dtype == dtype else cast_once(w, lambda a: a.astype(dtype))


def _autocast_input(x, *weights):
    """(x, dtype) for a linear layer inside ``amp.autocast``: the activation as a differentiable
    cast (once per block) and the dtype the weights are cast to inside the op, so that the
    parameters stay themselves and get their gradients in their own dtype; (x, None) outside."""
    dt = autocast_dtype() if all(w.dtype.kind == "f" for w in weights) else None
    if dt is not None:
        (x,) = _autocast(x)
    return x, dt


def matmul(a, b) -> Tensor:
    """a @ b: matrix product over the last two axes, leading axes broadcast.

    A 1-D operand is treated as a row (first) or column (second) vector, and that axis
    is dropped from the result, as in NumPy. Runs in 16-bit inside ``amp.autocast``.
    """
    a, b = _autocast(*as_tensors(a, b))
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"matmul: both operands need at least 1 dimension, got shapes {a.shape} and {b.shape}")
    if a.ndim == 1 and b.ndim == 1:
        if a.shape != b.shape:
            raise ShapeError(f"matmul: vectors of shapes {a.shape} and {b.shape} differ in length")
        return Matmul.apply(a.reshape(1, -1), b.reshape(-1, 1)).reshape(())
    if a.ndim == 1:
        out = Matmul.apply(a.reshape(1, -1), b)
        return out.reshape(out.shape[:-2] + out.shape[-1:])
    if b.ndim == 1:
        return Matmul.apply(a, b.reshape(-1, 1)).reshape(a.shape[:-1])
    return Matmul.apply(a, b)


class Linear(Products, Function):
    """y = x W + b for x (..., in), W (in, out), b (out,) — the paper's xW + b; with
    ``transposed``, W is stored (out, in) and y = x Wᵀ + b (the tied output layer h Eᵀ, whose
    gradient then comes out in E's own layout).

    The leading axes are flattened, so dW = xᵀ G is one matrix product (not a batch of
    them summed afterwards): dx = G Wᵀ, dW = x₂ᵈᵀ G₂ᵈ, db = Σ G over rows;
    transposed: dx = G W, dW = G₂ᵈᵀ x₂ᵈ.
    """

    @staticmethod
    def forward(ctx, x, w, b=None, transposed=False, dtype=None):
        n_in, n_out = (w.shape[::-1] if transposed else w.shape) if w.ndim == 2 else (None, None)
        if n_in is None or x.shape[-1] != n_in:
            layout = "(out_features, in_features) with transposed=True" if transposed else "(in_features, out_features)"
            raise ShapeError(
                f"linear: input of shape {tuple(x.shape)} does not fit weight of shape {tuple(w.shape)} "
                f"(the weight must be {layout} with in_features = {x.shape[-1]})"
            )
        if b is not None and b.shape != (n_out,):
            raise ShapeError(f"linear: bias of shape {tuple(b.shape)} does not fit weight of shape {tuple(w.shape)}")
        ctx.w_dtype, ctx.b_dtype = w.dtype, None if b is None else b.dtype
        w = _weight_in(w, dtype)
        ctx.save_for_backward(x, w)
        ctx.transposed = transposed
        y = ctx.fn.product(x.reshape(-1, x.shape[-1]), w.T if transposed else w)  # one product over all rows
        if b is not None:
            ctx.fn.add_bias(ctx.xp, y, b)
        return y.reshape(x.shape[:-1] + (n_out,))

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved
        nx, nw, nb = ctx.needs_input_grad
        g2 = grad.reshape(-1, grad.shape[-1])
        x2 = x.reshape(-1, x.shape[-1])
        mm = ctx.fn.product
        gx = mm(g2, w if ctx.transposed else w.T).reshape(x.shape) if nx else None
        # dW and db in the parameters' own dtype (float32 under autocast), each rounded once
        gw = (mm(g2.T, x2, ctx.w_dtype) if ctx.transposed else mm(x2.T, g2, ctx.w_dtype)) if nw else None
        gb = ctx.fn.column_sums(ctx.xp, g2, ctx.b_dtype) if nb else None
        return gx, gw, gb


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
    Runs in 16-bit inside ``amp.autocast`` as :func:`linear` does."""
    x = as_tensor(x)
    weights = [as_tensor(w, x) for w in weights]
    biases = [None] * len(weights) if biases is None else [None if b is None else as_tensor(b, x) for b in biases]
    if not weights or len(biases) != len(weights):
        raise ValueError(f"linears: needs one or more weights and as many biases (or None), "
                         f"got {len(weights)} and {len(biases)}")
    x, dt = _autocast_input(x, *weights)
    params = [p for pair in zip(weights, biases) for p in pair]
    return Linears.apply(x, *params, dtype=dt)


ACTIVATIONS = (None, "relu")


def linear(x, weight, bias=None, transposed: bool = False, activation: str | None = None) -> Tensor:
    """x @ weight + bias for x (..., in), weight (in, out), bias (out,) -> (..., out); with
    ``transposed``, x @ weight.T + bias for a weight stored (out, in), such as a tied
    embedding (V, d) used as the output layer: its gradient then needs no transposed copy.
    ``activation="relu"`` gives max(0, x @ weight + bias) (the feed-forward layer's first half).
    Runs in 16-bit inside ``amp.autocast``: the input is cast, the weight is cast inside and the
    bias added as it is, so their gradients come out in float32 without a cast of their own."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"linear: activation must be one of {ACTIVATIONS}, got {activation!r}")
    x = as_tensor(x)
    weight, bias = as_tensor(weight, x), None if bias is None else as_tensor(bias, x)
    x, dt = _autocast_input(x, weight)
    if activation == "relu" and bias is not None and cuda.kernels_may_run(x.xp):
        kernel = cuda.launcher("bias_relu")
        if kernel.applies(dt or np.result_type(x.dtype, weight.dtype), weight.shape[0 if transposed else -1], bias):
            y = Linear.apply(x, weight, None, transposed=transposed, dtype=dt)
            return kernel.FusedBiasRelu.apply(y, bias)  # why: the bias and the max in one pass each way, no mask
    y = Linear.apply(x, weight, bias, transposed=transposed, dtype=dt)
    return relu(y) if activation == "relu" else y
