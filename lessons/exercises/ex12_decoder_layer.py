"""Exercise 12 (lesson 12) — the decoder layer, and its cached step for decoding.

Write:
1. ``DecoderLayer.forward(x, memory, tgt_mask, src_mask)``: three sublayers (Section 3.1):
   masked self-attention (``sub1``: ``tgt_mask`` keeps each position from seeing later
   ones), attention over the encoder's output ``memory`` (``sub2``: ``src_mask`` hides its
   padding), the feed-forward network (``sub3``).
2. ``DecoderLayer.step(x, memory, src_mask, cache)``: the same layer for one new position
   x (B, 1, d_model) when the earlier positions went through it before. ``cache`` is a dict,
   empty at the first position. Self-attention needs the keys and values of every position
   so far: project the new position's key and value, append them (along the positions axis,
   ``concat``) to ``cache["k"]`` and ``cache["v"]`` (split into heads: (B, h, t, d_k)),
   store the results back, and let the new query attend to all of them: no mask is needed,
   since nothing later exists yet. The output must equal position t of ``forward`` over
   the whole sequence so far.

Check it with:  python lessons/check.py 12
"""
from ex02_broadcasting import concat
from ex05_module_and_adam import Module
from ex08_attention import attention
from ex09_multi_head import MultiHeadAttention, merge_heads, split_heads
from ex11_encoder_layer import FeedForward, Residual


class DecoderLayer(Module):
    def __init__(self, d_model, h, d_ff, p_drop, rng):
        self.self_attn = MultiHeadAttention(d_model, h, rng)
        self.cross_attn = MultiHeadAttention(d_model, h, rng)
        self.ffn = FeedForward(d_model, d_ff, rng)
        self.sub1, self.sub2, self.sub3 = (Residual(d_model, p_drop, rng) for _ in range(3))

    def forward(self, x, memory, tgt_mask, src_mask):
        raise NotImplementedError("exercise 12: write DecoderLayer.forward")

    def step(self, x, memory, src_mask, cache):
        raise NotImplementedError("exercise 12: write DecoderLayer.step")
