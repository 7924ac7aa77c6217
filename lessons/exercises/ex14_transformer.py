"""Exercise 14 (lesson 14) — the whole model, with shared embeddings (Sections 3.1, 3.4).

Write:
1. ``padding_mask(ids, pad)``: ids an integer array (B, T) -> a (B, 1, 1, T) bool array, True
   at the keys that are not padding (it broadcasts over heads and queries).
2. ``target_mask(ids, pad)``: (B, T) -> (B, 1, T, T), True where query i may attend to key j:
   j ≤ i (causal, exercise 08) and key j not padding (the keys only, as in ``padding_mask``).
3. The model, one table E (``embed.weight``) for source and target as in Section 3.4, the
   stacks ``encoder`` and ``decoder`` (lists of layers):
   - ``Transformer.encode(src)``: embed ``src`` (``embed``) and run the encoder stack with
     ``src``'s padding mask; returns the memory (B, T_src, d_model).
   - ``Transformer.decode(tgt_in, memory, src_mask)``: embed ``tgt_in`` and run the decoder
     stack with ``tgt_in``'s target mask; returns the stack's output h (B, T_tgt, d_model),
     before the generator.
   - ``Transformer.generator(h)``: the logits h Eᵀ (..., V), with the same table E.
   - ``Transformer.forward(src, tgt_in)``: the three above; returns logits (B, T_tgt, V).

The names of the parameters are minitensor's (``tgt_embed.weight``, ``encoder.layers.0.
self_attn.w_q.weight``, ...) so that the grader can load the same weights into both models.

Check it with:  python lessons/check.py 14
"""
import numpy as np

from ex05_module_and_adam import Module
from ex08_attention import causal_mask
from ex10_positions import Embeddings
from ex11_encoder_layer import EncoderLayer
from ex12_decoder_layer import DecoderLayer


def padding_mask(ids, pad):
    raise NotImplementedError("exercise 14: write padding_mask")


def target_mask(ids, pad):
    raise NotImplementedError("exercise 14: write target_mask")


class Stack(Module):
    def __init__(self, layers):
        self.layers = layers


class Transformer(Module):
    def __init__(self, vocab, d_model=64, h=4, d_ff=128, n_layers=2, p_drop=0.0, max_len=64, pad=0, seed=0):
        rng = np.random.default_rng(seed)
        self.pad = pad
        self.tgt_embed = Embeddings(vocab, d_model, max_len, p_drop, rng)
        self.encoder = Stack([EncoderLayer(d_model, h, d_ff, p_drop, rng) for _ in range(n_layers)])
        self.decoder = Stack([DecoderLayer(d_model, h, d_ff, p_drop, rng) for _ in range(n_layers)])

    @property
    def embed(self):
        return self.tgt_embed

    def encode(self, src):
        raise NotImplementedError("exercise 14: write Transformer.encode")

    def decode(self, tgt_in, memory, src_mask):
        raise NotImplementedError("exercise 14: write Transformer.decode")

    def generator(self, h):
        raise NotImplementedError("exercise 14: write Transformer.generator")

    def forward(self, src, tgt_in):
        raise NotImplementedError("exercise 14: write Transformer.forward")
