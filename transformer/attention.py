"""Multi-head attention (Section 3.2.2).

    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,  head_i = Attention(Q W^Q_i, K W^K_i, V W^V_i)

The h projections W^Q_i (d_model x d_k) are stored side by side as one d_model x d_model
matrix ``w_q`` (likewise ``w_k``, ``w_v``); splitting its output into h slices of width d_k
gives the h heads at once. (The fused form, ``transformer/fused.py``, applies the projections
of one input as one product, x [W^Q W^K W^V].)
"""
from __future__ import annotations

import minitensor as mt
import minitensor.functional as F
from minitensor import nn

from .config import check_heads


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention with projections ``w_q w_k w_v w_o`` (nn.Linear).

    forward(query (B, Tq, d_model), key (B, Tk, d_model), value (B, Tk, d_model), mask) -> (B, Tq, d_model)
    mask: bool, broadcastable to (B, h, Tq, Tk), True = may attend.
    Set ``store_attention = True`` to keep the last weights (B, h, Tq, Tk) in ``.attention``.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0):
        super().__init__()
        check_heads(d_model, n_heads)
        self.d_model, self.n_heads, self.d_k = d_model, n_heads, d_model // n_heads
        self.dropout = dropout
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)
        self.store_attention = False
        self.attention = None

    def split_heads(self, x: mt.Tensor) -> mt.Tensor:
        """(B, T, d_model) -> (B, h, T, d_k)."""
        B, T, _ = x.shape
        return x.reshape(B, T, self.n_heads, self.d_k).transpose(1, 2)

    def merge_heads(self, x: mt.Tensor) -> mt.Tensor:
        """(B, h, T, d_k) -> (B, T, d_model): the Concat of the heads."""
        B, _, T, _ = x.shape
        return x.transpose(1, 2).reshape(B, T, self.d_model)

    def projections(self, query: mt.Tensor, key: mt.Tensor, value: mt.Tensor) -> tuple:
        """Q W^Q, K W^K, V W^V, each (B, T, d_model): the h heads' projections side by side."""
        return self.w_q(query), self.w_k(key), self.w_v(value)

    def forward(self, query: mt.Tensor, key: mt.Tensor, value: mt.Tensor, mask: mt.Tensor | None = None,
                cache: dict | None = None, static_kv: bool = False) -> mt.Tensor:
        """``cache`` (decoding only): a dict this layer fills. With ``static_kv`` (encoder-decoder
        attention) the projected keys and values of the memory are computed once and reused;
        otherwise (decoder self-attention) the new positions' keys and values are appended to
        those of the earlier positions, so each step projects only the new token."""
        if cache is not None and static_kv and "k" in cache:
            q, k, v = self.split_heads(self.w_q(query)), cache["k"], cache["v"]
        else:
            q, k, v = (self.split_heads(t) for t in self.projections(query, key, value))
        if cache is not None and not static_kv and "k" in cache:
            k = F.concat([cache["k"], k], axis=2)
            v = F.concat([cache["v"], v], axis=2)
        if cache is not None:
            cache["k"], cache["v"] = k, v
        out = F.scaled_dot_product_attention(q, k, v, mask=mask, dropout_p=self.dropout, training=self.training,
                                             return_weights=self.store_attention)
        if self.store_attention:
            out, self.attention = out
        return self.w_o(self.merge_heads(out))

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, n_heads={self.n_heads}, dropout={self.dropout}"
