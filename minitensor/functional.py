"""The public ops: ``import minitensor.functional as F``.

Each function checks and converts its arguments, then calls one op from
``minitensor.ops`` (where the forward and backward live). Python numbers and arrays are
accepted wherever a tensor is, and take the dtype of the tensor they meet.
"""
from __future__ import annotations

import builtins
import numbers
from typing import Sequence

import numpy as np

from . import backend
from .amp import autocast_dtype
from .autograd import ShapeError
from .ops.attention import ScaledDotProductAttention
from .ops.dropout import Dropout
from .ops.elementwise import (
    Add, Cast, Div, Exp, Log, MaskedFill, Mul, Neg, Pow, Relu, Sigmoid, Sqrt, Sub, Tanh, Where,
)
from .ops.embedding import Embedding
from .ops.linalg import Linear, Matmul
from .ops.loss import CrossEntropy
from .ops.norm import LayerNorm
from .ops.reduce import LogSumExp, Max, Mean, Sum, normalize_axes
from .ops.shape import BroadcastTo, Concat, GetItem, Reshape, Stack, ToDevice, Transpose
from .ops.softmax import LogSoftmax, Softmax
from .tensor import Tensor


def _as_tensor(x, like: Tensor | None = None) -> Tensor:
    """``x`` as a Tensor; a Python number takes the floating dtype and device of ``like``."""
    if isinstance(x, Tensor):
        return x
    if backend.is_array(x):
        return Tensor._wrap(x)
    if like is None:
        return Tensor(x)
    if isinstance(x, numbers.Number) and not isinstance(x, bool):
        kind = like.data.dtype.kind
        dtype = like.data.dtype if (kind == "f" or isinstance(x, numbers.Integral)) else np.float32
        return Tensor._wrap(like.xp.asarray(x, dtype=dtype))
    return Tensor(x, device=like.device)


def _pair(a, b):
    if isinstance(a, Tensor):
        return a, _as_tensor(b, a)
    b = _as_tensor(b)
    return _as_tensor(a, b), b


# ----------------------------------------------------------------- arithmetic
def add(a, b) -> Tensor:
    """a + b, broadcasting."""
    return Add.apply(*_pair(a, b))


def sub(a, b) -> Tensor:
    """a - b, broadcasting."""
    return Sub.apply(*_pair(a, b))


def mul(a, b) -> Tensor:
    """a * b, broadcasting."""
    return Mul.apply(*_pair(a, b))


def div(a, b) -> Tensor:
    """a / b, broadcasting."""
    return Div.apply(*_pair(a, b))


def pow(a, b) -> Tensor:  # noqa: A001 (mirrors the operator's name)
    """a ** b, broadcasting (the gradient wrt b needs a > 0)."""
    return Pow.apply(*_pair(a, b))


def neg(x) -> Tensor:
    return Neg.apply(_as_tensor(x))


def exp(x) -> Tensor:
    return Exp.apply(_as_tensor(x))


def log(x) -> Tensor:
    return Log.apply(_as_tensor(x))


def sqrt(x) -> Tensor:
    return Sqrt.apply(_as_tensor(x))


def tanh(x) -> Tensor:
    return Tanh.apply(_as_tensor(x))


def relu(x) -> Tensor:
    return Relu.apply(_as_tensor(x))


def sigmoid(x) -> Tensor:
    return Sigmoid.apply(_as_tensor(x))


def cast(x, dtype) -> Tensor:
    """x converted to ``dtype``; differentiable between floating dtypes."""
    x = _as_tensor(x)
    if np.dtype(dtype).kind != "f":
        return Tensor._wrap(x.data.astype(dtype))
    return Cast.apply(x, dtype=np.dtype(dtype))


def to_device(x, device) -> Tensor:
    """x copied to ``device`` ("cpu" or "cuda"); gradients flow back to x's device."""
    device = backend.normalize_device(device)
    if device == "cuda":
        backend.cupy()  # clear error when there is no GPU or no CuPy
    return ToDevice.apply(_as_tensor(x), device=device)


# ----------------------------------------------------------------- linear algebra
def _autocast(*tensors):
    """Inside ``minitensor.amp.autocast``: floating inputs of a matrix product cast to its dtype
    (a differentiable cast, so float32 parameters get float32 gradients)."""
    dt = autocast_dtype()
    if dt is None:
        return tensors
    return tuple(t if t is None or t.dtype == dt or t.dtype.kind != "f" else Cast.apply(t, dtype=dt) for t in tensors)


def matmul(a, b) -> Tensor:
    """a @ b: matrix product over the last two axes, leading axes broadcast.

    A 1-D operand is treated as a row (first) or column (second) vector, and that axis
    is dropped from the result, as in NumPy. Runs in 16-bit inside ``amp.autocast``.
    """
    a, b = _autocast(*_pair(a, b))
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


def linear(x, weight, bias=None) -> Tensor:
    """x @ weight + bias for x (..., in), weight (in, out), bias (out,) -> (..., out).
    Runs in 16-bit inside ``amp.autocast``."""
    x = _as_tensor(x)
    return Linear.apply(*_autocast(x, _as_tensor(weight, x), None if bias is None else _as_tensor(bias, x)))


# ----------------------------------------------------------------- reductions
def sum(x, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Sum over ``axis`` (None: all; int or tuple; negatives allowed)."""
    return Sum.apply(_as_tensor(x), axis=axis, keepdims=keepdims)


def mean(x, axis=None, keepdims: bool = False) -> Tensor:
    """Mean over ``axis`` (None: all)."""
    return Mean.apply(_as_tensor(x), axis=axis, keepdims=keepdims)


def max(x, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Maximum over ``axis``; ties share the gradient equally."""
    return Max.apply(_as_tensor(x), axis=axis, keepdims=keepdims)


def logsumexp(x, axis=None, keepdims: bool = False) -> Tensor:
    """log Σ exp(x) over ``axis``, without overflow."""
    return LogSumExp.apply(_as_tensor(x), axis=axis, keepdims=keepdims)


def softmax(x, axis: int = -1) -> Tensor:
    """exp(x) / Σ exp(x) along ``axis``."""
    return Softmax.apply(_as_tensor(x), axis=axis)


def log_softmax(x, axis: int = -1) -> Tensor:
    """x - logsumexp(x) along ``axis``."""
    return LogSoftmax.apply(_as_tensor(x), axis=axis)


# ----------------------------------------------------------------- shapes
def reshape(x, shape) -> Tensor:
    """x with a new shape (one entry may be -1)."""
    x = _as_tensor(x)
    shape = (shape,) if isinstance(shape, numbers.Integral) else tuple(shape)
    try:
        return Reshape.apply(x, shape=shape)
    except ShapeError as e:
        raise ShapeError(f"reshape: cannot reshape a tensor of shape {x.shape} ({x.size} elements) to {shape}") from e


def transpose(x, *axes) -> Tensor:
    """No axes: reverse all axes. Two axes: swap them. ndim axes: a full permutation."""
    x = _as_tensor(x)
    if len(axes) == 1 and not isinstance(axes[0], numbers.Integral):
        axes = tuple(axes[0])
    n = x.ndim
    if not axes:
        perm = tuple(reversed(range(n)))
    elif len(axes) == 2 and n != 2:
        i, j = normalize_axes(axes[0], n)[0], normalize_axes(axes[1], n)[0]
        perm = list(range(n))
        perm[i], perm[j] = perm[j], perm[i]
        perm = tuple(perm)
    else:
        return permute(x, *axes)
    return Transpose.apply(x, axes=perm)


def permute(x, *axes) -> Tensor:
    """x with axes reordered: output axis i is input axis ``axes[i]``."""
    x = _as_tensor(x)
    if len(axes) == 1 and not isinstance(axes[0], numbers.Integral):
        axes = tuple(axes[0])
    perm = tuple(a % x.ndim if x.ndim else a for a in axes)
    if sorted(perm) != list(range(x.ndim)):
        raise ShapeError(f"permute: {axes} is not a permutation of the {x.ndim} axes of a tensor of shape {x.shape}")
    return Transpose.apply(x, axes=perm)


def _index_part(p, xp):
    if isinstance(p, Tensor):
        return p.data
    if isinstance(p, (list, np.ndarray)):
        return xp.asarray(p)
    return p


def getitem(x, index) -> Tensor:
    """x[index]: ints, slices, None, Ellipsis, integer or bool arrays (lists and tensors too)."""
    x = _as_tensor(x)
    xp = x.xp
    index = tuple(_index_part(p, xp) for p in index) if isinstance(index, tuple) else _index_part(index, xp)
    try:
        return GetItem.apply(x, index=index)
    except IndexError as e:
        raise IndexError(f"getitem: index {index!r} does not fit a tensor of shape {x.shape}: {e}") from e


def concat(tensors: Sequence, axis: int = 0) -> Tensor:
    """Join tensors along an existing axis."""
    ts = [_as_tensor(t) for t in tensors]
    if not ts:
        raise ShapeError("concat: needs at least one tensor")
    return Concat.apply(*ts, axis=axis)


def stack(tensors: Sequence, axis: int = 0) -> Tensor:
    """Join same-shaped tensors along a new axis."""
    ts = [_as_tensor(t) for t in tensors]
    if not ts:
        raise ShapeError("stack: needs at least one tensor")
    shapes = {t.shape for t in ts}
    if len(shapes) > 1:
        raise ShapeError(f"stack: all tensors need the same shape, got {sorted(shapes)}")
    return Stack.apply(*ts, axis=axis)


def split(x, sections, axis: int = 0) -> list:
    """Cut x along ``axis``: an int gives that many equal parts; a list gives parts of those sizes."""
    x = _as_tensor(x)
    n = x.shape[axis]
    if isinstance(sections, numbers.Integral):
        if sections <= 0 or n % sections:
            raise ShapeError(f"split: axis {axis} of length {n} does not divide into {sections} equal parts")
        sizes = [n // sections] * sections
    else:
        sizes = [int(s) for s in sections]
        if builtins.sum(sizes) != n or any(s < 0 for s in sizes):
            raise ShapeError(f"split: sizes {sizes} do not add up to the length {n} of axis {axis}")
    pieces, start = [], 0
    lead = (slice(None),) * (axis % x.ndim)
    for s in sizes:
        pieces.append(getitem(x, lead + (slice(start, start + s),)))
        start += s
    return pieces


def broadcast_to(x, shape) -> Tensor:
    """x repeated along size-1 (or new leading) axes to reach ``shape``."""
    x = _as_tensor(x)
    shape = tuple(shape)
    try:
        ok = np.broadcast_shapes(x.shape, shape) == shape
    except ValueError:
        ok = False
    if not ok:
        raise ShapeError(f"broadcast_to: cannot broadcast shape {x.shape} to {shape}")
    return BroadcastTo.apply(x, shape=shape)


# ----------------------------------------------------------------- selection
def _bool_tensor(m, like: Tensor, op: str) -> Tensor:
    m = m if isinstance(m, Tensor) else Tensor._wrap(like.xp.asarray(m))
    if m.dtype != np.bool_:
        raise ShapeError(f"{op}: the condition/mask must be a bool tensor, got dtype {m.dtype}")
    return m


def where(cond, a, b) -> Tensor:
    """a where cond is True, else b (all three broadcast together)."""
    a, b = _pair(a, b)
    return Where.apply(_bool_tensor(cond, a, "where"), a, b)


def masked_fill(x, mask, value: float) -> Tensor:
    """x with ``value`` wherever the bool ``mask`` (broadcastable to x's shape) is True."""
    x = _as_tensor(x)
    mask = _bool_tensor(mask, x, "masked_fill")
    try:
        ok = np.broadcast_shapes(mask.shape, x.shape) == x.shape
    except ValueError:
        ok = False
    if not ok:
        raise ShapeError(f"masked_fill: mask of shape {mask.shape} does not broadcast to the input's shape {x.shape}")
    return MaskedFill.apply(x, mask, value=value)


# ----------------------------------------------------------------- layers
def dropout(x, p: float = 0.5, training: bool = True) -> Tensor:
    """Zero each entry with probability p and scale the rest by 1/(1-p); identity when not training."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: p must be in [0, 1], got {p}")
    x = _as_tensor(x)
    if not training or p == 0.0:
        return x
    return Dropout.apply(x, p=p)


def embedding(ids, weight) -> Tensor:
    """Rows of ``weight`` (V, D) picked by integer ``ids`` (...) -> (..., D)."""
    weight = _as_tensor(weight)
    ids = ids if isinstance(ids, Tensor) else Tensor._wrap(weight.xp.asarray(ids))
    return Embedding.apply(ids, weight)


def layer_norm(x, weight=None, bias=None, eps: float = 1e-5) -> Tensor:
    """Normalise over the last axis to mean 0 and variance 1, then scale by weight and shift by bias."""
    x = _as_tensor(x)
    w = None if weight is None else _as_tensor(weight, x)
    b = None if bias is None else _as_tensor(bias, x)
    return LayerNorm.apply(x, w, b, eps=eps)


_REDUCTIONS = ("mean", "sum", "none")


def cross_entropy(logits, target, ignore_index: int | None = None, label_smoothing: float = 0.0,
                  reduction: str = "mean") -> Tensor:
    """Cross entropy of ``logits`` (..., V) against integer ``target`` (...), classes on the last axis.

    label_smoothing ε: PyTorch's definition (true class 1-ε+ε/V, every class ε/V).
    ignore_index: targets with this value count for nothing; "mean" averages over the rest.
    """
    if reduction not in _REDUCTIONS:
        raise ValueError(f"cross_entropy: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    logits = _as_tensor(logits)
    target = target if isinstance(target, Tensor) else Tensor._wrap(logits.xp.asarray(target))
    return CrossEntropy.apply(logits, target, ignore_index=ignore_index, label_smoothing=label_smoothing,
                              reduction=reduction)


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p: float = 0.0, training: bool = False,
                                 return_weights: bool = False):
    """softmax(q kᵀ/√d + mask) v for q (..., Tq, d), k (..., Tk, d), v (..., Tk, dv) -> (..., Tq, dv).

    mask: bool, broadcastable to (..., Tq, Tk); True = may attend. With
    ``return_weights=True`` also returns the attention weights (..., Tq, Tk), detached.
    """
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"scaled_dot_product_attention: dropout_p must be in [0, 1), got {dropout_p}")
    q = _as_tensor(q)
    k, v = _as_tensor(k, q), _as_tensor(v, q)
    m = None if mask is None else _bool_tensor(mask, q, "scaled_dot_product_attention")
    out, ctx = ScaledDotProductAttention.apply_with_context(q, k, v, m, dropout_p=dropout_p, training=training,
                                                            need_weights=return_weights)
    if return_weights:
        return out, Tensor._wrap(ctx.weights)
    return out


