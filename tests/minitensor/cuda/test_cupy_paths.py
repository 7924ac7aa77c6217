"""The CuPy code paths, checked on the CPU against what CuPy 14.2's source says its API
does: the strict CuPy double (tests/cupy_double, the ``cupy_double`` fixture) or a smaller
stand-in offers exactly the calls CuPy offers (and fails where CuPy fails), so each GPU-only
branch is shown to make only calls CuPy accepts.

Each test here would have caught a bug that a line-by-line reading of the GPU code against
CuPy 14.2 found: a generator method CuPy lacks, a deprecated scatter, a cuRAND generator built
every update, bfloat16 batched products sent to an integer GEMM, a kernel cache shared
between devices, an NCCL id of the wrong type, extras that installed no NCCL.
"""
import sys
import tomllib
import types
from pathlib import Path

import numpy as np
import pytest

import minitensor as mt
from minitensor import backend, distributed, nn
from minitensor import random as mt_random
from minitensor.ops.dropout import dropout_keep
from minitensor.cuda import build, sources

REPO = Path(__file__).resolve().parents[3]


# ---------------------------------------------------------------- random numbers
def test_one_cuda_generator_is_kept_and_reseeded_in_place(monkeypatch, cupy_double):
    """The trainer reseeds before every update. A new cuRAND generator each time allocates
    and initialises a state per GPU thread; the kept Philox generator only takes a new seed."""
    made = []

    class Counted(cupy_double.random.RandomState):
        def __init__(self, *args, **kwargs):
            made.append(self)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(cupy_double.random, "RandomState", Counted)
    monkeypatch.setattr(mt_random, "_generators", {})
    gen = mt_random.generator(cupy_double)
    first = gen.random(5, dtype=np.float32)
    for step in range(10):
        mt_random.manual_seed(1000 + step)
        assert mt_random.generator(cupy_double) is gen
    mt_random.manual_seed(mt_random._seed)
    assert len(made) == 1 and gen._state.method == 161  # curand.pxd: CURAND_RNG_PSEUDO_PHILOX4_32_10
    mt_random.manual_seed(0)
    np.testing.assert_array_equal(cupy_double.asnumpy(gen.random(5, dtype=np.float32)),
                                  cupy_double.asnumpy(first))  # reseeding restarts the stream


def test_the_numpy_generator_reseeded_in_place_draws_what_a_fresh_one_would():
    gen = mt_random.generator(np)
    mt_random.manual_seed(123)
    assert mt_random.generator(np) is gen
    np.testing.assert_array_equal(gen.standard_normal(4), np.random.default_rng(123).standard_normal(4))


class SharedMethodsOnly:
    """A generator with only the methods NumPy's Generator and our CuPy generator share."""

    def __init__(self, seed=0):
        self._g = np.random.default_rng(seed)

    def random(self, size=None, dtype=np.float64):
        return self._g.random(size, dtype=dtype)

    def standard_normal(self, size=None, dtype=np.float64):
        return self._g.standard_normal(size, dtype=dtype)

    def uniform(self, low=0.0, high=1.0, size=None, dtype=np.float64):
        return self._g.uniform(low, high, size).astype(dtype)


def test_initialisers_dropout_and_sampling_use_only_methods_cupys_generator_has(monkeypatch):
    """cupy.random.Generator has no normal(): normal_ must not call one. Every draw that can
    happen on CuPy arrays goes through a generator that offers random, standard_normal and
    uniform only (NumPy's dropout masks use NumPy's own 16-bit integers, on NumPy only)."""
    fake = SharedMethodsOnly()
    monkeypatch.setattr(mt_random, "generator", lambda xp: fake)
    monkeypatch.setattr("minitensor.nn.init.generator", lambda xp: fake)
    monkeypatch.setattr("minitensor.ops.dropout.generator", lambda xp: fake)
    t = mt.zeros(400, 50)
    nn.init.normal_(t, mean=2.0, std=0.5)
    assert abs(t.numpy().mean() - 2.0) < 0.01 and abs(t.numpy().std() - 0.5) < 0.01
    nn.init.uniform_(t, -1, 1)
    nn.init.xavier_uniform_(t)
    mt.randn(3, 4)
    mt.rand(3, 4)
    cupy_like = types.SimpleNamespace(__name__="cupy", float32=np.float32, zeros=np.zeros)  # not numpy: the CuPy branch
    keep = dropout_keep(cupy_like, (100, 100), 0.5)
    assert keep.dtype == bool and abs(keep.mean() - 0.5) < 0.03
    nn.Linear(4, 3)
    nn.Embedding(10, 4)


def test_cupy_generator_calls_match_cupy_randomstate(cupy_double):
    gen = mt_random.CupyGenerator(cupy_double, 7)
    assert gen.random((2, 3), dtype=np.float32).dtype == np.float32
    assert gen.standard_normal((4,), dtype=np.float32).shape == (4,)
    assert float(gen.uniform(-1, 1, size=(5,)).min()) >= -1
    gen.seed(2**63)  # within CuPy's 0 .. 2**64-1


# ---------------------------------------------------------------- scatter add
def test_scatter_add_uses_ufunc_at_on_cupy_not_the_deprecated_cupyx_call(monkeypatch):
    calls = []
    fake = types.SimpleNamespace(__name__="cupy", add=types.SimpleNamespace(at=lambda *a: calls.append(a)))
    monkeypatch.setitem(sys.modules, "cupyx", None)  # importing it would now fail
    target, ids, rows = np.zeros((5, 2)), np.array([1, 1, 3]), np.ones((3, 2))
    backend.index_add_rows(fake, target, ids, rows)
    assert len(calls) == 1 and calls[0][0] is target
    backend.scatter_add(np, target, ids, rows)            # the same call on NumPy adds repeats up
    np.testing.assert_array_equal(target[:, 0], [0, 2, 0, 1, 0])


# ---------------------------------------------------------------- kernel modules per device
def test_each_gpu_gets_its_own_compiled_kernel_module(monkeypatch, cupy_double):
    if cupy_double.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("the double in place for this run shows one device (CUPY_DOUBLE_DEVICES)")
    compiled_on = []

    class Recorded(cupy_double.RawModule):
        def __init__(self, *args, **kwargs):
            compiled_on.append(cupy_double.cuda.runtime.getDevice())
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(cupy_double, "RawModule", Recorded)
    build._gpu_kernel.cache_clear()
    try:
        expr = "layer_norm_forward<float, 1>"
        first = build.kernel("layer_norm.cu", expr, cupy_double)
        assert build.kernel("layer_norm.cu", expr, cupy_double) is first and compiled_on == [0]  # cached
        with cupy_double.cuda.Device(1):
            second = build.kernel("layer_norm.cu", expr, cupy_double)
        assert second is not first and compiled_on == [0, 1]                  # compiled again, for GPU 1
    finally:
        build._gpu_kernel.cache_clear()


# ---------------------------------------------------------------- NCCL
def test_missing_nccl_is_a_clear_error():
    with pytest.raises(distributed.DistributedError, match=r"NCCL is not available to CuPy.*pip install nvidia-nccl"):
        distributed.load_nccl(types.SimpleNamespace(available=False))
    ok = types.SimpleNamespace(available=True)
    assert distributed.load_nccl(ok) is ok


def test_the_nccl_id_travels_as_the_bytes_ncclcommunicator_takes():
    """CuPy 14's get_unique_id returns 128 bytes and NcclCommunicator(ndev, commId, rank)
    takes bytes; bytes above 127 broke the old int8 conversion."""
    uid = bytes(range(128, 256))
    got = distributed.share_unique_id(distributed.SingleProcess(), lambda: uid)
    assert isinstance(got, bytes) and got == uid
    with pytest.raises(distributed.DistributedError, match="128-byte NCCL unique id"):
        distributed.share_unique_id(distributed.SingleProcess(), lambda: tuple(uid))


# ---------------------------------------------------------------- what the GPU extras install
def test_gpu_extras_bring_cupy_14_its_cuda_libraries_nccl_and_a_numpy_it_supports():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for cuda, nccl in (("cuda12", "nvidia-nccl-cu12"), ("cuda13", "nvidia-nccl-cu13")):
        deps = extras[cuda]
        assert f"cupy-{cuda}x[ctk]>=14" in deps
        assert nccl in deps and "numpy>=2.1.2" in deps and any(d.startswith("ml_dtypes") for d in deps)
    package_data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    shipped = {str(p.relative_to(sources.FOLDER)) for package, folder in (("minitensor.cuda", sources.FOLDER),
                                                                          ("minitensor.cuda.emulator", sources.FOLDER / "emulator"))
               for pattern in package_data[package] for p in folder.glob(pattern)}
    assert {"common.cuh", "emulator/emulator.h", *sources.SOURCES} <= shipped   # an installed package compiles too
