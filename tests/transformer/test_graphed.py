"""transformer/graphed.py: --cuda-graphs replays the update of a batch shape seen before from a
CUDA graph, and makes the bits of the update without one (on the CuPy double, whose capture runs
nothing and bakes every launch's scalars: an update that read a changing number as a scalar, or
copied a batch from the host inside the capture, would fail here)."""
import dataclasses

import numpy as np
import pytest

from transformer.batching import PAD_ID
from transformer.graphed import check_processes
from transformer.settings import SettingsError, TrainSettings

from .test_train import small, tiny_settings  # noqa: F401 (the fixture)


def _same_shape(batch, k: int):
    """``batch`` with its word pieces moved k places through the vocabulary (the specials and the
    padding kept): another batch of the same shapes and the same non-pad targets."""
    def moved(a):
        return np.where(a >= 4, (a - 4 + 7 * k) % 296 + 4, a).astype(a.dtype)
    return dataclasses.replace(batch, src=moved(batch.src), tgt_in=moved(batch.tgt_in), tgt_out=moved(batch.tgt_out))


def _against_updates_without_graphs(small, run_dir, precision: str, same) -> None:
    """Six updates of two batches each (one shape, other tokens at each update), dropout on and
    the learning rate warming up, by two trainers, with and without --cuda-graphs: after every
    update ``same(a, b)`` holds for each parameter and for the loss, and the skips, the loss
    scale and the step counts agree; so do the losses read after all six updates (the training
    loop reads each while the next update runs, which a replay must not overwrite). The graphed trainer runs the first as it is, captures and
    replays the second and replays the other four. In fp16 the loss scale starts at 2^18, so
    that the first updates overflow and are skipped."""
    from transformer.train import Trainer

    if precision == "bf16":
        pytest.importorskip("ml_dtypes")
    tok, train, _ = small
    runs = {graphed: Trainer(tiny_settings(run_dir / str(graphed), device="cuda", precision=precision, update_freq=2,
                                           cuda_graphs=graphed), tok, train) for graphed in (False, True)}
    first = runs[False].batches.mine(runs[False].batches.of_epoch(0)[:2])
    assert sum((b.tgt_out != PAD_ID).sum() for b in first) > 0
    if precision == "fp16":
        for t in runs.values():
            t.scaler.scale = 2.0**18
    skipped, losses = [], []
    for step in range(6):
        batches = [_same_shape(b, step) for b in first]
        for t in runs.values():
            t.update(batches)
        eager, graphed = runs[False], runs[True]
        assert (graphed.last_skipped, graphed.scaler.scale, graphed.sched.steps, graphed.opt.steps) == (
            eager.last_skipped, eager.scaler.scale, eager.sched.steps, eager.opt.steps), step
        skipped.append(eager.last_skipped)
        losses.append((eager._loss, graphed._loss))
        if not eager.last_skipped:
            same(np.float64(graphed.read_loss()), np.float64(eager.read_loss()))
        for p, q in zip(eager.opt.params, graphed.opt.params):
            same(q.numpy(), p.numpy())
    # read after later updates, as the training loop reads each loss while the next update runs
    for step, ((eager_sum, eager_scale), (graphed_sum, graphed_scale)) in enumerate(losses):
        if not skipped[step]:
            same(np.float64(float(graphed_sum) * graphed_scale), np.float64(float(eager_sum) * eager_scale))
    assert len(runs[True].graphed.graphs) == 1 and runs[True].graphed.replays == 5
    assert runs[True]._summarise("max_steps")["cuda_graphs"] == {"graphs": 1, "replays": 5}   # train_summary.json's
    assert "cuda_graphs" not in runs[False]._summarise("max_steps")
    assert (True in skipped and False in skipped) if precision == "fp16" else not any(skipped), skipped


def _bits(a, b):
    assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_replayed_updates_make_the_bits_of_updates_without_graphs(small, tmp_path, cupy_double, precision):  # noqa: F811
    """On the CuPy double (a capture runs nothing and bakes each launch's scalars), the replays
    make the bits of the updates without graphs, skipped fp16 updates (decided on the device)
    included: see _against_updates_without_graphs."""
    _against_updates_without_graphs(small, tmp_path, precision, _bits)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_replayed_updates_follow_updates_without_graphs_on_the_gpu(small, tmp_path, precision):  # noqa: F811
    """The same on the GPU at hand (a real one: cuBLAS may take other algorithms on the capture's
    stream, so the values agree to float32 rounding, not bit for bit; on the double, exactly)."""
    _against_updates_without_graphs(small, tmp_path, precision,
                                    lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6))


def test_the_settings_refuse_cuda_graphs_where_an_update_reads_the_device_on_the_host(tmp_path):
    """--cuda-graphs needs a GPU, and refuses --clip-norm (the norm, read on the host), --profile
    (op by op) and several processes (checked before any data is prepared), each named."""
    for kw, message in [(dict(device="cpu"), "GPU setting"), (dict(clip_norm=1.0), "--clip-norm reads"),
                        (dict(profile=2), "--profile times")]:
        with pytest.raises(SettingsError, match=f"--cuda-graphs: .*{message}"):
            TrainSettings(run_dir=str(tmp_path), cuda_graphs=True, **{"device": "cuda", **kw})
    settings = TrainSettings(run_dir=str(tmp_path), cuda_graphs=True, device="cuda")
    check_processes(settings, 1)
    with pytest.raises(SettingsError, match="--cuda-graphs: the ranks' token counts are summed on the host"):
        check_processes(settings, 2)
