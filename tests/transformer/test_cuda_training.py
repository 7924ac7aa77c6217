"""The CuPy backend end to end: the same model, weights and batch give the same loss and
gradients on the CPU and the GPU; a short training run's losses agree; checkpoints cross
devices; a training step, and the trainer's whole update, make no host round trips; mixed
precision trains on the GPU.

All need a GPU (``gpu`` marker); without one they are skipped.
"""
import json

import numpy as np
import pytest

import minitensor as mt
from minitensor import amp, backend
from transformer import Transformer, TransformerConfig
from transformer.loss import label_smoothed_loss

from ..helpers import translation_batch
from .test_train import losses, small, tiny_settings  # noqa: F401 (the fixture)

pytestmark = pytest.mark.gpu


def _tiny_pair(seed=0):
    cfg = TransformerConfig(vocab_size=37, d_model=32, n_heads=4, d_ff=64, n_encoder_layers=2, n_decoder_layers=2,
                            dropout=0.0, max_len=64)
    mt.manual_seed(seed)
    cpu = Transformer(cfg)
    gpu = Transformer(cfg)
    gpu.load_state_dict({k: v.numpy() for k, v in cpu.state_dict().items()})
    return cfg, cpu, gpu.to("cuda")


@pytest.mark.parametrize("kernels", [True, False], ids=["kernels", "plain-cupy"])
def test_cpu_and_gpu_give_the_same_loss_and_gradients(kernels):
    cfg, cpu, gpu = _tiny_pair()
    src, tgt_in, tgt_out = translation_batch(np.random.default_rng(0))
    with mt.cuda.use_kernels(kernels):
        results = []
        for model, dev in ((cpu, "cpu"), (gpu, "cuda")):
            loss = label_smoothed_loss(model(mt.tensor(src, device=dev), mt.tensor(tgt_in, device=dev)),
                                       mt.tensor(tgt_out, device=dev), cfg.pad_id, 0.1)
            loss.backward()
            results.append((loss.item(), {n: p.grad.numpy() for n, p in model.named_parameters()}))
    (l_cpu, g_cpu), (l_gpu, g_gpu) = results
    assert l_gpu == pytest.approx(l_cpu, rel=1e-5)
    for name, g in g_cpu.items():
        scale = max(np.abs(g).max(), 1e-3)
        np.testing.assert_allclose(g_gpu[name] / scale, g / scale, atol=2e-5, err_msg=name)


def test_a_short_training_run_has_the_same_losses_on_cpu_and_gpu(small, tmp_path):  # noqa: F811
    from transformer.train import Trainer

    tok, train, valid = small
    for dev in ("cpu", "cuda"):
        Trainer(tiny_settings(tmp_path / dev, device=dev, dropout=0.0, max_steps=6, eval_every=1000,
                              save_every=1000), tok, train).fit()
    np.testing.assert_allclose(losses(tmp_path / "cuda"), losses(tmp_path / "cpu"), rtol=2e-4)


def test_checkpoints_saved_on_gpu_load_on_cpu_and_back(small, tmp_path):  # noqa: F811
    from transformer.checkpoint import load_checkpoint
    from transformer.train import Trainer

    tok, train, valid = small
    t = Trainer(tiny_settings(tmp_path / "run", device="cuda", max_steps=3, save_every=3, eval_every=1000), tok, train)
    t.fit()
    ck = load_checkpoint(tmp_path / "run" / "checkpoint_3.npz")
    cpu_model = Transformer(t.cfg)
    cpu_model.load_state_dict(ck["model"])
    for (n, a), (_, b) in zip(cpu_model.named_parameters(), t.model.named_parameters()):
        assert isinstance(a.data, np.ndarray) and np.array_equal(a.numpy(), b.numpy()), n
    resumed = Trainer(tiny_settings(tmp_path / "run", device="cuda", max_steps=3), tok, train, resume=True)
    assert all(not isinstance(p.data, np.ndarray) for p in resumed.model.parameters())
    assert all(not isinstance(v, np.ndarray) for s in resumed.opt.state for v in s.values())


def test_a_training_step_never_waits_for_the_device():
    """Forward, backward and the Adam update run with device synchronisation forbidden: nothing
    in them copies to the host (the trainer fetches the logged scalars once per update)."""
    import cupyx

    cfg, _, gpu = _tiny_pair()
    opt = mt.optim.Adam(gpu.parameters(), lr=1e-3)
    src, tgt_in, tgt_out = (mt.tensor(a, device="cuda") for a in translation_batch(np.random.default_rng(1)))
    for _ in range(2):
        with cupyx.allow_synchronize(False):
            opt.zero_grad()
            loss = label_smoothed_loss(gpu(src, tgt_in), tgt_out, cfg.pad_id, 0.1, reduction="sum")
            loss.backward()
            opt.step()
    assert np.isfinite(loss.item())


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_whole_trainer_updates_never_wait_for_the_device(small, tmp_path, precision):  # noqa: F811
    """Trainer.update from padded batches to Adam's step (two batches an update, dropout on),
    with device synchronisation forbidden: the loss stays on the device until read_loss, and
    the division by the token count is a factor of Adam's own pass. (fp16's overflow check and
    --clip-norm's norm each read one number: they are left out.)"""
    import cupyx

    from transformer.train import Trainer

    if precision == "bf16":
        pytest.importorskip("ml_dtypes")
    tok, train, _ = small
    t = Trainer(tiny_settings(tmp_path, device="cuda", precision=precision, update_freq=2), tok, train)
    groups = t.batches.of_epoch(0)
    for u in range(3):
        batches = t.batches.mine(groups[2 * u:2 * u + 2])  # collated on the host, as the loop does ahead
        with cupyx.allow_synchronize(False):
            t.update(batches)
    assert t.opt.steps == 3 and np.isfinite(t.read_loss())


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_mixed_precision_trains_on_the_gpu(small, tmp_path, precision):  # noqa: F811
    from transformer.train import Trainer

    if precision == "bf16":
        pytest.importorskip("ml_dtypes")
    tok, train, valid = small
    t = Trainer(tiny_settings(tmp_path / precision, device="cuda", precision=precision, dropout=0.0, max_steps=16,
                              lr_factor=2.0, eval_every=1000, save_every=1000, memory_every=4, profile=4), tok, train)
    t.fit()
    # the profile's "BLAS alone" rates time the products as the ops make them (batched bfloat16
    # included, which CuPy's own matmul refuses)
    rows = {r["op"]: r for r in json.loads((tmp_path / precision / "profile.json").read_text())["rows"]}
    # (attention on the GPU is the fused softmax's op, FusedSoftmaxAttention, with the same products)
    assert rows["Linear"]["blas_gflop_per_s"] > 0 and rows["FusedSoftmaxAttention"]["blas_gflop_per_s"] > 0
    clean = [r["loss"] for r in t.history if not r.get("skipped")]
    assert np.mean(clean[-3:]) < clean[0] - 0.3
    assert all(p.dtype == np.float32 for p in t.model.parameters())
    assert any("peak_memory_mib" in r for r in t.history)
    with amp.autocast("float16" if precision == "fp16" else "bfloat16"):
        x = mt.tensor(np.ones((2, 3), np.float32), device="cuda")
        y = mt.functional.linear(x, mt.tensor(np.ones((3, 4), np.float32), device="cuda"))
    assert backend.device_of(y.data) == "cuda" and y.dtype != np.float32
