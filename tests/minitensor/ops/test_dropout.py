"""dropout (minitensor/ops/dropout.py): kept entries scaled by 1/(1 - p), the backward through the
same mask, and gradcheck under a fixed seed."""
import numpy as np

import minitensor as mt
import minitensor.functional as F

from ...helpers import close, leaf


def test_dropout_zeroes_or_scales_and_backward_uses_the_same_mask(device):
    mt.manual_seed(3)
    x = leaf(np.ones((200, 50)), device)
    y = F.dropout(x, 0.3, training=True)
    vals = np.unique(np.round(y.numpy(), 6))
    assert set(vals) <= {0.0, round(1 / 0.7, 6)}
    assert abs((y.numpy() == 0).mean() - 0.3) < 0.02          # about p of the entries dropped
    assert abs(y.numpy().mean() - 1.0) < 0.03                 # expectation preserved
    y.sum().backward()
    close(x.grad, y.numpy())                                  # dy/dx is the mask itself
    assert F.dropout(x, 0.3, training=False) is x             # identity in eval mode


def test_dropout_gradcheck_with_a_fixed_seed(device):
    x = leaf(np.random.default_rng(0).standard_normal((4, 5)), device)

    def f(u):
        mt.manual_seed(11)  # the same mask on every call
        return F.dropout(u, 0.4, training=True)

    assert mt.gradcheck(f, [x])
