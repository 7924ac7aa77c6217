"""The feed-forward sub-layer (Section 3.3) and the encoder and decoder layers (Section 3.1)."""
from __future__ import annotations

import minitensor as mt
import minitensor.functional as F
from minitensor import nn

from .attention import MultiHeadAttention


class PositionwiseFeedForward(nn.Module):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2 (equation 2), the same at every position.

    (B, T, d_model) -> (B, T, d_model) through an inner width d_ff. ``dropout`` (off in the
    paper) applies to the inner activations.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: mt.Tensor) -> mt.Tensor:
        return self.w_2(self.dropout(F.relu(self.w_1(x))))  # max(0, x W_1 + b_1) W_2 + b_2


class Residual(nn.Module):
    """One residual sub-layer connection with its LayerNorm and dropout (Sections 3.1, 5.4).

    post-norm (the paper): LayerNorm(x + Dropout(Sublayer(x)))
    pre-norm:              x + Dropout(Sublayer(LayerNorm(x)))
    """

    def __init__(self, d_model: int, dropout: float, norm_first: bool, eps: float = 1e-5):
        super().__init__()
        self.norm = nn.LayerNorm(d_model, eps)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x: mt.Tensor, sublayer) -> mt.Tensor:
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


class EncoderLayer(nn.Module):
    """Self-attention then feed-forward, each wrapped in a residual connection.

    forward(x (B, Ts, d_model), src_mask (B, 1, 1, Ts)) -> (B, Ts, d_model)
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1,
                 attention_dropout: float = 0.0, norm_first: bool = False, eps: float = 1e-5):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, attention_dropout)
        self.ffn = PositionwiseFeedForward(d_model, d_ff)
        self.sub1 = Residual(d_model, dropout, norm_first, eps)
        self.sub2 = Residual(d_model, dropout, norm_first, eps)

    def forward(self, x: mt.Tensor, src_mask: mt.Tensor | None = None) -> mt.Tensor:
        x = self.sub1(x, lambda h: self.self_attn(h, h, h, src_mask))
        return self.sub2(x, self.ffn)


class DecoderLayer(nn.Module):
    """Masked self-attention, encoder-decoder attention, feed-forward; each residual.

    forward(y (B, Tt, d_model), memory (B, Ts, d_model), tgt_mask (B, 1, Tt, Tt), src_mask (B, 1, 1, Ts))
    -> (B, Tt, d_model). Queries of the second attention come from the decoder, keys and
    values from the encoder output ``memory`` (Section 3.2.3).
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1,
                 attention_dropout: float = 0.0, norm_first: bool = False, eps: float = 1e-5):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, attention_dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, attention_dropout)
        self.ffn = PositionwiseFeedForward(d_model, d_ff)
        self.sub1 = Residual(d_model, dropout, norm_first, eps)
        self.sub2 = Residual(d_model, dropout, norm_first, eps)
        self.sub3 = Residual(d_model, dropout, norm_first, eps)

    def forward(self, y: mt.Tensor, memory: mt.Tensor, tgt_mask: mt.Tensor | None = None,
                src_mask: mt.Tensor | None = None, cache: dict | None = None) -> mt.Tensor:
        """With ``cache`` (incremental decoding) ``y`` holds only the new positions; the cache
        keeps the earlier positions' self-attention keys/values and the memory's projections."""
        self_cache = cross_cache = None
        if cache is not None:
            self_cache = cache.setdefault("self", {})
            cross_cache = cache.setdefault("cross", {})
        y = self.sub1(y, lambda h: self.self_attn(h, h, h, tgt_mask, cache=self_cache))
        y = self.sub2(y, lambda h: self.cross_attn(h, memory, memory, src_mask, cache=cross_cache, static_kv=True))
        return self.sub3(y, self.ffn)
