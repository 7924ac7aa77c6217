"""gradcheck itself: it passes correct backwards and catches broken ones (the check can fail)."""
import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F
from minitensor.autograd import Function
from minitensor.ops.norm import LayerNorm
from minitensor.ops.softmax import Softmax

from ..helpers import leaf


class BrokenSoftmax(Softmax):
    """A scratch copy of softmax whose backward forgets the Σ_j g_j y_j term's weighting:
    it subtracts the plain mean of g instead. For g = 1 both give 0, so only a random
    cotangent exposes it."""

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved
        return y * (grad - grad.mean(axis=ctx.axis, keepdims=True))


class BrokenLayerNorm(LayerNorm):
    """A scratch copy of layer_norm's backward that drops the x̂·mean(ĝ x̂) term."""

    @staticmethod
    def backward(ctx, grad):
        xhat, r, weight = ctx.saved
        gx = r * (grad - grad.mean(axis=-1, keepdims=True))
        return gx, None, None


def test_gradcheck_reports_a_wrong_softmax_backward_with_the_worst_entry():
    x = leaf(np.random.default_rng(0).standard_normal((3, 4)))
    with pytest.raises(mt.GradcheckError, match=r"input 0 \(shape \(3, 4\)\): worst entry \(\d, \d\): analytic .* numeric"):
        mt.gradcheck(lambda u: BrokenSoftmax.apply(u, axis=-1), [x])
    assert mt.gradcheck(lambda u: BrokenSoftmax.apply(u, axis=-1), [x], raise_exception=False) is False
    assert mt.gradcheck(lambda u: F.softmax(u, axis=-1), [x])


def test_checking_only_the_gradient_of_the_sum_would_miss_the_broken_softmax():
    x = leaf(np.random.default_rng(0).standard_normal((3, 4)))
    BrokenSoftmax.apply(x, axis=-1).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 0.0, atol=1e-12)  # same as the true gradient of sum(softmax)


def test_gradcheck_reports_a_wrong_layer_norm_backward():
    x = leaf(np.random.default_rng(1).standard_normal((2, 5)))
    with pytest.raises(mt.GradcheckError, match="input 0"):
        mt.gradcheck(lambda u: BrokenLayerNorm.apply(u, None, None, eps=1e-5), [x])
    assert mt.gradcheck(lambda u: F.layer_norm(u), [x])


def test_gradcheck_names_the_failing_input_among_several():
    class WrongSecond(Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return a * b

        @staticmethod
        def backward(ctx, grad):
            a, b = ctx.saved
            return grad * b, grad * a * 1.01  # 1% off for b only

    a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    with pytest.raises(mt.GradcheckError, match=r"input 1 \(shape \(2,\)\)") as info:
        mt.gradcheck(WrongSecond.apply, [a, b])
    assert "input 0" not in str(info.value)


def test_gradcheck_leaves_existing_grads_untouched():
    x = leaf([1.0, 2.0])
    x.grad = mt.tensor(np.array([7.0, 7.0]))
    assert mt.gradcheck(F.exp, [x])
    np.testing.assert_array_equal(x.grad.numpy(), [7.0, 7.0])
