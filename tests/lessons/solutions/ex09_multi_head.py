"""Exercise 09 (lesson 9) — multi-head attention (Section 3.2.2).

MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O with head_i = Attention(Q W^Q_i, K W^K_i,
V W^V_i). The h projections W^Q_i (d_model × d_k) sit side by side in one d_model × d_model
``w_q`` (likewise ``w_k``, ``w_v``), so one product projects every head; the heads are then the
h slices of width d_k = d_model / h of its last axis.

Write:
1. ``split_heads(x, h)``: (B, T, d_model) -> (B, h, T, d_k), head i being the entries
   i·d_k ... (i + 1)·d_k − 1 of the last axis.
2. ``merge_heads(x)``: the inverse, (B, h, T, d_k) -> (B, T, h·d_k): the Concat.
3. ``MultiHeadAttention.forward(query, key, value, mask=None)``: project, split, attend with
   your ``attention`` (exercise 08), merge, project with ``w_o``. ``mask`` is None or a bool
   array that broadcasts to the scores (B, h, T_q, T_k): (T_q, T_k) for a causal mask,
   (B, 1, 1, T_k) for padding, True where a query may see a key.

Check it with:  python lessons/check.py 09
"""
from ex05_module_and_adam import Linear, Module
from ex06_init_and_dropout import xavier_uniform
from ex08_attention import attention


def split_heads(x, h):
    # >>> exercise: write split_heads
    B, T, d = x.shape
    return x.reshape(B, T, h, d // h).transpose(0, 2, 1, 3)
    # <<<


def merge_heads(x):
    # >>> exercise: write merge_heads
    B, h, T, d_k = x.shape
    return x.transpose(0, 2, 1, 3).reshape(B, T, h * d_k)
    # <<<


class MultiHeadAttention(Module):
    def __init__(self, d_model, h, rng):
        self.h = h
        self.w_q, self.w_k, self.w_v, self.w_o = (Linear(d_model, d_model, rng, xavier_uniform) for _ in range(4))

    def forward(self, query, key, value, mask=None):
        # >>> exercise: write MultiHeadAttention.forward
        q, k, v = (split_heads(lin(x), self.h) for lin, x in ((self.w_q, query), (self.w_k, key), (self.w_v, value)))
        return self.w_o(merge_heads(attention(q, k, v, mask)))
        # <<<
