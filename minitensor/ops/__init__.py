"""The differentiable primitives, one family per module.

Each op is a :class:`~minitensor.autograd.Function` with its forward and backward side
by side. ``minitensor.functional`` is the public face that calls them.

- ``elementwise``: + - * / ** neg exp log sqrt tanh relu sigmoid, where, masked_fill, cast
- ``reduce``: sum mean max logsumexp
- ``shape``: reshape transpose getitem concat stack broadcast_to, device moves
- ``linalg``: matmul, linear
- ``softmax``: softmax, log_softmax
- ``norm``: layer_norm
- ``dropout``, ``embedding``, ``loss`` (cross_entropy), ``attention`` (scaled dot-product)
"""
