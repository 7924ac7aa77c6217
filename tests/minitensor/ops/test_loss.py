"""cross_entropy (minitensor/ops/loss.py): the label-smoothed formula, gradcheck, the in-place
form over its logits, and the mean over the targets that count."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import minitensor as mt
import minitensor.functional as F
from minitensor.testing import arrays, shapes

from ...helpers import close, leaf
from .test_softmax import np_softmax


def np_cross_entropy(logits, target, ignore_index, eps, reduction):
    V = logits.shape[-1]
    logp = np.log(np_softmax(logits))
    valid = target != ignore_index if ignore_index is not None else np.ones(target.shape, bool)
    t = np.where(valid, target, 0)
    q = (1 - eps) * np.eye(V)[t] + eps / V     # PyTorch's smoothed target
    loss = -(q * logp).sum(-1) * valid
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / valid.sum()


@given(data=st.data(), eps=st.sampled_from([0.0, 0.1, 0.3]), reduction=st.sampled_from(["mean", "sum", "none"]),
       ignore=st.booleans())
def test_cross_entropy_matches_smoothed_formula_and_gradcheck(data, eps, reduction, ignore, device):
    lead = data.draw(shapes(min_dims=1, max_dims=2, max_side=4))
    V = data.draw(st.integers(2, 6))
    logits = data.draw(arrays(lead + (V,), -3, 3))
    target = np.random.default_rng(data.draw(st.integers(0, 99))).integers(0, V, lead)
    ignore_index = 0 if ignore else None
    if ignore:
        target.flat[0] = 1 % V if V > 1 else 0  # keep at least one target counted
    tl = leaf(logits, device)
    tt = mt.tensor(target, device=device)
    kw = dict(ignore_index=ignore_index, label_smoothing=eps, reduction=reduction)
    close(F.cross_entropy(tl, tt, **kw), np_cross_entropy(logits, target, ignore_index, eps, reduction))
    assert mt.gradcheck(lambda u: F.cross_entropy(u, tt, **kw), [tl])


@given(data=st.data(), eps=st.sampled_from([0.0, 0.1]), reduction=st.sampled_from(["mean", "sum", "none"]))
def test_cross_entropy_over_its_logits_gives_the_same_loss_and_gradient_in_their_memory(data, eps, reduction, device):
    """overwrite=True: the loss and the gradient are those of the plain op, the gradient is
    computed in the logits' own array, and a second backward is refused, not wrong."""
    lead = data.draw(shapes(min_dims=1, max_dims=2, max_side=4))
    V = data.draw(st.integers(2, 6))
    logits = data.draw(arrays(lead + (V,), -3, 3))
    target = mt.tensor(np.random.default_rng(data.draw(st.integers(0, 99))).integers(0, V, lead), device=device)
    kw = dict(label_smoothing=eps, reduction=reduction)
    cot = np.random.default_rng(0).standard_normal(lead) if reduction == "none" else None
    plain, reused = leaf(logits, device), leaf(logits, device)
    through_plain, through_reused = plain * 1.0, reused * 1.0   # the logits an op made: a temporary
    want = F.cross_entropy(through_plain, target, **kw)
    got = F.cross_entropy(through_reused, target, overwrite=True, **kw)
    close(got, want.numpy())
    want.backward(cot, retain_graph=True)
    got.backward(cot, retain_graph=True)
    close(reused.grad, plain.grad.numpy())
    close(through_reused, plain.grad.numpy())  # its memory now holds the gradient (x·1.0: the same)
    with pytest.raises(mt.GraphError, match="only once"):
        got.backward(cot)


def test_cross_entropy_mean_counts_only_non_ignored_targets():
    logits = leaf(np.zeros((1, 4, 5)))
    target = mt.tensor(np.array([[2, 0, 0, 3]]))
    loss = F.cross_entropy(logits, target, ignore_index=0)
    close(loss, np.log(5.0))  # two counted targets, each log 5; the mean is over 2, not 4
    loss.backward()
    close(logits.grad[0, 1], np.zeros(5))
