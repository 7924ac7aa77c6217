"""The fused forms of the sub-layers (transformer/fused.py) against the forms the paper writes
(transformer/attention.py, layers.py): the same logits and the same gradient of every parameter,
in training with dropout and in evaluation, post-norm and pre-norm; the same greedy decoding with
its caches; the same parameters, so one checkpoint loads into both; and only the fused form runs
an op with several outputs."""
import numpy as np
import pytest

import minitensor as mt
from minitensor import autograd
from transformer import Transformer, fuse, label_smoothed_loss
from transformer.decoding import greedy_decode
from transformer.fused import FUSED, is_fused

from .helpers import tiny_config


def forward_backward(model, src, tgt, seed):
    """(logits, {name: gradient}) of the label-smoothed loss, dropout drawn from ``seed``."""
    mt.manual_seed(seed)
    model.zero_grad()
    logits = model(mt.tensor(src), mt.tensor(tgt[:, :-1]))
    label_smoothed_loss(logits, mt.tensor(tgt[:, 1:]), pad_id=0, smoothing=0.1).backward()
    return logits.numpy(), {n: p.grad.numpy() for n, p in model.named_parameters()}


def twins(**config):
    """The written model and a fused copy with its weights (float64)."""
    mt.manual_seed(3)
    written = Transformer(tiny_config(**config)).astype(np.float64)
    fused = fuse(Transformer(tiny_config(**config)).astype(np.float64))
    fused.load_state_dict(written.state_dict())
    return written, fused


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
@pytest.mark.parametrize("training", [True, False], ids=["training", "evaluation"])
def test_fused_and_written_forms_give_the_same_logits_and_gradients(norm_first, training):
    written, fused = twins(dropout=0.3, d_ff=16, n_encoder_layers=2, n_decoder_layers=2, norm_first=norm_first)
    rng = np.random.default_rng(0)
    src, tgt = rng.integers(3, 7, (3, 5)), rng.integers(3, 7, (3, 6))
    src[1, 3:] = 0
    tgt[2, 4:] = 0
    results = [forward_backward(m.train(training), src, tgt, seed=11) for m in (written, fused)]
    (a, ga), (b, gb) = results
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    assert ga.keys() == gb.keys() and len(ga) == len(list(written.parameters()))
    for name in ga:
        np.testing.assert_allclose(ga[name], gb[name], rtol=1e-10, atol=1e-12, err_msg=name)
    other = forward_backward(written, src, tgt, seed=12)[0]  # (the dropout masks do matter in training)
    assert np.array_equal(other, a) != training


def test_greedy_decoding_with_its_caches_is_the_same_in_both_forms():
    written, fused = twins()
    src = mt.tensor(np.random.default_rng(1).integers(3, 7, (4, 6)))
    np.testing.assert_array_equal(greedy_decode(written, src, max_len=9), greedy_decode(fused, src, max_len=9))


def test_fuse_changes_only_the_classes_of_the_sub_layers_and_back():
    model = Transformer(tiny_config())
    names = [n for n, _ in model.named_parameters()]
    before = {n: id(p) for n, p in model.named_parameters()}
    assert not is_fused(model)
    assert fuse(model) is model and is_fused(model)
    kinds = {type(m) for m in model.modules()}
    assert set(FUSED.values()) <= kinds and not set(FUSED) & kinds
    assert {n: id(p) for n, p in model.named_parameters()} == before and [n for n, _ in model.named_parameters()] == names
    fuse(model, on=False)
    assert not is_fused(model) and set(FUSED) <= {type(m) for m in model.modules()}


def test_only_the_fused_form_runs_an_op_with_several_outputs(monkeypatch):
    """The written model's forward and backward make no multi-output node (Q, K and V are three
    products); the fused one makes one per Q/K/V projection of one input."""
    made = []
    node = autograd.Output.node
    monkeypatch.setattr(autograd.Output, "node", staticmethod(lambda *a: made.append(1) or node(*a)))
    written, fused = twins()
    rng = np.random.default_rng(0)
    src, tgt = rng.integers(3, 7, (2, 4)), rng.integers(3, 7, (2, 5))
    forward_backward(written.train(), src, tgt, seed=1)
    assert made == []
    forward_backward(fused.train(), src, tgt, seed=1)
    assert len(made) == 3 * 2 + 2  # encoder and decoder self-attention (Q, K, V), cross-attention (K, V)
