"""Exercise 11 (lesson 11) — the feed-forward network, the residual sublayer, the encoder layer.

Write:
1. ``FeedForward.forward(x)``: FFN(x) = max(0, x W1 + b1) W2 + b2 (equation 2), with
   ``w_1`` and ``w_2`` and your engine's ``relu``.
2. ``Residual.forward(x, sublayer)``: LayerNorm(x + Dropout(sublayer(x))) (Section 5.4: the
   paper's post-norm), ``sublayer`` being a function of one Tensor.
3. ``EncoderLayer.forward(x, mask)``: self-attention as the first sublayer (``sub1``),
   the feed-forward network as the second (``sub2``). ``mask`` says which keys each query
   may see (padding).

Check it with:  python lessons/check.py 11
"""
from ex05_module_and_adam import Linear, Module
from ex06_init_and_dropout import dropout, xavier_uniform
from ex07_layer_norm import LayerNorm
from ex09_multi_head import MultiHeadAttention


class FeedForward(Module):
    def __init__(self, d_model, d_ff, rng):
        self.w_1, self.w_2 = Linear(d_model, d_ff, rng, xavier_uniform), Linear(d_ff, d_model, rng, xavier_uniform)

    def forward(self, x):
        raise NotImplementedError("exercise 11: write FeedForward.forward")


class Residual(Module):
    def __init__(self, d_model, p_drop, rng):
        self.norm, self.p_drop, self.rng = LayerNorm(d_model), p_drop, rng

    def forward(self, x, sublayer):
        raise NotImplementedError("exercise 11: write Residual.forward")


class EncoderLayer(Module):
    def __init__(self, d_model, h, d_ff, p_drop, rng):
        self.self_attn = MultiHeadAttention(d_model, h, rng)
        self.ffn = FeedForward(d_model, d_ff, rng)
        self.sub1, self.sub2 = Residual(d_model, p_drop, rng), Residual(d_model, p_drop, rng)

    def forward(self, x, mask):
        raise NotImplementedError("exercise 11: write EncoderLayer.forward")
