"""Mixed precision: 16-bit matrix products under autocast with float32 gradients for float32
parameters, reductions widened to float32, and dynamic loss scaling that skips overflowing
updates. On the CPU these run on NumPy's float16; the same code runs on CuPy."""
import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F
from minitensor import amp, nn


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def test_autocast_runs_products_in_float16_and_hands_float32_parameters_float32_gradients():
    rng = np.random.default_rng(0)
    x = mt.tensor(_f32(rng, 6, 8), requires_grad=True)
    w, b = mt.tensor(_f32(rng, 8, 5), requires_grad=True), mt.tensor(_f32(rng, 5), requires_grad=True)
    v = mt.tensor(_f32(rng, 5, 3), requires_grad=True)
    with amp.autocast("float16"):
        h = F.linear(x, w, b)
        y = F.matmul(h, v)
        assert h.dtype == np.float16 and y.dtype == np.float16
    assert F.linear(x, w, b).dtype == np.float32  # back to float32 outside the block
    g = _f32(rng, 6, 3)
    y.backward(mt.tensor(g.astype(np.float16)))
    assert all(t.grad.dtype == np.float32 for t in (x, w, b, v))
    # the same gradients as in float32, to float16 precision
    x32, w32, b32, v32 = (mt.tensor(t.numpy(), requires_grad=True) for t in (x, w, b, v))
    F.matmul(F.linear(x32, w32, b32), v32).backward(mt.tensor(g.astype(np.float16).astype(np.float32)))
    for t, ref in ((x, x32), (w, w32), (b, b32), (v, v32)):
        np.testing.assert_allclose(t.grad.numpy(), ref.grad.numpy(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("fused", [False, True], ids=["written", "fused"])
def test_under_autocast_every_products_backward_gets_a_float16_gradient(fused, monkeypatch):
    """A gradient has its tensor's dtype: a float16 Linear output summed with a float32 residual
    gets a float16 gradient, so the backward's two products run in float16, not in float32 (the
    mixed-dtype product that NumPy and CuPy would otherwise widen); in the model as written and
    in its fused form."""
    from minitensor.ops import linalg
    from minitensor.speed import fusions
    from transformer import Transformer, TransformerConfig, fuse, label_smoothed_loss

    seen = []
    for op in (linalg.Linear, fusions.Linears, linalg.Matmul):
        def spy(ctx, grad, _backward=op.backward):
            grads = grad if isinstance(grad, tuple) else (grad,)   # Linears: one per output
            seen.append(tuple(g.dtype for g in grads) + tuple(a.dtype for a in ctx.saved))
            return _backward(ctx, grad)
        monkeypatch.setattr(op, "backward", staticmethod(spy))
    mt.manual_seed(0)
    model = fuse(Transformer(TransformerConfig(vocab_size=40, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1,
                                               n_decoder_layers=1)), fused)
    rng = np.random.default_rng(0)
    src, tgt = rng.integers(3, 40, (3, 5)), rng.integers(3, 40, (3, 6))
    with amp.autocast("float16"):
        loss = label_smoothed_loss(model(mt.tensor(src), mt.tensor(tgt[:, :-1])), mt.tensor(tgt[:, 1:]), 0, 0.1)
    loss.backward()
    # 3 + 3 + 3 projections (fused: Q, K, V in one product twice and the memory's K, V in one),
    # 3 output projections, 2 + 2 feed-forward products, the output layer, and attention's products
    assert len(seen) >= (12 if fused else 16)
    assert all(dt == np.float16 for row in seen for dt in row), sorted(set(seen))
    assert all(p.grad.dtype == np.float32 for p in model.parameters() if p.grad is not None)


def test_autocast_disabled_is_a_no_op_and_bad_dtypes_are_refused():
    with amp.autocast("float16", enabled=False):
        assert amp.autocast_dtype() is None
        assert F.linear(mt.ones(2, 3), mt.ones(3, 4)).dtype == np.float32
    with pytest.raises(ValueError, match="float16"):
        amp.autocast("float8")


def test_cross_entropy_and_layer_norm_widen_float16_inputs_to_float32():
    rng = np.random.default_rng(1)
    logits16 = mt.tensor((_f32(rng, 4, 7, 50) * 8).astype(np.float16), requires_grad=True)
    target = rng.integers(0, 50, (4, 7))
    loss = F.cross_entropy(logits16, target, label_smoothing=0.1, reduction="sum")
    assert loss.dtype == np.float32
    ref = F.cross_entropy(mt.tensor(logits16.numpy().astype(np.float64)), target, label_smoothing=0.1, reduction="sum")
    assert abs(loss.item() - ref.item()) < 1e-4 * abs(ref.item())  # float32 accuracy on float16 inputs
    loss.backward()
    assert logits16.grad.dtype == np.float16
    x16 = (_f32(rng, 5, 64) * 100 + 1000).astype(np.float16)  # a float16 variance would lose the signal
    y = F.layer_norm(mt.tensor(x16), mt.ones(64, dtype=np.float16), mt.zeros(64, dtype=np.float16))
    x64 = x16.astype(np.float64)
    expected = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.numpy().astype(np.float64), expected, atol=4e-3)


def test_loss_scaler_skips_on_overflow_backs_off_and_grows_after_clean_steps():
    s = amp.LossScaler(init_scale=1024.0, growth_interval=3)
    p = nn.Parameter(np.zeros(4, dtype=np.float32))
    p.grad = mt.tensor(np.array([1024.0, 2048.0, -512.0, 0.0], dtype=np.float32))
    assert s.unscale_([p], extra=0.5)
    np.testing.assert_array_equal(p.grad.numpy(), [0.5, 1.0, -0.25, 0.0])  # divided by scale, times extra
    for bad in (np.inf, np.nan):
        p.grad = mt.tensor(np.array([1.0, bad, 0, 0], dtype=np.float32))
        assert not s.unscale_([p])
    s.update(found_overflow=True)
    assert s.scale == 512.0 and s.skipped == 1
    for _ in range(3):
        s.update(found_overflow=False)
    assert s.scale == 1024.0 and s.good_steps == 0
    restored = amp.LossScaler()
    restored.load_state_dict(s.state_dict())
    assert restored.state_dict() == s.state_dict()


def test_loss_scaler_backward_and_step_scale_the_loss_and_undo_it_in_the_optimizers_pass():
    """backward multiplies the loss by S; step gives the optimizer grad_scale / S (so the update
    is that of the unscaled gradient), or skips it after an overflow and halves S; disabled,
    both are the plain calls."""
    def one_update(scaler, x, grad_scale=1.0):
        w = mt.nn.Parameter(np.array([1.0, -2.0], np.float32))
        opt = mt.optim.SGD([w], lr=0.5)
        scaler.backward((w * mt.tensor(np.array(x, np.float32))).sum())
        seen = w.grad.numpy().copy()
        return seen, scaler.step(opt, grad_scale), w.numpy(), opt.steps

    seen, skipped, w, steps = one_update(amp.LossScaler(init_scale=8.0), [3.0, 1.0], grad_scale=0.25)
    assert np.array_equal(seen, [24.0, 8.0]) and not skipped and steps == 1
    np.testing.assert_array_equal(w, [1.0 - 0.5 * 0.25 * 3.0, -2.0 - 0.5 * 0.25 * 1.0])
    scaler = amp.LossScaler(init_scale=8.0)
    seen, skipped, w, steps = one_update(scaler, [np.inf, 1.0])
    assert skipped and steps == 0 and scaler.scale == 4.0 and scaler.skipped == 1
    np.testing.assert_array_equal(w, [1.0, -2.0])
    off = amp.LossScaler(enabled=False)
    seen, skipped, w, steps = one_update(off, [3.0, 1.0], grad_scale=0.5)
    assert off.scale == 1.0 and np.array_equal(seen, [3.0, 1.0]) and not skipped and steps == 1
    np.testing.assert_array_equal(w, [1.0 - 0.25 * 3.0, -2.0 - 0.25 * 1.0])


def test_fp16_training_skips_overflowing_updates_says_so_and_then_learns(tmp_path, capsys):
    from tests.helpers import MULTI30K
    from tests.transformer.test_train import tiny_settings
    from transformer import data
    from transformer.tokenizer import Tokenizer, encode_cached
    from transformer.train import ParallelData, Trainer

    if not (MULTI30K / "val.en.gz").exists():
        pytest.skip(f"no Multi30k files in {MULTI30K}: set MULTI30K_DIR")
    en, de = data.multi30k("val", root=MULTI30K)
    tok = Tokenizer.train(en[:300] + de[:300], tmp_path / "spm", vocab_size=200)
    train = ParallelData(encode_cached(tok, en[:300], tmp_path / "a.npz"), encode_cached(tok, de[:300], tmp_path / "b.npz"))
    settings = tiny_settings(tmp_path / "run", precision="fp16", max_steps=24, eval_every=1000, save_every=1000,
                             bleu_sentences=0, dropout=0.0, lr_factor=2.0)
    trainer = Trainer(settings, tok, train)
    trainer.scaler = amp.LossScaler(init_scale=2.0**20)  # float16 overflows at 65504: the first updates must skip
    params = trainer.model.parameters()
    before = [p.numpy().copy() for p in params]
    assert all(p.dtype == np.float32 for p in params)  # master weights stay float32
    trainer.update(trainer.batches.mine(trainer.batches.of_epoch(0)[:1]))
    assert trainer.last_skipped and trainer.scaler.scale == 2.0**19 and trainer.opt.steps == 0
    assert all(np.array_equal(a, p.numpy()) for a, p in zip(before, params))  # a skipped update changes nothing
    trainer.batches.done = 1
    trainer.fit()
    records = trainer.history
    skipped = [r for r in records if r.get("skipped")]
    assert skipped and len(skipped) < len(records) - 5
    assert "overflowed; skipped it" in capsys.readouterr().out  # and says so
    assert trainer.scaler.skipped == 1 + len(skipped)
    assert trainer.opt.steps == len(records) - len(skipped)  # Adam only saw the clean updates
    assert not any(np.array_equal(a, p.numpy()) for a, p in zip(before, params) if a.size > 1)
    clean = [r["loss"] for r in records if not r.get("skipped")]
    assert np.mean(clean[-3:]) < clean[0] - 0.3  # and it learns


@pytest.mark.parametrize("kernels", [False, True], ids=["reference", "one launch (emulated)"])
def test_the_overflow_count_is_the_number_of_non_finite_gradient_entries_left_on_the_device(kernels):
    """LossScaler.overflow_count: inf and NaN entries over every gradient, one int on the
    gradients' device, by the reference's ops or by the one-launch check."""
    from minitensor import cuda
    from minitensor.cuda import emulator

    if kernels and not emulator.available()[0]:
        pytest.skip(emulator.available()[1])
    params = [mt.tensor(np.zeros(s, np.float16), requires_grad=True) for s in [(4, 5), (9,)]]
    params[0].grad = mt.tensor(np.array([[1, np.inf, 2, 3, np.nan]] * 4, np.float16))
    params[1].grad = mt.tensor(np.full(9, -np.inf, np.float16))
    with cuda.emulate(kernels):
        count = amp.LossScaler().overflow_count(params)
    assert count.shape == (1,) and int(count[0]) == 8 + 9
