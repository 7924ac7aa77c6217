"""Layer normalisation (Ba et al., 2016) over the last axis."""
from __future__ import annotations

from ..autograd import Function, ShapeError
from .reduce import sum_last


class LayerNorm(Function):
    """y = γ ⊙ x̂ + β with x̂ = (x - μ) · r, r = 1/√(σ² + eps), μ and σ² over the last axis.

    With ĝ = g ⊙ γ and means over the last axis (D entries):
        dx = r · (ĝ - mean(ĝ) - x̂ · mean(ĝ ⊙ x̂))
        dγ = Σ_rows g ⊙ x̂,   dβ = Σ_rows g
    The forward saves x̂ and r (the mean and reciprocal std of every row).
    """

    @staticmethod
    def forward(ctx, x, weight=None, bias=None, eps=1e-5):
        d = x.shape[-1]
        for name, p in (("weight", weight), ("bias", bias)):
            if p is not None and p.shape != (d,):
                raise ShapeError(f"layer_norm: {name} has shape {tuple(p.shape)}, expected ({d},) for input {tuple(x.shape)}")
        xp = ctx.xp
        inv_d = x.dtype.type(1.0 / d)
        xhat = x - sum_last(xp, x) * inv_d                     # x - μ
        r = 1 / xp.sqrt(sum_last(xp, xhat * xhat) * inv_d + x.dtype.type(eps))
        xhat *= r                                              # (x - μ) / σ
        ctx.save_for_backward(xhat, r, weight)
        if weight is None:
            return xhat + bias if bias is not None else xhat.copy()
        y = xhat * weight
        if bias is not None:
            y += bias
        return y

    @staticmethod
    def backward(ctx, grad):
        xhat, r, weight = ctx.saved
        nx, nw, nb = ctx.needs_input_grad
        gx = gw = gb = None
        if nx:
            xp = ctx.xp
            gh = grad * weight if weight is not None else grad.copy()
            inv_d = gh.dtype.type(1.0 / gh.shape[-1])
            proj = sum_last(xp, gh * xhat) * inv_d                 # mean(ĝ ⊙ x̂)
            gh -= sum_last(xp, gh) * inv_d                         # ĝ - mean(ĝ)
            gh -= xhat * proj
            gh *= r
            gx = gh
        lead = tuple(range(grad.ndim - 1))
        if nw:
            gw = (grad * xhat).sum(axis=lead)
        if nb:
            gb = grad.sum(axis=lead)
        return gx, gw, gb
