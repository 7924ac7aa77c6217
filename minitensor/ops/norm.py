"""Layer normalisation (Ba et al., 2016) over the last axis.

:class:`LayerNorm` is the plain xp code below (the reference, any device and dtype); on CuPy
arrays the speed layer routes it to the hand-written kernels where they apply
(:class:`minitensor.cuda.layer_norm.FusedLayerNorm`).
"""
from __future__ import annotations

from ..autograd import Function
from ..errors import ShapeError
from ..tensor import Tensor, as_tensor
from .precision import compute_dtype


def layer_norm_reference(xp, x, weight, bias, eps):
    """(y, xhat, r): y = γ ⊙ x̂ + β with x̂ = (x - μ)·r and r = 1/√(σ² + eps) over the last axis.

    16-bit inputs are normalised in float32 (x̂ and r stay float32) and y is cast back.
    """
    work = compute_dtype(x.dtype)
    xw = x.astype(work, copy=False)
    xhat = xw - xw.mean(axis=-1, keepdims=True)                                  # x - μ
    r = 1 / xp.sqrt((xhat * xhat).mean(axis=-1, keepdims=True) + work.type(eps))
    xhat *= r                                                                    # (x - μ) / σ
    if weight is None:
        y = xhat + bias if bias is not None else xhat.copy()
    else:
        y = xhat * weight
        if bias is not None:
            y += bias
    return y.astype(x.dtype, copy=False), xhat, r


def layer_norm_backward_reference(xp, grad, xhat, r, weight, need=(True, True, True)):
    """(dx, dγ, dβ) with ĝ = g ⊙ γ:  dx = r · (ĝ - mean(ĝ) - x̂ · mean(ĝ ⊙ x̂)),
    dγ = Σ_rows g ⊙ x̂,  dβ = Σ_rows g.  Entries of ``need`` that are False give None."""
    g = grad.astype(xhat.dtype, copy=False)
    rows = (-1, g.shape[-1])
    gx = gw = gb = None
    if need[0]:
        gh = g * weight.astype(g.dtype, copy=False) if weight is not None else g
        dx = gh - gh.mean(axis=-1, keepdims=True) - xhat * (gh * xhat).mean(axis=-1, keepdims=True)
        gx = (r * dx).astype(grad.dtype, copy=False)
    if need[1] and weight is not None:
        gw = (g * xhat).reshape(rows).sum(axis=0).astype(weight.dtype, copy=False)
    if need[2]:
        gb = g.reshape(rows).sum(axis=0).astype(grad.dtype, copy=False)
    return gx, gw, gb


def _check_parameters(x, weight, bias) -> None:
    d = x.shape[-1]
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and p.shape != (d,):
            raise ShapeError(f"layer_norm: {name} has shape {tuple(p.shape)}, expected ({d},) for input {tuple(x.shape)}")


class LayerNorm(Function):
    """y = γ ⊙ x̂ + β with x̂ = (x - μ) · r, r = 1/√(σ² + eps), μ and σ² over the last axis.

    With ĝ = g ⊙ γ and means over the last axis (D entries):
        dx = r · (ĝ - mean(ĝ) - x̂ · mean(ĝ ⊙ x̂))
        dγ = Σ_rows g ⊙ x̂,   dβ = Σ_rows g

    The two steps, :func:`layer_norm_reference` and :func:`layer_norm_backward_reference`, are
    the methods ``normalise`` and ``normalise_backward``, which a faster route overrides.
    """

    normalise = staticmethod(layer_norm_reference)
    normalise_backward = staticmethod(layer_norm_backward_reference)

    @staticmethod
    def forward(ctx, x, weight=None, bias=None, eps=1e-5):
        _check_parameters(x, weight, bias)
        y, xhat, r = ctx.fn.normalise(ctx.xp, x, weight, bias, eps)
        ctx.save_for_backward(xhat, r, weight)
        return y

    @staticmethod
    def backward(ctx, grad):
        xhat, r, weight = ctx.saved
        return ctx.fn.normalise_backward(ctx.xp, grad, xhat, r, weight, ctx.needs_input_grad)


def layer_norm(x, weight=None, bias=None, eps: float = 1e-5) -> Tensor:
    """Normalise over the last axis to mean 0 and variance 1, then scale by weight and shift by bias."""
    x = as_tensor(x)
    w = None if weight is None else as_tensor(weight, x)
    b = None if bias is None else as_tensor(bias, x)
    return LayerNorm.apply(x, w, b, eps=eps)
