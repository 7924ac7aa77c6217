"""The model's sub-layers in their fused forms: the speed layer's substitutions for what
``attention.py`` and ``layers.py`` write as the paper does.

- attention: Q, K and V of one input (K and V of the encoder's output) as one product,
  x [W^Q W^K W^V], which reads x once (:func:`minitensor.speed.fusions.linears`);
- feed-forward: max(0, x W_1 + b_1) with the bias and the max in one kernel on a GPU
  (:func:`~minitensor.speed.fusions.linear_relu`);
- post-norm residual: LayerNorm(x + Dropout(Sublayer(x))) as one kernel each way on a GPU
  (:func:`~minitensor.speed.fusions.dropout_add_layer_norm`).

:func:`fuse` gives a model's sub-layers these forms, or the written ones back: a subclass that
changes only how its forward computes, over the same parameters, so a checkpoint loads into
either. Training runs choose it with the setting ``fused`` (on by default);
``tests/transformer/test_fused.py`` proves the two forms agree in value and gradient.
"""
from __future__ import annotations

import minitensor as mt
from minitensor import nn
from minitensor.speed.fusions import dropout_add_layer_norm, linear_relu, linears

from .attention import MultiHeadAttention
from .layers import PositionwiseFeedForward, Residual


class FusedMultiHeadAttention(MultiHeadAttention):
    def projections(self, query: mt.Tensor, key: mt.Tensor, value: mt.Tensor) -> tuple:
        if key is query and value is query:  # self-attention: Q, K and V of one input
            return together(query, self.w_q, self.w_k, self.w_v)
        if value is key:                     # encoder-decoder attention: K and V of the memory
            return (self.w_q(query), *together(key, self.w_k, self.w_v))
        return super().projections(query, key, value)


def together(x: mt.Tensor, *layers: nn.Linear) -> tuple:
    """x through several linear layers in one product: x [W_1 … W_n] + [b_1 … b_n], cut into one
    output each."""
    return linears(x, [layer.weight for layer in layers], [layer.bias for layer in layers])


class FusedFeedForward(PositionwiseFeedForward):
    def forward(self, x: mt.Tensor) -> mt.Tensor:
        return self.w_2(self.dropout(linear_relu(x, self.w_1.weight, self.w_1.bias)))


class FusedResidual(Residual):
    def forward(self, x: mt.Tensor, sublayer) -> mt.Tensor:
        if self.norm_first:
            return super().forward(x, sublayer)
        return dropout_add_layer_norm(sublayer(x), x, self.norm.weight, self.norm.bias, self.dropout.p,
                                      self.training, self.norm.eps)


FUSED = {MultiHeadAttention: FusedMultiHeadAttention, PositionwiseFeedForward: FusedFeedForward,
         Residual: FusedResidual}
WRITTEN = {fused: written for written, fused in FUSED.items()}


def fuse(model: nn.Module, on: bool = True) -> nn.Module:
    """Give every sub-layer of ``model`` its fused form (``on``) or the form the paper writes
    (``on=False``), in place; returns ``model``. Only these classes change, not subclasses of
    them a user wrote."""
    table = FUSED if on else WRITTEN
    for module in model.modules():
        if type(module) in table:
            module.__class__ = table[type(module)]
    return model


def is_fused(model: nn.Module) -> bool:
    """Whether any sub-layer of ``model`` has its fused form."""
    return any(type(m) in WRITTEN for m in model.modules())
