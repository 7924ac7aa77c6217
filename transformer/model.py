"""The encoder-decoder Transformer (Section 3, Figure 1)."""
from __future__ import annotations

import minitensor as mt
import minitensor.functional as F
from minitensor import nn

from .attention import MultiHeadAttention
from .config import TransformerConfig
from .embedding import PositionalEncoding, ScaledEmbedding
from .layers import DecoderLayer, EncoderLayer
from .masks import causal_mask, padding_mask, target_mask


class LayerStack(nn.Module):
    """N identical layers applied in turn, plus a final LayerNorm when pre-norm (with
    post-norm every layer already ends in one)."""

    def __init__(self, layer_cls, n_layers: int, cfg: TransformerConfig):
        super().__init__()
        self.layers = nn.ModuleList([
            layer_cls(cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.dropout, cfg.attention_dropout, cfg.norm_first,
                      cfg.layer_norm_eps)
            for _ in range(n_layers)
        ])
        self.norm = nn.LayerNorm(cfg.d_model, cfg.layer_norm_eps) if cfg.norm_first else None

    def forward(self, x: mt.Tensor, *context, caches: list | None = None) -> mt.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x, *context) if caches is None else layer(x, *context, cache=caches[i])
        return self.norm(x) if self.norm is not None else x


class Encoder(LayerStack):
    """N encoder layers: forward(x (B, Ts, d), src_mask) -> (B, Ts, d)."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__(EncoderLayer, cfg.n_encoder_layers, cfg)


class Decoder(LayerStack):
    """N decoder layers: forward(y (B, Tt, d), memory, tgt_mask, src_mask) -> (B, Tt, d)."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__(DecoderLayer, cfg.n_decoder_layers, cfg)


class Transformer(nn.Module):
    """The full model: embed + position -> encoder; embed + position -> decoder -> logits.

    ``model(src_ids (B, Ts), tgt_in_ids (B, Tt)) -> logits (B, Tt, V_tgt)``, where tgt_in is
    the target shifted right (starting with bos). Padding (``cfg.pad_id``) is masked out of
    every attention; the decoder's self-attention is also causal.

    With ``share_embeddings`` one (V, d_model) matrix E serves as source embedding, target
    embedding and pre-softmax projection (logits = h Eᵀ), Section 3.4. Otherwise the source
    has its own embedding and the target embedding is tied to the projection.
    """

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.cfg = cfg
        self.tgt_embed = ScaledEmbedding(cfg.target_vocab_size, cfg.d_model)
        self.src_embed = self.tgt_embed if cfg.share_embeddings else ScaledEmbedding(cfg.vocab_size, cfg.d_model)
        self.src_pos = PositionalEncoding(cfg.d_model, cfg.max_len, cfg.dropout, cfg.positional)
        self.tgt_pos = (PositionalEncoding(cfg.d_model, cfg.max_len, cfg.dropout, cfg.positional)
                        if cfg.positional == "learned" else self.src_pos)
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg)

    # ------------------------------------------------------------------ the three stages
    def encode(self, src: mt.Tensor, src_mask: mt.Tensor | None = None) -> mt.Tensor:
        """src ids (B, Ts) -> memory (B, Ts, d_model)."""
        src = self.as_ids(src)
        if src_mask is None:
            src_mask = padding_mask(src, self.cfg.pad_id)
        return self.encoder(self.src_pos(self.src_embed(src)), src_mask)

    def decode(self, tgt_in: mt.Tensor, memory: mt.Tensor, src_mask: mt.Tensor | None,
               tgt_mask: mt.Tensor | None = None, cache: list | None = None) -> mt.Tensor:
        """target-so-far ids (B, Tt) and memory -> decoder states (B, Tt, d_model).

        Incremental decoding: pass ``cache=model.new_cache()`` and, at each step, only the
        newest tokens (B, 1); the cache remembers the earlier positions (keys and values of
        every decoder self-attention, the projected memory of every cross-attention).
        """
        tgt_in = self.as_ids(tgt_in)
        if cache is None:
            if tgt_mask is None:
                tgt_mask = target_mask(tgt_in, self.cfg.pad_id)
            return self.decoder(self.tgt_pos(self.tgt_embed(tgt_in)), memory, tgt_mask, src_mask)
        offset = cache[0].get("length", 0) if cache else 0
        new = tgt_in.shape[1]
        # the new tokens see every earlier position and, among themselves, the causal triangle
        causal = causal_mask(new, tgt_in.device, offset) if new > 1 else None
        x = self.tgt_pos(self.tgt_embed(tgt_in), offset=offset)
        out = self.decoder(x, memory, causal, src_mask, caches=cache)
        for c in cache:
            c["length"] = offset + tgt_in.shape[1]
        return out

    def new_cache(self) -> list:
        """An empty incremental-decoding cache: one dict per decoder layer."""
        return [{} for _ in self.decoder.layers]

    @staticmethod
    def reorder_cache(cache: list, index) -> None:
        """Keep/reorder the cached rows (batch axis) by ``index``, e.g. after a beam step."""
        for layer in cache:
            for part in ("self", "cross"):
                kv = layer.get(part)
                if kv:
                    for name in ("k", "v"):
                        kv[name] = mt.from_array(kv[name].data[index])

    def generator(self, h: mt.Tensor) -> mt.Tensor:
        """Decoder states (..., d_model) -> logits (..., V): the tied pre-softmax projection h Eᵀ."""
        return F.linear(h, self.tgt_embed.weight, transposed=True)  # h Eᵀ, its gradient in E's layout

    def forward(self, src: mt.Tensor, tgt_in: mt.Tensor, rows=None) -> mt.Tensor:
        """Logits (B, Tt, V); with ``rows`` (ids into the B·Tt flattened target positions) only
        those positions' logits, (len(rows), V). The loss skips pad targets, and the pre-softmax
        projection is the largest product of the model, so training asks only for the rest."""
        src, tgt_in = self.as_ids(src), self.as_ids(tgt_in)
        src_mask = padding_mask(src, self.cfg.pad_id)
        memory = self.encode(src, src_mask)
        h = self.decode(tgt_in, memory, src_mask)
        if rows is not None:
            h = h.reshape(-1, self.cfg.d_model)[self.as_ids(rows, 1, "rows must be a 1-D integer array of positions")]
        return self.generator(h)

    # ------------------------------------------------------------------ helpers
    def as_ids(self, ids, ndim: int = 2, what: str = "token ids must be an integer array of shape (batch, length)"):
        """``ids`` as an integer tensor with ``ndim`` axes on the model's device."""
        ids = ids if isinstance(ids, mt.Tensor) else mt.tensor(ids)
        if ids.ndim != ndim or ids.dtype.kind not in "iu":
            raise ValueError(f"{what}, got {ids.dtype} {ids.shape}")
        device = self.tgt_embed.weight.device
        return ids if ids.device == device else ids.to(device)

    def store_attention(self, on: bool = True) -> None:
        """Keep the last attention weights of every MultiHeadAttention (for plots)."""
        for m in self.modules():
            if isinstance(m, MultiHeadAttention):
                m.store_attention = on
                if not on:
                    m.attention = None
