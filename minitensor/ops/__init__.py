"""The differentiable primitives, one family per module.

Each op is a :class:`~minitensor.autograd.Function` with its forward and backward side
by side, and directly under it the public function that checks its arguments and applies it
(``Softmax``, then ``softmax``). ``minitensor.functional`` lists the public functions.

- ``elementwise``: + - * / ** neg exp log sqrt tanh relu sigmoid, where, masked_fill, cast
- ``reduce``: sum mean max logsumexp
- ``shape``: reshape transpose permute getitem split concat stack broadcast_to, device moves
- ``linalg``: matmul, linear
- ``softmax``: softmax, log_softmax
- ``norm``: layer_norm
- ``dropout``, ``embedding``, ``loss`` (cross_entropy), ``attention`` (scaled dot-product)

These are the reference: plain array expressions on any device and dtype. Faster ways to
compute some of them live in the speed layer (``minitensor/speed/``), registered as routes
(:mod:`minitensor.routes`).
"""
