"""The matrix products each op computes, for the profiler's FLOP count: one table.

An entry maps an op (its :class:`~minitensor.autograd.Function` class's name; a subclass
takes its base's entry) to a formula ``(ctx, *input shapes, **params) -> (forward,
backward)``: two lists of (batch, m, k, n), one per product (batch, m, k) x (batch, k, n).
``ctx.needs_input_grad`` says which gradients the backward makes (None: no backward).
An op that is not in the table multiplies no matrices (its FLOPs are not counted).
"""
from __future__ import annotations

import numpy as np


def matmul(ctx, a, b):
    """C = A B: (m, k) x (k, n); dA = G Bᵀ: (m, n) x (n, k); dB = Aᵀ G: (k, m) x (m, n)."""
    batch = int(np.prod(np.broadcast_shapes(a[:-2], b[:-2])))
    (m, k), n = a[-2:], b[-1]
    na, nb = ctx.needs_input_grad or (False, False)
    return [(batch, m, k, n)], [(batch, m, n, k)] * na + [(batch, k, m, n)] * nb


def linear(ctx, x, w, b=None, transposed=False, dtype=None):
    """y = x W: (rows, in) x (in, out); dx = G Wᵀ: (rows, out) x (out, in); dW = xᵀ G: (in, rows) x (rows, out)
    (transposed: dW = Gᵀ x, (out, rows) x (rows, in))."""
    rows, (k, n) = int(np.prod(x[:-1])), (w[::-1] if transposed else w)
    nx, nw = (ctx.needs_input_grad or (False, False))[:2]
    return [(1, rows, k, n)], [(1, rows, n, k)] * nx + [(1, n, rows, k) if transposed else (1, k, rows, n)] * nw


def linears(ctx, x, *params, dtype=None):
    """Y_i = x W_i: n x (rows, in) x (in, out); dx: (rows, n out) x (n out, in); dW_i: (in, rows) x (rows, out)."""
    rows, k, n, m = int(np.prod(x[:-1])), x[-1], len(params) // 2, params[0][-1]
    needs = ctx.needs_input_grad or (False,) * (1 + len(params))
    return [(n, rows, k, m)], [(1, rows, n * m, k)] * needs[0] + [(1, k, rows, m) for nw in needs[1::2] if nw]


def attention(ctx, q, k, v, mask=None, **params):
    """S = Q Kᵀ: (Tq, d) x (d, Tk); O = A V: (Tq, Tk) x (Tk, dv); backward dV = Aᵀ G,
    dA = G Vᵀ, dQ = dS K, dK = dSᵀ Q (one each, as the backward computes them): the same
    for every attention op."""
    batch = int(np.prod(np.broadcast_shapes(q[:-2], k[:-2])))
    (tq, d), tk, dv = q[-2:], k[-2], v[-1]
    forward = [(batch, tq, d, tk), (batch, tq, tk, dv)]
    if ctx.needs_input_grad is None:
        return forward, []
    nq, nk, nv = ctx.needs_input_grad[:3]
    backward = ([(batch, tk, tq, dv)] * nv + [(batch, tq, dv, tk)] * (nq or nk) + [(batch, tq, tk, d)] * nq
                + [(batch, tk, tq, d)] * nk)
    return forward, backward


PRODUCTS = {"Matmul": matmul, "Linear": linear, "Linears": linears, "ScaledDotProductAttention": attention,
            "FlashAttention": attention}


def products(fn, ctx, shapes: list, params: dict):
    """The (forward, backward) products of op ``fn`` on inputs of ``shapes`` (None for an
    absent input), or None for an op that is not in :data:`PRODUCTS`."""
    formula = next((PRODUCTS[c.__name__] for c in fn.__mro__ if c.__name__ in PRODUCTS), None)
    return None if formula is None else formula(ctx, *shapes, **params)
