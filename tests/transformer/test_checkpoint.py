"""Checkpoints: exact round trips without pickle, atomic writes, averaging, pruning, clean-up."""
import os

import numpy as np
import pytest

import minitensor as mt
from transformer import Transformer, TransformerConfig, paper_adam
from transformer.checkpoint import (CheckpointError, average_checkpoints, load_checkpoint, prune_checkpoints,
                                   save_checkpoint, step_checkpoints)
from transformer.files import claim, remove_stale


def trained_model(seed=0):
    mt.manual_seed(seed)
    model = Transformer(TransformerConfig.tiny(11, d_model=16, d_ff=32, n_heads=2, n_encoder_layers=1,
                                               n_decoder_layers=1))
    opt = paper_adam(model.parameters(), lr=1e-3)
    loss = model(np.array([[3, 4, 5]]), np.array([[1, 3, 4]])).sum()
    loss.backward()
    opt.step()
    return model, opt


def test_round_trip_restores_weights_optimizer_and_meta(tmp_path):
    model, opt = trained_model()
    path = save_checkpoint(tmp_path / "c.npz", model, opt, {"step": 7, "config": model.cfg.to_dict()})
    with np.load(path, allow_pickle=False) as z:  # loads without pickle
        assert "meta" in z.files
    ck = load_checkpoint(path)
    assert ck["meta"]["step"] == 7 and ck["meta"]["config"]["d_model"] == 16
    other, opt2 = trained_model(seed=1)
    other.load_state_dict(ck["model"])
    for (n, a), (_, b) in zip(model.state_dict().items(), other.state_dict().items()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=n)
    assert other.src_embed.weight is other.tgt_embed.weight  # sharing survives loading
    opt2.load_state_dict(ck["optimizer"])
    for s1, s2 in zip(opt.state, opt2.state):
        for k in s1:
            np.testing.assert_array_equal(s1[k], s2[k])
    assert opt2.steps == opt.steps


def test_shared_weights_are_stored_once(tmp_path):
    model, _ = trained_model()
    path = save_checkpoint(tmp_path / "c.npz", model)
    with np.load(path, allow_pickle=False) as z:
        stored = [k for k in z.files if k.endswith("embed.weight")]
    assert len(stored) == 1


def test_a_failed_write_leaves_the_previous_checkpoint_intact(tmp_path, monkeypatch):
    model, opt = trained_model()
    path = save_checkpoint(tmp_path / "c.npz", model, opt, {"step": 1})

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", boom)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(path, model, opt, {"step": 2})
    assert load_checkpoint(path)["meta"]["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["c.npz"]  # no temporary file left


def test_average_is_the_elementwise_mean(tmp_path):
    paths = []
    for seed in range(3):
        model, _ = trained_model(seed)
        paths.append(save_checkpoint(tmp_path / f"checkpoint_{seed}.npz", model, meta={"step": seed}))
    avg = average_checkpoints(paths)
    loaded = [load_checkpoint(p)["model"] for p in paths]
    for k, v in avg["model"].items():
        np.testing.assert_allclose(v, np.mean([m[k] for m in loaded], axis=0), rtol=1e-6, atol=1e-7)
    assert avg["meta"]["step"] == 2
    with pytest.raises(ValueError, match="no checkpoints"):
        average_checkpoints([])


def test_prune_keeps_the_newest_steps(tmp_path):
    model, _ = trained_model()
    for step in (100, 20, 300, 4000):
        save_checkpoint(tmp_path / f"checkpoint_{step}.npz", model)
    assert [p.name for p in step_checkpoints(tmp_path)] == [
        "checkpoint_20.npz", "checkpoint_100.npz", "checkpoint_300.npz", "checkpoint_4000.npz"]
    removed = prune_checkpoints(tmp_path, keep=2)
    assert sorted(p.name for p in removed) == ["checkpoint_100.npz", "checkpoint_20.npz"]
    assert [p.name for p in step_checkpoints(tmp_path)] == ["checkpoint_300.npz", "checkpoint_4000.npz"]


def test_prune_keeps_the_newest_of_the_runs_own_and_counts_no_other_runs_among_them(tmp_path):
    """Another run's checkpoint newer than the run's own is neither deleted nor one of the ``keep``."""
    model, _ = trained_model()
    for step in (10, 20, 30):
        save_checkpoint(tmp_path / f"checkpoint_{step}.npz", model, None, {"step": step, "run_id": "mine"})
    save_checkpoint(tmp_path / "checkpoint_1000.npz", model, None, {"step": 1000, "run_id": "theirs"})
    removed = prune_checkpoints(tmp_path, keep=2, ours=lambda meta: meta["run_id"] == "mine")
    assert [p.name for p in removed] == ["checkpoint_10.npz"]
    assert [p.name for p in step_checkpoints(tmp_path)] == ["checkpoint_20.npz", "checkpoint_30.npz",
                                                             "checkpoint_1000.npz"]


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such checkpoint"):
        load_checkpoint(tmp_path / "nope.npz")


def test_any_flipped_byte_of_an_array_header_is_named_as_damage(tmp_path):
    """NumPy parses each array's header as a Python literal: a flipped byte there raised
    TokenError or SyntaxError, not a damage named by the file (the damage fuzzer found it)."""
    model = Transformer(TransformerConfig.tiny(11, d_model=16, d_ff=512, n_heads=2, n_encoder_layers=1,
                                               n_decoder_layers=1))
    data = save_checkpoint(tmp_path / "c.npz", model, None, {"step": 1, "config": model.cfg.to_dict()}).read_bytes()
    starts = [i for i in range(len(data)) if data.startswith(b"\x93NUMPY", i)]
    # headers of arrays over 4 KiB: zipfile reads a smaller member whole, and its CRC check comes first
    starts = [a for a, b in zip(starts, starts[1:] + [len(data)]) if b - a > 8192][:3]
    assert len(starts) == 3
    kinds = set()
    for start in starts:
        for i in range(start, start + 128):
            damaged = tmp_path / "d.npz"
            damaged.write_bytes(data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:])
            with pytest.raises(CheckpointError, match="is damaged") as info:
                load_checkpoint(damaged)
            kinds.add(type(info.value.__cause__).__name__)
    assert {"TokenError", "SyntaxError"} & kinds, kinds  # the header parser's own errors were among them


def test_partial_files_of_dead_writers_are_removed_and_a_live_writers_are_kept(tmp_path):
    """A temporary file whose claim (its flock) no process holds was left by a writer that died."""
    dead = tmp_path / ".checkpoint_6.npz.999999.0.partial"  # written, never locked: as a SIGKILL leaves it
    live, fd = claim(tmp_path / "checkpoint_8.npz")  # held by this process while it writes
    model, opt = trained_model()
    done = save_checkpoint(tmp_path / "checkpoint_4.npz", model, opt)
    dead.write_bytes(b"PK\x03\x04 half a zip")
    assert remove_stale(tmp_path) == [dead]
    os.close(fd)
    assert not dead.exists() and live.exists() and done.exists()
