"""Exercise 10 (lesson 10) — token embeddings and sinusoidal positions (Sections 3.4, 3.5).

Write:
1. ``sinusoidal_table(T, d)``: the (T, d) float64 array PE with
   PE(pos, 2i) = sin(pos / 10000^(2i/d)) and PE(pos, 2i+1) = cos(pos / 10000^(2i/d)), for
   every column 0 … d − 1 (an odd d ends with a sine column of its own).
2. ``Embedding``, a Function of the table W (V, d) with integer ``ids`` of any shape, called
   as ``Embedding.apply(W, ids=ids)``: ids by keyword, a parameter and not an input (it needs
   no gradient, and ``backward`` returns one gradient, W's). Forward returns the rows W[ids]
   (shape ids.shape + (d,)); backward returns W's gradient: the gradient of every output row
   added into the row of W it came from (an id that occurs twice gets both rows' gradients:
   ``np.add.at``).
3. ``Embeddings.forward(ids, offset=0)``, ids an integer array (B, T): the paper's input to
   a stack, W[ids] · √d plus the positions offset ... offset + T − 1 of the table, then
   dropout (exercise 06's ``dropout``, with the module's ``p_drop``, ``rng`` and
   ``training``), in the table's dtype (a float32 ``weight`` gives a float32 output).
   ``offset`` is for decoding one position at a time (exercise 12).

Check it with:  python lessons/check.py 10
"""
import numpy as np

from ex01_tensor import Function, Tensor
from ex05_module_and_adam import Module, Parameter
from ex06_init_and_dropout import dropout


def sinusoidal_table(T, d):
    # >>> exercise: write sinusoidal_table
    angle = np.arange(T)[:, None] / 10000.0 ** (np.arange(0, d, 2) / d)
    table = np.zeros((T, d))
    table[:, 0::2] = np.sin(angle)
    table[:, 1::2] = np.cos(angle[:, : d // 2])
    return table
    # <<<


class Embedding(Function):
    def forward(self, weight, ids):
        # >>> exercise: write Embedding.forward
        self.shape, self.ids = weight.shape, ids
        return weight[ids]
        # <<<

    def backward(self, grad):
        # >>> exercise: write Embedding.backward
        g = np.zeros(self.shape, grad.dtype)
        np.add.at(g, self.ids, grad)
        return (g,)
        # <<<


class Embeddings(Module):
    """The shared token table ``weight`` (V, d), N(0, 1/d) at the start, and the positions."""

    def __init__(self, vocab, d, max_len, p_drop, rng):
        self.weight = Parameter(rng.normal(0.0, d**-0.5, size=(vocab, d)))
        self.table, self.p_drop, self.rng = sinusoidal_table(max_len, d), p_drop, rng

    def forward(self, ids, offset=0):
        # >>> exercise: write Embeddings.forward
        ids = np.asarray(ids)
        d = self.weight.shape[1]
        positions = self.table[offset:offset + ids.shape[-1]].astype(self.weight.dtype)
        x = Embedding.apply(self.weight, ids=ids) * np.sqrt(d) + Tensor(positions)
        return dropout(x, self.p_drop, self.rng, self.training)
        # <<<
