"""The CuPy double fails where CuPy fails: each test plants one mistake in a small piece of
code shaped like the project's and shows the double rejecting it, beside the correct version
that it accepts. The double is put in place of ``cupy`` for each test and taken out after
(a real CuPy, when one is imported, is set aside meanwhile and put back)."""
import collections
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.cupy_double import double

SPEC = json.loads((Path(double.__file__).parent / "spec.json").read_text())


@pytest.fixture
def cp(cupy_double):
    return cupy_double


# ---------------------------------------------------------------- the seven planted mistakes
def test_an_implicit_conversion_to_numpy_is_refused(cp):
    """A beam step that ranks on the host by ``np.asarray`` of device scores."""
    scores = cp.asarray(np.array([[-0.5, -2.0]], np.float32))

    def best_beam_on_host(s):
        return np.argsort(-np.asarray(s), axis=1)        # the planted mistake

    with pytest.raises(TypeError, match="Implicit conversion to a NumPy array is not allowed"):
        best_beam_on_host(scores)
    with pytest.raises(TypeError, match="Implicit conversion"):
        np.array(scores)
    assert np.argsort(-cp.asnumpy(scores), axis=1).tolist() == [[0, 1]]     # the explicit copy works
    assert not isinstance(scores, np.ndarray) and type(scores).__module__ == "cupy"


def test_a_numpy_operand_in_a_ufunc_is_refused_even_0d_but_not_in_a_comparison(cp):
    """Adding a mask built with NumPy to device logits."""
    logits = cp.zeros((2, 5), np.float32)
    host_mask = np.where(np.arange(5) < 3, 0.0, -1e9).astype(np.float32)
    with pytest.raises(TypeError, match="Unsupported type <class 'numpy.ndarray'>"):
        logits + host_mask                                   # the planted mistake
    with pytest.raises(TypeError, match="Unsupported type"):
        logits * np.asarray(0.5, np.float32)                 # 0-d too
    assert (logits + cp.asarray(host_mask)).dtype == np.float32
    assert (logits * np.float32(0.5)).dtype == np.float32    # a NumPy scalar is a scalar
    assert bool((logits == np.asarray(0.0)).all())          # comparisons take a 0-d array as its value


def test_a_numpy_ufunc_with_out_on_device_arrays_writes_the_device_array(cp):
    """NumPy hands ``out=`` to ``__array_ufunc__`` as a tuple; CuPy unfolds it (core.pyx), so
    ``np.multiply(g, c, out=tmp)`` on device arrays runs CuPy's multiply into ``tmp``."""
    g = cp.asarray(np.array([1.0, 2.0, 3.0], np.float32))
    tmp = cp.empty_like(g)
    assert np.multiply(g, 0.5, out=tmp) is tmp
    assert cp.asnumpy(tmp).tolist() == [0.5, 1.0, 1.5]
    np.sqrt(g, out=tmp)
    assert np.allclose(cp.asnumpy(tmp), np.sqrt([1.0, 2.0, 3.0]))
    with pytest.raises(TypeError, match="Output arguments must be cupy arrays"):
        np.multiply(g, 0.5, out=np.empty(3, np.float32))


def test_assigning_a_list_or_a_numpy_array_is_refused(cp):
    """Filling a device buffer of token ids from a Python list."""
    ids = cp.zeros(4, np.int64)
    with pytest.raises(TypeError, match="Unsupported type <class 'list'>"):
        ids[...] = [1, 2, 3, 4]                              # the planted mistake
    with pytest.raises(TypeError, match="Unsupported type <class 'numpy.ndarray'>"):
        ids[:2] = np.array([5, 6])
    with pytest.raises(TypeError, match="Unsupported type <class 'list'>"):
        ids.fill([1])
    ids[...] = cp.asarray(np.array([1, 2, 3, 4]))
    ids[0] = np.asarray(7)                                   # a 0-d array is a value
    assert ids.get().tolist() == [7, 2, 3, 4]


def test_a_name_cupy_lacks_is_an_attribute_error(cp):
    """A stable log-sum-exp written with NumPy's errstate, which CuPy does not have."""
    x = cp.asarray(np.array([1e30, -1e30], np.float32))

    def logsumexp(xp, a):
        with xp.errstate(over="ignore"):                     # the planted mistake
            return xp.log(xp.exp(a).sum())

    assert "errstate" not in SPEC["modules"]["cupy"] and hasattr(np, "errstate")
    with pytest.raises(AttributeError, match="module 'cupy' has no attribute 'errstate'"):
        logsumexp(cp, x)
    assert np.isfinite(logsumexp(np, np.array([1.0, 2.0])))
    assert cp.log(cp.exp(x[1:]).sum()).ndim == 0             # the names CuPy has work


SCALE = r"""
extern "C" __global__ void scale(float* x, int n, float a) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
"""


def test_a_kernel_argument_of_the_wrong_size_is_refused(cp):
    """A launcher passing a float64 where the kernel takes a float, or a host array."""
    pytest.importorskip("minitensor.cuda.emulator")
    from minitensor.cuda import emulator

    ok, why = emulator.available()
    if not ok:
        pytest.skip(why)
    kernel = cp.RawModule(code=SCALE, options=("--std=c++17",)).get_function("scale")
    x = cp.asarray(np.arange(6, dtype=np.float32))
    with pytest.raises(emulator.EmulatorError, match=r"`a` \(float, 4 bytes\): the launch passes numpy.float64, 8"):
        kernel((1,), (32,), (x, np.int32(6), np.float64(2.0)))          # the planted mistake
    with pytest.raises(emulator.EmulatorError, match="takes 3 arguments"):
        kernel((1,), (32,), (x, np.int32(6)))                            # a missing argument
    with pytest.raises(emulator.EmulatorError, match="a Python int"):
        kernel((1,), (32,), (x, 6, np.float32(2.0)))                     # a Python int is an int64
    with pytest.raises(TypeError, match="Unsupported type"):
        kernel((1,), (32,), (np.arange(6, dtype=np.float32), np.int32(6), np.float32(2.0)))
    kernel((1,), (32,), (x, np.int32(6), np.float32(2.0)))
    assert cp.asnumpy(x).tolist() == [0, 2, 4, 6, 8, 10]


def test_a_batched_bfloat16_product_is_refused_and_the_project_avoids_it(cp):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    from minitensor import backend
    from minitensor.speed import products

    a = cp.asarray(np.ones((2, 3, 4), np.float32)).astype(ml_dtypes.bfloat16)
    b = cp.asarray(np.ones((2, 4, 5), np.float32)).astype(ml_dtypes.bfloat16)
    with pytest.raises(TypeError, match="data type 'E' not understood"):
        a @ b                                                            # the planted mistake
    for product in (backend.matmul, products.product):                  # the reference's detour, and cuBLAS
        out = product(a, b)
        assert out.dtype == ml_dtypes.bfloat16 and float(out[0, 0, 0]) == 4.0
    assert (a[0] @ b[0]).dtype == ml_dtypes.bfloat16                     # 2-D goes to cuBLAS: fine


# ---------------------------------------------------------------- cuBLAS, column-major
def _gemm_args(cp, a, b, c, m, n, k, lda, ldb, ldc, trans=(0, 0), types=(0, 0)):
    from cupy_backends.cuda.libs import cublas

    one, zero = np.array(1, np.float32), np.array(0, np.float32)
    return (cp.cuda.get_cublas_handle(), trans[0], trans[1], m, n, k, one.ctypes.data, a.data.ptr, types[0], lda,
            b.data.ptr, types[0], ldb, zero.ctypes.data, c.data.ptr, types[1], ldc, cublas.CUBLAS_COMPUTE_32F,
            cublas.CUBLAS_GEMM_DEFAULT), (one, zero)


def test_gemmex_reads_column_major_and_a_row_major_call_gets_the_transpose(cp):
    """cuBLAS reads memory column by column: called with a row-major (2, 3) x (3, 4) as if
    NumPy's, it computes another product; the project's order (B first, then A) gives A @ B."""
    from cupy_backends.cuda.libs import cublas

    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.arange(12, dtype=np.float32).reshape(3, 4)
    A, B, C = cp.asarray(a), cp.asarray(b), cp.zeros((2, 4), np.float32)
    args, keep = _gemm_args(cp, B, A, C, 4, 2, 3, 4, 3, 4)       # C^T = B^T A^T, column-major
    cublas.gemmEx(*args)
    np.testing.assert_array_equal(cp.asnumpy(C), a @ b)
    args, keep = _gemm_args(cp, A, B, C, 2, 4, 3, 2, 3, 2)       # the planted mistake: NumPy's order
    cublas.gemmEx(*args)
    assert not np.array_equal(cp.asnumpy(C), a @ b)


def test_gemmex_refuses_what_cublas_refuses(cp):
    from cupy_backends.cuda.libs import cublas

    A, B, C = cp.zeros((2, 3), np.float32), cp.zeros((3, 4), np.float32), cp.zeros((2, 4), np.float32)
    args, keep = _gemm_args(cp, B, A, C, 4, 2, 3, 3, 3, 4)       # ldb 3 < the 4 rows of B^T
    with pytest.raises(cublas.CUBLASError):
        cublas.gemmEx(*args)
    args, keep = _gemm_args(cp, B, A, C, 4, 2, 3, 4, 3, 4, types=(0, 2))     # float32 in, float16 out
    with pytest.raises(cublas.CUBLASError):
        cublas.gemmEx(*args)
    args, keep = _gemm_args(cp, B, A, C[:1], 4, 2, 3, 4, 3, 4)
    big = cp.zeros((1, 4), np.float32)
    args, keep = _gemm_args(cp, B, A, big, 4, 2, 3, 4, 3, 4)     # C holds 4 floats, the call writes 8
    with pytest.raises(RuntimeError, match="outside the allocation"):
        cublas.gemmEx(*args)
    args, keep = _gemm_args(cp, B, A, C, 4.0, 2, 3, 4, 3, 4)     # a float where Cython wants an int
    with pytest.raises(TypeError, match="'m' must be an integer"):
        cublas.gemmEx(*args)


def _batched_args(cp, a, b, c, m, n, k, strides):
    from cupy_backends.cuda.libs import cublas

    one, zero = np.array(1, np.float32), np.array(0, np.float32)
    sa, sb, sc = strides
    return (cp.cuda.get_cublas_handle(), 0, 0, m, n, k, one.ctypes.data, a.data.ptr, 0, m, sa, b.data.ptr, 0, k, sb,
            zero.ctypes.data, c.data.ptr, 0, m, sc, 2, cublas.CUBLAS_COMPUTE_32F, cublas.CUBLAS_GEMM_DEFAULT), (one, zero)


def test_a_product_whose_output_overlaps_an_input_or_itself_is_refused(cp):
    """What a GPU would compute in an order of its own: C written over A or B (in place), and
    batch entries of C that share elements. Each refused by name; the same call with its own
    output runs."""
    from cupy_backends.cuda.libs import cublas

    A, B, C = cp.ones((2, 2, 2), np.float32), cp.ones((2, 2, 2), np.float32), cp.zeros((2, 2, 2), np.float32)
    args, keep = _batched_args(cp, A, B, C, 2, 2, 2, (4, 4, 4))
    cublas.gemmStridedBatchedEx(*args)
    assert cp.asnumpy(C).tolist() == [[[2.0, 2.0]] * 2] * 2
    args, keep = _batched_args(cp, A, B, A, 2, 2, 2, (4, 4, 4))      # C is A: written while read
    with pytest.raises(RuntimeError, match="overlaps its input A"):
        cublas.gemmStridedBatchedEx(*args)
    wide = cp.zeros((3, 2), np.float32)
    args, keep = _batched_args(cp, A, B, wide, 2, 2, 2, (4, 4, 2))   # entry 1 starts inside entry 0
    with pytest.raises(RuntimeError, match="write the same elements"):
        cublas.gemmStridedBatchedEx(*args)
    halves = cp.zeros((16,), np.float32)
    a, b, c = halves[8:12], halves[:4], halves[10:14]               # (views kept: the double finds them by address)
    args, keep = _gemm_args(cp, a, b, c, 2, 2, 2, 2, 2, 2)          # C shares two floats with A
    with pytest.raises(RuntimeError, match="overlaps its input A"):
        cublas.gemmEx(*args)


def test_nccl_refuses_a_strided_buffer(cp, monkeypatch):
    """NCCL reads ``count`` items one after another from the pointer: a strided view's pointer
    with its size would reduce the wrong elements, so the double refuses it."""
    from tests.cupy_double.double import NcclCommunicator

    x = cp.zeros((4, 4), np.float32)[:, ::2]
    comm = object.__new__(NcclCommunicator)
    with pytest.raises(RuntimeError, match="strided view"):
        comm._array(x.data.ptr, x.size, 7)


def test_an_nccl_id_of_the_wrong_type_or_length_is_refused(cp):
    """CuPy 13 gave the id as a tuple of 128 ints; CuPy 14 takes 128 bytes."""
    nccl = cp.cuda.nccl
    with pytest.raises(TypeError, match="commId"):
        nccl.NcclCommunicator(1, tuple(range(128)), 0)                   # the planted mistake
    with pytest.raises(ValueError, match="commId length 127"):
        nccl.NcclCommunicator(1, bytes(127), 0)
    with pytest.raises(TypeError, match="integer"):
        nccl.NcclCommunicator(1.0, nccl.get_unique_id(), 0)
    assert len(nccl.get_unique_id()) == 128 and nccl.NCCL_FLOAT32 == 7


# ---------------------------------------------------------------- the other rules
def test_reductions_return_0d_arrays_and_host_reads_are_explicit(cp):
    x = cp.asarray(np.arange(4, dtype=np.float32))
    total = x.sum()
    assert type(total) is cp.ndarray and total.ndim == 0
    assert float(total) == 6.0 and total.item() == 6.0 and int(x.max()) == 3 and bool(x.any())


def test_a_method_refuses_a_keyword_cupys_signature_lacks(cp):
    x = cp.asarray(np.arange(4, dtype=np.float32))
    with pytest.raises(TypeError, match="max\\(\\) got an unexpected keyword argument 'initial'"):
        x.max(initial=0)                       # NumPy takes it; CuPy 14's max(axis, out, keepdims) does not
    assert float(x.max(axis=0, keepdims=False)) == 3.0 and x.reshape(2, 2, order="C").shape == (2, 2)


def test_output_dtypes_follow_cupys_loop_tables(cp):
    """The first loop every input can be cast to safely; a Python scalar fits its kind."""
    i8 = cp.zeros(2, np.int8)
    f16 = cp.zeros(2, np.float16)
    i32 = cp.zeros(2, np.int32)
    f32 = cp.zeros(2, np.float32)
    assert (i8 + f16).dtype == np.float16
    assert (i32 + f32).dtype == np.float64                               # no 'if->' loop: 'dd->d'
    assert (f16 * 0.5).dtype == np.float16 and (i8 + 1).dtype == np.int8
    assert cp.exp(i32).dtype == np.float64 and cp.exp(f16).dtype == np.float16
    assert "ff->f" in cp.add.types and cp.add.types == SPEC["modules"]["cupy"]["add"]["types"]
    with pytest.raises(TypeError, match="Wrong type"):
        cp.bitwise_and(f32, f32)


def test_random_state_draws_float32_and_float64_only(cp):
    rs = cp.random.RandomState(0, method=cp.cuda.curand.CURAND_RNG_PSEUDO_PHILOX4_32_10)
    assert rs.standard_normal((3,), dtype=np.float32).dtype == np.float32
    with pytest.raises(TypeError, match="only supports float32 and float64"):
        rs.random_sample((3,), dtype=np.float16)
    assert cp.cuda.curand.CURAND_RNG_PSEUDO_PHILOX4_32_10 == 161           # CuPy 14.2's value


def test_an_elementwise_kernel_runs_its_reference_and_a_changed_one_is_refused(cp):
    @double.elementwise_reference("test_axpy", "T x, float64 a", "T y")
    def _axpy(x, a, y):
        y += y.dtype.type(a) * x

    kernel = cp.ElementwiseKernel("T x, float64 a", "T y", "y += (T)a * x;", "test_axpy")
    y = cp.zeros(3, np.float32)
    kernel(cp.asarray(np.array([1.0, -1.0, 2.0], np.float32)), 0.5, y)
    assert cp.asnumpy(y).tolist() == [0.5, -0.5, 1.0]
    with pytest.raises(NotImplementedError, match="changed its parameters"):
        cp.ElementwiseKernel("T x", "T y", "y = x;", "test_axpy")     # the planted mistake
    with pytest.raises(NotImplementedError, match="no NumPy reference"):
        cp.ElementwiseKernel("T x", "T y", "y = x;", "never_registered")


def test_a_name_cupy_has_but_the_double_does_not_model_says_so(cp):
    with pytest.raises(NotImplementedError, match="does not model cupy.cuda.runtime.malloc"):
        cp.cuda.runtime.malloc(16)


def test_allow_synchronize_false_forbids_host_reads(cp):
    import cupyx

    x = cp.ones(2, np.float32)
    with cupyx.allow_synchronize(False):
        y = x * 2                                            # device work: fine
        with pytest.raises(cupyx.DeviceSynchronized):
            y.sum().item()
    assert float(y.sum()) == 4.0


def test_an_asynchronous_copy_to_pinned_memory_is_no_host_read_and_stays_inside_its_array(cp):
    """MemoryPointer.copy_to_host_async (CuPy: no synchronisation declared, so allowed under
    allow_synchronize(False)) copies the array's bytes to a pinned host array, and refuses a size
    that runs past the array."""
    import cupyx

    x = cp.arange(5, dtype=np.int32)
    host = cupyx.zeros_pinned(5, dtype=np.int32)
    with cupyx.allow_synchronize(False):
        x.data.copy_to_host_async(host.ctypes.data, host.nbytes)
    assert host.tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(RuntimeError, match="run outside its array's 20 dense bytes"):
        x.data.copy_to_host_async(host.ctypes.data, 24)


def test_a_captured_graph_runs_nothing_until_launched_and_then_reads_its_arrays_as_they_are(cp):
    """Stream capture as CUDA does it: nothing of the capture runs (an array that lived before
    holds its bytes after end_capture, one made during it holds NaN), each launch runs the calls
    again with the arrays' values of the time (a scalar stays the one captured), and counts as
    one launch."""
    a = cp.asarray(np.arange(4, dtype=np.float32))
    total = cp.zeros(4, np.float32)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        assert stream.is_capturing()
        doubled = a * 2.0
        total += doubled
        graph = stream.end_capture()
    assert not stream.is_capturing()
    assert total.get().tolist() == [0, 0, 0, 0] and np.isnan(doubled.get()).all()
    before = double.launches()
    graph.launch()
    graph.launch()
    assert double.launches() - before == collections.Counter({"graph": 2})
    assert total.get().tolist() == [0, 4, 8, 12]
    a[...] = 1.0
    graph.launch()
    assert total.get().tolist() == [2, 6, 10, 14] and doubled.get().tolist() == [2, 2, 2, 2]


def test_a_capture_refuses_what_cuda_refuses_in_one(cp):
    """No capture on the legacy null stream; while capturing, no copy from or to the host, no
    host read, no synchronisation and no random draw."""
    import cupyx

    x = cp.ones(3, np.float32)
    with pytest.raises(RuntimeError, match="cannot capture on the default"):
        cp.cuda.get_current_stream().begin_capture()
    stream = cp.cuda.Stream(non_blocking=True)
    refused = [(lambda: cp.asarray(np.ones(3, np.float32)), "H2D transfers are disallowed"),
               (lambda: x.get(), "is not permitted when stream is capturing"),
               (lambda: float(x.sum()), "is not permitted when stream is capturing"),
               (lambda: x.data.copy_to_host_async(cupyx.zeros_pinned(3, np.float32).ctypes.data, 12),
                "D2H transfers are disallowed"),
               (lambda: stream.synchronize(), "is not permitted when stream is capturing"),
               (lambda: cp.random.standard_normal(3), "does not model cuRAND inside a captured graph")]
    for call, message in refused:
        with stream:
            stream.begin_capture()
            try:
                with pytest.raises((RuntimeError, NotImplementedError), match=message):
                    call()
            finally:
                stream.end_capture()


def test_a_captured_cublas_product_keeps_the_alpha_it_was_captured_with(cp):
    """Host pointer mode: cuBLAS reads alpha and beta when the call is captured, so the graph's
    product uses those, whatever the host's memory holds at the launch; its operands are read at
    the launch."""
    import ctypes

    from cupy_backends.cuda.libs import cublas

    a = cp.asarray(np.eye(2, dtype=np.float32))
    b = cp.asarray(np.full((2, 2), 3.0, np.float32))
    c = cp.zeros((2, 2), np.float32)
    alpha, beta = ctypes.c_float(2.0), ctypes.c_float(0.0)
    r32 = cublas.CUDA_R_32F if hasattr(cublas, "CUDA_R_32F") else 0
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        cublas.gemmEx(cp.cuda.get_cublas_handle(), 0, 0, 2, 2, 2, ctypes.addressof(alpha), a.data.ptr, r32, 2,
                      b.data.ptr, r32, 2, ctypes.addressof(beta), c.data.ptr, r32, 2, cublas.CUBLAS_COMPUTE_32F, -1)
        graph = stream.end_capture()
    alpha.value = 5.0
    b[...] = 1.0
    graph.launch()
    assert c.get().tolist() == [[2, 2], [2, 2]]


def test_the_profilers_benchmark_checks_its_arguments_and_times_each_call(cp):
    from cupyx.profiler import benchmark

    calls = []
    result = benchmark(lambda: calls.append(1), n_repeat=3, n_warmup=2)
    assert len(calls) == 5 and result.cpu_times.shape == (3,) and result.gpu_times.shape == (1, 3)
    with pytest.raises(ValueError, match="`args` should be of tuple type"):
        benchmark(print, args=[1])
    with pytest.raises(ValueError, match="`n_repeat` should be an integer"):
        benchmark(print, n_repeat=2.0)


def test_devices_are_configurable(cp):
    assert cp.cuda.runtime.getDeviceCount() == 2
    with cp.cuda.Device(1):
        assert cp.cuda.runtime.getDevice() == 1
    assert cp.cuda.runtime.getDevice() == 0
    with pytest.raises(RuntimeError, match="invalid device"):
        cp.cuda.Device(2)


def test_the_spec_is_what_the_installed_cupy_offers():
    """Regenerating the module part of the spec and ``ndarray``'s keywords from the installed
    CuPy gives the checked-in ones (needs the ``[nvrtc]`` extra's CuPy, of the spec's version)."""
    if double.installed():
        pytest.skip("the double is in place of CuPy in this run")
    real = pytest.importorskip("cupy")
    if real.__version__ != SPEC["cupy_version"]:
        pytest.skip(f"the spec is of CuPy {SPEC['cupy_version']}, this is {real.__version__}")
    from tests.cupy_double import make_spec

    for name in make_spec.MODULES:
        assert json.dumps(make_spec.module_spec(name), sort_keys=True) == json.dumps(SPEC["modules"][name],
                                                                                 sort_keys=True), name
    assert make_spec.method_keywords(real.ndarray) == SPEC["ndarray_keywords"]


def test_the_runner_prints_its_usage_for_help_and_names_a_script_that_is_not_there():
    repo = Path(__file__).resolve().parents[2]
    run = [sys.executable, "-m", "tests.cupy_double.run"]
    shown = subprocess.run(run + ["--help"], cwd=repo, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and "python -m tests.cupy_double.run -m transformer" in shown.stdout
    missing = subprocess.run(run + ["no_such_script.py"], cwd=repo, capture_output=True, text=True, timeout=120)
    assert missing.returncode == 1 and "no script 'no_such_script.py'" in missing.stderr
