"""One training step of the Transformer in its fused form (what a training run uses) with the
hand-written kernels on, run on the CPU emulator of CUDA, against the plain NumPy path: the same
loss and the same gradients.

This is the end-to-end check that the GPU routes (LayerNorm kernels, dropout + residual +
LayerNorm, the feed-forward's bias + ReLU, the fused attention softmax, flash attention) compute what the NumPy code computes inside a real model.
"""
import numpy as np
import pytest

import minitensor as mt
from minitensor import cuda
from minitensor.cuda import emulator
from transformer import Transformer, TransformerConfig, fuse
from transformer.loss import label_smoothed_loss

from ...helpers import require, translation_batch


def _step(cfg, batch, emulate: bool):
    """Loss and gradients of one training step from the same initial weights."""
    mt.manual_seed(0)
    model = fuse(Transformer(cfg))
    src, tgt_in, tgt_out = (mt.tensor(a) for a in batch)
    with cuda.emulate(emulate):
        mt.manual_seed(1)                      # the same dropout masks on both paths
        loss = label_smoothed_loss(model(src, tgt_in), tgt_out, cfg.pad_id, 0.1)
        loss.backward()
    return loss.item(), {n: p.grad.numpy().copy() for n, p in model.named_parameters()}


@pytest.mark.parametrize("attention,dropout", [("fused", 0.1), ("flash", 0.0)])
def test_one_emulated_kernel_step_matches_the_numpy_path(attention, dropout, monkeypatch):
    ok, why = emulator.available()
    require(ok, f"the CUDA emulator cannot run here: {why}")
    # dropout's kernel draws its masks from Philox, the NumPy path from NumPy's generator: here
    # both draw NumPy's, so that the masks agree and the other kernels are compared (the dropout
    # kernel is compared with its reference in test_kernels.py)
    monkeypatch.setattr(cuda.launcher("dropout"), "applies", lambda dtype, p: False)
    ln = cuda.launcher("layer_norm")
    if dropout:  # the fused dropout + residual + LayerNorm draws Philox's masks too: off here, on at p = 0
        real_applies = ln.applies
        monkeypatch.setattr(ln, "applies", lambda x, w, b, sub=None: sub is None and real_applies(x, w, b))
    cfg = TransformerConfig(vocab_size=37, d_model=32, n_heads=4, d_ff=64, n_encoder_layers=2, n_decoder_layers=2,
                            dropout=dropout, max_len=64)
    batch = translation_batch(np.random.default_rng(0))
    cuda.set_attention(attention)
    try:
        before = dict(emulator.launches)
        loss_k, grads_k = _step(cfg, batch, emulate=True)
        ran = {e: n - before.get(e, 0) for e, n in emulator.launches.items() if n > before.get(e, 0)}
        loss_np, grads_np = _step(cfg, batch, emulate=False)
    finally:
        cuda.set_attention("auto")
    # the kernel routes really ran: LayerNorm and the feed-forward's bias + ReLU both ways, and
    # the chosen attention kernels
    kernels = ["layer_norm_forward", "layer_norm_backward", "bias_relu_forward", "bias_relu_backward"]
    if not dropout:  # the post-norm sub-layers' dropout + residual + LayerNorm, fused
        kernels = ["residual_" + k for k in kernels[:2]] + kernels[2:]
    for kernel in kernels:
        assert any(e.startswith(kernel + "<float") for e in ran), kernel
    wanted = ("flash_attention_forward<float", "flash_attention_backward_dq<float") if attention == "flash" else \
        ("attention_softmax_forward<float", "attention_softmax_backward<float")
    assert all(any(e.startswith(w) for e in ran) for w in wanted), ran
    assert loss_k == pytest.approx(loss_np, rel=1e-5)
    typical = np.median([np.linalg.norm(g) for g in grads_np.values()])
    for name, g in grads_np.items():
        if name.endswith("w_k.bias"):
            # softmax ignores a shift shared by a query's scores, and q·b_k is one: the key
            # bias gets no gradient at all, only round-off (~1e-9), different on each path
            assert max(np.linalg.norm(g), np.linalg.norm(grads_k[name])) < 1e-6 * typical, name
        else:
            assert np.linalg.norm(grads_k[name] - g) <= 1e-5 * np.linalg.norm(g), name
