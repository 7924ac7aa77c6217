"""Exporting weights (transformer/export.py, ``python -m transformer export``): the safetensors
files this writes are what the ``safetensors`` library reads, and what it writes this reads;
damaged or altered files are refused by name; a trained run's model loaded into the PyTorch
module of ``torch.nn`` encoder and decoder layers gives the same logits."""
from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import minitensor as mt
from transformer import Transformer, TransformerConfig
from transformer.export import (SafetensorsError, export, model_from_safetensors, read_safetensors,
                                torch_state_dict, torch_transformer, weights_of, write_safetensors)
from transformer.rundir import load_model

from ..helpers import cli, require, torch_or_skip

DTYPES = (np.float32, np.float64, np.float16, np.int64, np.int32, np.int8, np.uint8, np.bool_)
named_arrays = st.dictionaries(
    st.text("abcdefghij._/0123456789", min_size=1, max_size=12).filter(lambda n: n != "__metadata__"),
    hnp.arrays(st.sampled_from(DTYPES), hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)),
    max_size=5)


def safetensors_numpy():
    try:
        from safetensors import numpy as sn  # noqa: PLC0415
    except ImportError:
        require(False, "the safetensors library is not installed (pip install -e '.[test]')")
    return sn


def same(a: dict, b: dict) -> bool:
    """The same names, dtypes, shapes and bytes (NaNs included, bit for bit)."""
    return a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and
                                        a[k].tobytes() == b[k].tobytes() for k in a)


@given(named_arrays)
@settings(max_examples=40, deadline=None)
def test_what_this_writes_the_safetensors_library_reads_and_back(tmp_path_factory, arrays):
    sn = safetensors_numpy()
    path = tmp_path_factory.mktemp("st") / "w.safetensors"
    write_safetensors(path, arrays, {"note": "x"})
    assert same(sn.load_file(str(path)), arrays)
    back, metadata = read_safetensors(path)
    assert same(back, arrays) and metadata["note"] == "x" and len(metadata["sha256"]) == 64
    theirs = path.with_name("theirs.safetensors")
    sn.save_file({k: np.asarray(v, order="C") for k, v in arrays.items()}, str(theirs))
    assert same(read_safetensors(theirs)[0], arrays)  # a file with no hash of ours reads unchecked


def _written(tmp_path):
    path = tmp_path / "w.safetensors"
    write_safetensors(path, {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(4, np.int64)})
    return path, path.read_bytes()


def test_a_file_altered_at_the_same_size_is_refused(tmp_path):
    path, raw = _written(tmp_path)
    altered = bytearray(raw)
    altered[-1] ^= 0x01  # a bit of b's last entry
    path.write_bytes(bytes(altered))
    with pytest.raises(SafetensorsError, match="damaged: its arrays do not match"):
        read_safetensors(path)


@pytest.mark.parametrize("damage", ["truncated", "header length", "not json", "gap", "shape"])
def test_a_header_that_does_not_describe_the_bytes_is_refused_naming_the_file(tmp_path, damage):
    path, raw = _written(tmp_path)
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    if damage == "truncated":
        raw = raw[:-5]
    elif damage == "header length":
        raw = struct.pack("<Q", len(raw)) + raw[8:]
    elif damage == "not json":
        raw = raw[:8] + b"{" * n + raw[8 + n:]
    else:
        if damage == "gap":
            header["b"]["data_offsets"] = [header["b"]["data_offsets"][0] + 8, header["b"]["data_offsets"][1] + 8]
        else:
            header["a"]["shape"] = [3, 3]
        text = json.dumps(header).encode()
        raw = struct.pack("<Q", len(text)) + text + raw[8 + n:]
    path.write_bytes(raw)
    with pytest.raises(SafetensorsError, match=str(path.name)):
        read_safetensors(path)


def _model(**overrides) -> Transformer:
    mt.manual_seed(3)
    model = Transformer(TransformerConfig.tiny(41, dropout=0.0, **overrides)).eval()
    rng = np.random.default_rng(4)
    for name, p in model.named_parameters():  # LayerNorms away from 1 and 0, so that a norm mapped wrong shows
        if "norm" in name:
            p.data[...] = rng.normal(1.0 if name.endswith("weight") else 0.0, 0.3, p.shape).astype(np.float32)
    return model


def _batch(cfg, seed=5):
    rng = np.random.default_rng(seed)
    src = rng.integers(3, cfg.vocab_size, (3, 9))
    tgt = rng.integers(3, cfg.target_vocab_size, (3, 7))
    src[0, 6:] = cfg.pad_id
    tgt[1, 4:] = cfg.pad_id
    tgt[:, 0] = cfg.bos_id
    return src, tgt


@pytest.mark.parametrize("overrides", [{}, {"norm_first": True}, {"share_embeddings": False, "tgt_vocab_size": 29},
                                       {"positional": "learned", "norm_first": True}],
                         ids=["paper", "pre-norm", "separate-vocabularies", "learned-positions"])
def test_the_pytorch_module_gives_this_model_s_logits(overrides):
    torch = torch_or_skip()
    model = _model(**overrides)
    src, tgt = _batch(model.cfg)
    ours = model(src, tgt).numpy()
    module = torch_transformer(model.cfg, weights_of(model)).double()
    with torch.no_grad():
        theirs = module(torch.from_numpy(src), torch.from_numpy(tgt)).numpy()
    np.testing.assert_allclose(theirs, ours, atol=1e-5, rtol=0)
    assert set(module.state_dict()) == set(torch_state_dict(weights_of(model), model.cfg))


def test_the_comparison_sees_a_wrongly_mapped_weight():
    """The check is not vacuous: W^Q and W^K swapped in one layer change PyTorch's logits."""
    torch = torch_or_skip()
    model = _model()
    src, tgt = _batch(model.cfg)
    weights = weights_of(model)
    q, k = "encoder.layers.1.self_attn.w_q.weight", "encoder.layers.1.self_attn.w_k.weight"
    weights[q], weights[k] = weights[k], weights[q]
    with torch.no_grad():
        theirs = torch_transformer(model.cfg, weights).double()(torch.from_numpy(src), torch.from_numpy(tgt)).numpy()
    assert np.abs(theirs - model(src, tgt).numpy()).max() > 1e-3


def test_a_minitensor_export_rebuilds_the_same_model_from_the_file_alone(tmp_path):
    model = _model(share_embeddings=False, tgt_vocab_size=29)
    export(model, tmp_path / "m.safetensors")
    again = model_from_safetensors(tmp_path / "m.safetensors").eval()
    assert again.cfg == model.cfg
    src, tgt = _batch(model.cfg)
    np.testing.assert_array_equal(again(src, tgt).numpy(), model(src, tgt).numpy())
    export(model, tmp_path / "t.safetensors", layout="torch")
    with pytest.raises(SafetensorsError, match="--layout minitensor"):
        model_from_safetensors(tmp_path / "t.safetensors")


def test_a_trained_run_exported_for_pytorch_loads_with_the_safetensors_library_and_gives_its_logits(small_run,
                                                                                                     tmp_path):
    """The round trip a user makes: ``export --layout torch``, then in PyTorch
    ``module.load_state_dict(safetensors.torch.load_file(path))``; the logits are this tool's."""
    torch = torch_or_skip()
    try:
        from safetensors.torch import load_file  # noqa: PLC0415
    except ImportError:
        require(False, "the safetensors library is not installed (pip install -e '.[test]')")
    out = tmp_path / "run.safetensors"
    status, stdout, err = cli("export", "--run-dir", small_run, "--out", out, "--layout", "torch")
    assert status == 0, err
    assert f"wrote {out}" in stdout and "checkpoint_6" in stdout
    loaded = load_model(small_run)
    metadata = read_safetensors(out)[1]
    cfg = TransformerConfig.from_dict(json.loads(metadata["config"]))
    assert cfg == loaded.model.cfg and json.loads(metadata["step"]) == 6
    module = torch_transformer(cfg)
    module.load_state_dict(load_file(str(out)))
    src, tgt = _batch(cfg, seed=7)
    with torch.no_grad():
        theirs = module(torch.from_numpy(src), torch.from_numpy(tgt)).numpy()
    with mt.no_grad():
        ours = loaded.model(src, tgt).numpy()
    np.testing.assert_allclose(theirs, ours, atol=1e-5, rtol=0)


def test_export_refuses_to_replace_a_run_s_own_file_and_a_bad_layout(small_run):
    status, _, err = cli("export", "--run-dir", small_run, "--out", small_run / "checkpoint_6.npz")
    assert status == 2 and "a run's own file" in err
    status, _, err = cli("export", "--run-dir", small_run, "--out", "x.safetensors", "--layout", "onnx")
    assert status == 2 and "--layout" in err
