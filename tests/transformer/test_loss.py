"""The training loss (transformer/loss.py): batch_loss's pad-skipping form equals the plain
label-smoothed loss, gradients included, and passes gradcheck."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import minitensor as mt
from transformer import Transformer, label_smoothed_loss
from transformer.loss import batch_loss

from .helpers import f64, tiny_config



@given(seed=st.integers(0, 999), smoothing=st.sampled_from([0.0, 0.1]), reduction=st.sampled_from(["sum", "mean"]),
       pads=st.lists(st.integers(0, 4), min_size=3, max_size=3))
@settings(max_examples=10)
def test_batch_loss_skipping_pad_logits_equals_the_plain_loss_and_its_gradients(seed, smoothing, reduction, pads):
    mt.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = f64(Transformer(tiny_config()))
    src = rng.integers(3, 7, (3, 4))
    tgt = rng.integers(3, 7, (3, 6))
    for i, n in enumerate(pads):  # trailing pad in each target, up to a wholly padded row
        tgt[i, 6 - n:] = 0
    ti, to = tgt[:, :-1], tgt[:, 1:]
    grads = []
    for loss_of in (lambda: label_smoothed_loss(model(src, ti), mt.tensor(to), 0, smoothing, reduction),
                    lambda: batch_loss(model, src, ti, to, 0, smoothing, reduction)):
        model.zero_grad()
        loss = loss_of()
        loss.backward()
        grads.append((loss.item(), [p.grad.numpy().copy() for p in model.parameters()]))
    (plain, plain_grads), (skipped, skipped_grads) = grads
    np.testing.assert_allclose(skipped, plain, rtol=1e-12)
    for a, b in zip(plain_grads, skipped_grads):
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-14)


def test_batch_loss_gradcheck(device):
    mt.manual_seed(3)
    rng = np.random.default_rng(3)
    model = f64(Transformer(tiny_config())).to(device)
    src = rng.integers(3, 7, (2, 3))
    tgt = rng.integers(3, 7, (2, 5))
    tgt[1, 3:] = 0
    s, ti = mt.tensor(src, device=device), mt.tensor(tgt[:, :-1], device=device)
    assert mt.gradcheck(lambda *ps: batch_loss(model, s, ti, tgt[:, 1:], 0, 0.1, "mean"), model.parameters())
