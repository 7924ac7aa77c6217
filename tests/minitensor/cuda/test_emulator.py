"""The CPU emulator of CUDA (minitensor.cuda.emulator): CUDA's semantics (built-ins, warp
shuffles and votes, shared memory, FMA contraction, 16-bit conversions bit for bit), CuPy's
calling convention, and every check it makes, each shown to catch a deliberately broken
kernel: a deadlock, a race, an out-of-bounds access, a wrong argument, a launch limit, an
unwritten output. The real kernels also pass the race and memory checks.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F
from minitensor import cuda
from minitensor.cuda import cross_entropy as ce_kernels
from minitensor.cuda import adam as adam_kernels
from minitensor.cuda import dropout as dropout_kernels
from minitensor.cuda import loss_scale as loss_scale_kernels
from minitensor.cuda import bias_relu as bias_relu_kernels
from minitensor.cuda import cast as cast_kernels
from minitensor.cuda import emulator, sources
from minitensor.cuda import flash_attention as flash_kernels
from minitensor.cuda import layer_norm as ln_kernels
from minitensor.cuda import softmax as softmax_kernels
from minitensor.cuda import turns
from minitensor.cuda.emulator import EmulatorError, compile_source

from ...helpers import require


@pytest.fixture(autouse=True, scope="module")
def _needs_the_emulator():
    ok, why = emulator.available()
    require(ok, f"the CUDA emulator cannot run here: {why}")


def broken(filename: str, old: str, new: str) -> str:
    """The text of one of our kernels with ``old`` replaced by ``new`` (which must occur once in
    the file itself), then common.cuh pasted in as the launchers do."""
    text = (sources.FOLDER / filename).read_text()
    assert text.count(old) == 1, f"{old!r} is not (once) in {filename}"
    return sources.with_common(text.replace(old, new))


def _ln_args(rows=4, d=8, rows_dtype=np.int64):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, d)).astype(np.float32)
    w, b = np.ones(d, np.float32), np.zeros(d, np.float32)
    y, mean, rstd = emulator.arrays.empty_like(x), emulator.arrays.empty(rows, np.float32), emulator.arrays.empty(
        rows, np.float32)
    return (x, w, b, y, mean, rstd, rows_dtype(rows), np.int32(d), np.float64(1e-5))


# ---------------------------------------------------------------- CUDA semantics
IDS = r'''
__global__ void ids(int* out) {
    const int block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const int thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    int* o = out + 6 * (block * blockDim.x * blockDim.y * blockDim.z + thread);
    o[0] = threadIdx.x; o[1] = threadIdx.y; o[2] = threadIdx.z;
    o[3] = blockIdx.x; o[4] = blockIdx.y; o[5] = blockIdx.z;
}
'''


def test_builtins_number_threads_and_blocks_as_cuda_does():
    grid, block = (2, 3, 2), (4, 2, 3)
    out = emulator.arrays.empty((2 * 3 * 2 * 4 * 2 * 3, 6), np.int32)
    compile_source(IDS, "ids")(grid, block, (out,))
    bz, by, bx, tz, ty, tx = np.meshgrid(*[np.arange(n) for n in grid[::-1] + block[::-1]], indexing="ij")
    expected = np.stack([tx, ty, tz, bx, by, bz], axis=-1).reshape(-1, 6)
    np.testing.assert_array_equal(out, expected)


def _mappings() -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs Linux's /proc/self/maps")
def test_kernels_share_one_set_of_fiber_stacks_so_many_kernels_fit_in_one_process():
    """Each kernel a process loads runs its own copy of the runtime, whose 1024 fibers need a stack
    and a guard page each: two mappings a thread. The stacks are mapped once a process and every
    kernel's launches run on them, so the mappings after three launches of three kernels of 1024
    threads are those before, give or take the libraries' own, and a test run that loads a
    thousand kernels stays under Linux's 65530."""
    out = emulator.arrays.empty((1024, 6), np.int32)
    kernels = [compile_source(IDS + f"\n// copy {i}\n", "ids") for i in range(3)]
    kernels[0]((1,), (1024,), (out,))                 # the loader's and the runtime's own mappings, once
    before = _mappings()
    for k in kernels:
        for _ in range(3):
            k((1,), (1024,), (out,))
    assert _mappings() - before < 100, (before, _mappings())   # kept stacks would add 2 x 1024 a kernel


FIBERS = r"""
// each thread keeps values on its fiber's stack across a barrier: a fiber resumed on a stack that
// another kernel's threads have written over since would read them back wrong, or jump nowhere
__global__ void stack_sum(float* out, int k) {
    volatile float own[64];
    for (int j = 0; j < 64; ++j) own[j] = threadIdx.x + j * k;
    __syncthreads();
    float s = 0.0f;
    for (int j = 0; j < 64; ++j) s += own[j];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
// with stop != 0, thread 5 never reaches the barrier that the others wait at: a deadlock, which
// leaves the other threads' fibers inside the kernel
__global__ void barrier_unless(float* out, int stop) {
    if (!(stop && threadIdx.x == 5)) __syncthreads();
    out[threadIdx.x] = threadIdx.x + 1.0f;
}
"""


def test_kernels_that_take_turns_on_the_shared_fibers_each_run_their_own_code_and_arguments():
    """A thread's fiber, after its kernel returns, waits where the next launch resumes it, whichever
    kernel that is: every kernel (a library with its own runtime) runs on the same fibers. Two
    kernels take turns with blocks of several sizes (fibers resumed, and fibers started for the
    first time); each launch must run its own kernel with its own arguments, and keep its
    threads' values on their stacks across a barrier."""
    first, second = (compile_source(FIBERS + f"\n// copy {i}\n", "stack_sum") for i in range(2))
    out = emulator.arrays.empty(2 * 256, np.float32)
    thread = np.arange(256, dtype=np.float32)
    for k, (kernel, threads) in enumerate([(first, 256), (second, 32), (first, 256), (first, 128), (second, 256),
                                           (first, 256)]):
        kernel((2,), (threads,), (out, np.int32(k)))
        expected = np.tile(64 * thread[:threads] + k * 2016, 2)   # sum over j < 64 of (t + j k)
        np.testing.assert_array_equal(out[:2 * threads], expected, err_msg=f"launch {k}")


def test_a_kernel_that_failed_starts_its_threads_afresh_at_its_next_launch():
    """A deadlock ends a launch with threads still inside the kernel, waiting at the barrier. The
    kernel's next launch must not resume them (they would finish the failed launch, with its
    arguments): it runs every thread from the start and gives the right answer, every time."""
    kernel = compile_source(FIBERS, "barrier_unless")
    out = emulator.arrays.empty(64, np.float32)
    for attempt in range(2):
        with pytest.raises(EmulatorError, match="deadlock in barrier_unless"):
            kernel((1,), (64,), (out, np.int32(1)))
        out[:] = -1.0
        kernel((1,), (64,), (out, np.int32(0)))
        np.testing.assert_array_equal(out, np.arange(1, 65, dtype=np.float32), err_msg=f"attempt {attempt}")


@pytest.mark.parametrize("check", [None, "race"])
def test_kernels_build_against_the_precompiled_header_into_the_same_library(check, tmp_path, monkeypatch):
    """With GCC, a kernel's unit includes emulator.h from a folder that also holds the header
    precompiled for the check's flags: GCC loads it (`-H` marks it `!`) instead of parsing the header
    again, and the library is byte for byte the one built from the header's text. (The memory
    check's runner carries its build folder's path in its line tables, so it differs anyway.)"""
    cxx = emulator.compiler()
    if not emulator._is_gcc(cxx):
        pytest.skip("the precompiled header is GCC's (.gch)")
    source, expression = sources.source("layer_norm.cu"), "layer_norm_forward<float, 1>"
    monkeypatch.setenv("MINITENSOR_EMULATOR_CACHE", str(tmp_path / "with"))
    built = emulator.build_unit(source, expression, check)
    header = emulator.precompiled_header(check)
    assert header is not None and (header / "emulator.h.gch").exists()
    assert not (built.parent / "emulator.h").exists()           # so #include "emulator.h" finds the -I folder
    shown = subprocess.run([cxx, *emulator._flags(check), "-I", str(header), "-H", "-fsyntax-only", "unit.cpp"],
                           cwd=built.parent, capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert shown.stderr.splitlines()[0] == f"! {header / 'emulator.h.gch'}"
    monkeypatch.setenv("MINITENSOR_EMULATOR_CACHE", str(tmp_path / "without"))
    monkeypatch.setattr(emulator, "precompiled_header", lambda check=None: None)
    plain = emulator.build_unit(source, expression, check)
    assert (plain.parent / "emulator.h").exists()
    assert plain.read_bytes() == built.read_bytes()

SHUFFLES = r'''
__global__ void shuffles(const int* in, int* out, int delta, int width) {
    const int t = threadIdx.x, n = blockDim.x;
    const int v = in[t];
    out[0 * n + t] = __shfl_sync(0xffffffffu, v, delta, width);
    out[1 * n + t] = __shfl_up_sync(0xffffffffu, v, delta, width);
    out[2 * n + t] = __shfl_down_sync(0xffffffffu, v, delta, width);
    out[3 * n + t] = __shfl_xor_sync(0xffffffffu, v, delta, width);
    out[4 * n + t] = static_cast<int>(__ballot_sync(0xffffffffu, v & 1));
    out[5 * n + t] = __all_sync(0xffffffffu, v >= 0);
    out[6 * n + t] = __any_sync(0xffffffffu, v > 1000);
}
'''


def _shuffle_model(v, delta, width):
    """CUDA's documented shuffle results, lane by lane, for one 64-thread block (2 warps)."""
    out = np.zeros((7, v.size), np.int64)
    for t in range(v.size):
        lane, base = t % 32, t - t % 32
        seg = lane & ~(width - 1)
        out[0, t] = v[base + seg + (delta & (width - 1))]
        out[1, t] = v[t - delta] if (lane & (width - 1)) >= delta else v[t]
        out[2, t] = v[t + delta] if (lane & (width - 1)) + delta < width else v[t]
        src = lane ^ delta
        out[3, t] = v[base + src] if (src & ~(width - 1)) <= seg and src < 32 else v[t]
        out[4, t] = np.int32(np.uint32(sum(1 << i for i in range(32) if v[base + i] & 1)).view(np.int32))
        out[5, t] = int(all(v[base:base + 32] >= 0))
        out[6, t] = int(any(v[base:base + 32] > 1000))
    return out


@pytest.mark.parametrize("delta,width", [(1, 32), (5, 32), (3, 16), (2, 8), (17, 32), (6, 4)])
def test_warp_shuffles_and_votes_follow_cudas_rules(delta, width):
    v = np.random.default_rng(delta * 100 + width).integers(0, 1000, 64).astype(np.int32)
    out = emulator.arrays.empty(7 * 64, np.int32)
    compile_source(SHUFFLES, "shuffles")((1,), (64,), (v, out, np.int32(delta), np.int32(width)))
    np.testing.assert_array_equal(out.reshape(7, 64), _shuffle_model(v, delta, width))


REVERSE = r'''
#include "common.cuh"
template <typename T>
__global__ void reverse_in_block(const T* in, T* out) {
    MT_DYNAMIC_SHARED(T, buf);
    const int n = blockDim.x, t = threadIdx.x, base = blockIdx.x * n;
    buf[t] = in[base + t];
    __syncthreads();
    out[base + t] = buf[n - 1 - t];
}
'''


def test_dynamic_shared_memory_and_barriers_let_threads_exchange_values():
    x = np.arange(3 * 96, dtype=np.float64)
    out = emulator.arrays.empty_like(x)
    compile_source(REVERSE, "reverse_in_block<double>")((3,), (96,), (x, out), shared_mem=96 * 8)
    np.testing.assert_array_equal(out, x.reshape(3, 96)[:, ::-1].ravel())


FMA = r'''
__global__ void axpy(const float* a, const float* b, const float* c, float* out) {
    out[threadIdx.x] = a[threadIdx.x] * b[threadIdx.x] + c[threadIdx.x];
}
'''


@pytest.mark.skipif(not emulator._cpu_has_fma(), reason="this CPU has no FMA instruction")
def test_a_times_b_plus_c_is_contracted_into_one_rounding_as_on_the_gpu():
    """(1 + 2⁻¹²)² - (1 + 2⁻¹¹) = 2⁻²⁴ exactly. Rounding the product first loses it (0);
    a fused multiply-add, which nvcc and NVRTC emit, keeps it."""
    a = np.full(1, 1 + 2.0**-12, np.float32)
    c = np.full(1, -(1 + 2.0**-11), np.float32)
    assert (a * a + c)[0] == 0.0                        # NumPy: two roundings
    out = emulator.arrays.empty(1, np.float32)
    compile_source(FMA, "axpy")((1,), (1,), (a, a, c, out))
    assert out[0] == np.float32(2.0**-24)


CONVERT = r'''
#include "common.cuh"
template <typename H>
__global__ void convert(const H* h, float* widened, const float* f, H* narrowed, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        widened[i] = widen(h[i]);
        narrowed[i] = narrow<H>(f[i]);
    }
}
'''


def _conversion_inputs():
    """Every 16-bit pattern, and floats that probe rounding: random bits, halfway cases
    between neighbouring halves (normal and subnormal), the overflow edge, tiny values."""
    rng = np.random.default_rng(0)
    h = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    halves = h.view(np.float16).astype(np.float32)
    finite = np.isfinite(halves)
    mids = ((halves[finite][:-1].astype(np.float64) + halves[finite][1:]) / 2).astype(np.float32)
    edges = np.array([65504, 65519.996, 65520, 65536, 2.0**-24, 2.0**-25, 3 * 2.0**-26, 2.0**-14, 1e-10, 0.0, -0.0,
                      np.inf, -np.inf], np.float32)
    rand = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    f = np.concatenate([edges, mids, -mids, rand, halves])
    f = np.concatenate([f, np.zeros(65536 * 7 - f.size % 65536, np.float32)])[: 65536 * 7]
    return h, f


def _run_convert(t: str, storage, h_bits, f):
    n = f.size
    h = np.resize(h_bits, n).view(storage)
    widened, narrowed = emulator.arrays.empty(n, np.float32), emulator.arrays.empty(n, storage)
    compile_source(CONVERT, f"convert<{t}>")(((n + 255) // 256,), (256,), (h, widened, f, narrowed, np.int32(n)))
    return h, widened, narrowed


def _same_bits_or_both_nan(got, want):
    nan = np.isnan(want.astype(np.float32))
    np.testing.assert_array_equal(np.isnan(got.astype(np.float32)), nan)
    np.testing.assert_array_equal(got[~nan].view(np.uint16 if got.itemsize == 2 else np.uint32),
                                  want[~nan].view(np.uint16 if want.itemsize == 2 else np.uint32))


def test_float16_conversions_round_bit_for_bit_as_ptx_cvt():
    """cvt.f32.f16 is exact and cvt.rn.f16.f32 rounds to nearest, ties to even, keeping
    subnormals: IEEE 754's conversions, which NumPy implements; every non-NaN bit agrees."""
    h_bits, f = _conversion_inputs()
    h, widened, narrowed = _run_convert("f16", np.float16, h_bits, f)
    with np.errstate(over="ignore", invalid="ignore"):
        _same_bits_or_both_nan(widened, h.astype(np.float32))
        _same_bits_or_both_nan(narrowed, f.astype(np.float16))


def test_bfloat16_conversions_round_bit_for_bit_as_ml_dtypes():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf16 = np.dtype(ml_dtypes.bfloat16)
    h_bits, f = _conversion_inputs()
    h, widened, narrowed = _run_convert("bf16", bf16, h_bits, f)
    with np.errstate(over="ignore", invalid="ignore"):
        _same_bits_or_both_nan(widened, h.astype(np.float32))
        _same_bits_or_both_nan(narrowed, f.astype(bf16))


# ---------------------------------------------------------------- CuPy's calling convention
def test_arguments_are_marshalled_as_cupy_marshals_them():
    k = emulator.kernel("layer_norm.cu", "layer_norm_forward<float, 1>")
    args = _ln_args()
    k((1,), (128,), args)                                        # numpy scalars of the right widths
    with pytest.raises(TypeError, match="must be tuples"):
        k([1], (128,), args)                                     # CuPy's Function takes tuples only
    with pytest.raises(EmulatorError, match=r"argument 7 `D` \(int, 4 bytes\).*Python int.*8 bytes"):
        k((1,), (128,), args[:7] + (8,) + args[8:])              # a Python int is an int64
    k((0,), (128,), args)                                        # a 0 in the grid becomes 1, as in CuPy
    with pytest.raises(TypeError, match="Unsupported type"):
        k((1,), (128,), args[:8] + ("1e-5",))


def test_fresh_device_arrays_read_as_nan_so_unwritten_entries_show():
    assert np.isnan(emulator.arrays.empty((3, 4), np.float32)).all()
    assert np.isnan(emulator.arrays.empty_like(np.zeros(5, np.float16))).all()
    assert (emulator.arrays.empty(4, np.int32) == -1).all()


# ---------------------------------------------------------------- each check catches a broken kernel
EARLY_EXIT = r'''
#include "common.cuh"
template <typename T>
__global__ void early_exit(T* out) {
    const int lane = threadIdx.x % MT_WARP;
    if (lane >= 16) return;                       // half the warp leaves...
    out[threadIdx.x] = warp_sum(T(1));            // ...and the other half waits for it here
}
template <typename T>
__global__ void skips_barrier(T* out) {
    if (threadIdx.x == 5) return;                 // one thread never reaches the barrier
    __syncthreads();
    out[threadIdx.x] = T(1);
}
__global__ void wrong_mask(int* out) {
    out[threadIdx.x] = __shfl_sync(threadIdx.x < 16 ? 0xffffffffu : 0xfffffffeu, 1, 1);
}
__global__ void wild_pointer(float* out) {
    out[threadIdx.x] = *reinterpret_cast<const float*>(static_cast<unsigned long long>(64));
}
'''


def test_an_early_return_before_a_shuffle_is_a_reported_deadlock_not_a_hang():
    out = emulator.arrays.empty(64, np.float32)
    with pytest.raises(EmulatorError) as e:
        compile_source(EARLY_EXIT, "early_exit<float>")((2,), (64,), (out,))
    msg = str(e.value)
    assert "deadlock in early_exit<float>, block (0, 0, 0)" in msg
    assert "lanes 0-15 wait at __shfl_xor_sync (mask 0xffffffff), but lanes 16-31 exited without reaching it" in msg


def test_a_barrier_that_one_thread_skips_is_a_reported_deadlock():
    out = emulator.arrays.empty(64, np.float32)
    with pytest.raises(EmulatorError, match=r"skips_barrier<float>, block \(0, 0, 0\).*threads 0-4, 6-63 wait at "
                                            r"__syncthreads, which threads 5 never reach"):
        compile_source(EARLY_EXIT, "skips_barrier<float>")((1,), (64,), (out,))


def test_lanes_that_disagree_on_a_shuffles_mask_are_reported():
    out = emulator.arrays.empty(32, np.int32)
    with pytest.raises(EmulatorError, match=r"wrong_mask, block \(0, 0, 0\), thread \(16, 0, 0\): lane 16 calls "
                                            r"__shfl_sync with mask 0xfffffffe while other lanes of warp 0 wait at __shfl_sync with mask 0xffffffff"):
        compile_source(EARLY_EXIT, "wrong_mask")((1,), (32,), (out,))


def test_a_wild_pointer_is_an_error_naming_the_thread_and_the_process_survives():
    out = emulator.arrays.empty(32, np.float32)
    with pytest.raises(EmulatorError, match=r"wild_pointer, block \(0, 0, 0\), thread \(0, 0, 0\): segmentation "
                                            r"fault at address 0x40"):
        compile_source(EARLY_EXIT, "wild_pointer")((1,), (32,), (out,))
    test_builtins_number_threads_and_blocks_as_cuda_does()      # and the next launch runs as usual


LN_WITHOUT_BARRIER = ("layer_norm.cu", "    __syncthreads();\n", "")


def _ln_backward_args(rows=16, d=8):
    rng = np.random.default_rng(1)
    x, dy = rng.standard_normal((2, rows, d)).astype(np.float32)
    mean, rstd = x.mean(-1).astype(np.float32), np.ones(rows, np.float32)
    dx = emulator.arrays.empty_like(x)
    pg, pb = emulator.arrays.empty((4, d), np.float32), emulator.arrays.empty((4, d), np.float32)
    return (dy, x, np.ones(d, np.float32), mean, rstd, dx, pg, pb, np.int64(rows), np.int32(d), np.int64(4)), pg


def test_a_removed_syncthreads_is_reported_as_a_shared_memory_race():
    """LayerNorm's backward combines its warps' partial dγ in shared memory after a barrier.
    Without the barrier, warp 0 reads rows the other warps have not written yet."""
    args, _ = _ln_backward_args()
    name = "layer_norm_backward<float, 1, 4>"
    emulator.kernel("layer_norm.cu", name, "race")((4,), (128,), args, shared_mem=2 * 4 * 8 * 4)  # intact: no race
    kernel = emulator.EmulatedKernel(broken(*LN_WITHOUT_BARRIER), name, "race")
    with pytest.raises(EmulatorError, match=r"shared-memory race in layer_norm_backward<float, 1, 4>, block "
                                            r"\(0, 0, 0\), thread \(\d+, 0, 0\): it writes byte \d+ of dynamic shared "
                                            r"memory, which thread \d+ read since the last __syncthreads"):
        kernel((4,), (128,), args, shared_mem=2 * 4 * 8 * 4)


def test_without_the_race_check_the_same_bug_still_shows_as_nan_from_unwritten_shared_memory():
    args, pg = _ln_backward_args()
    emulator.EmulatedKernel(broken(*LN_WITHOUT_BARRIER), "layer_norm_backward<float, 1, 4>")(
        (4,), (128,), args, shared_mem=2 * 4 * 8 * 4)
    assert np.isnan(pg).any()


CP_ASYNC = r'''
#include "common.cuh"
// thread i copies src[i] (or, with `zero`, zeros) into s[i] with cp.async, reads s[i] before or
// after waiting (out[i]), then reads its neighbour's s[i + 1] after a barrier, or without one
__global__ void copy_then_read(const float* src, float* out, int zero, int read_first, int barrier) {
    __shared__ __align__(16) float s[64];
    const int i = threadIdx.x;
    cp_async<4>(&s[i], src + i, !zero);
    cp_async_commit();
    if (!read_first) cp_async_wait<0>();
    out[i] = s[i];
    if (read_first) cp_async_wait<0>();
    if (barrier) __syncthreads();
    out[64 + i] = s[(i + 1) % 64];
}

// two groups: after wait<1> the first has landed and the second not; after wait<0> both
__global__ void two_groups(const float* src, float* out) {
    __shared__ __align__(16) float s[2][64];
    const int i = threadIdx.x;
    cp_async<16>(&s[0][4 * i], src + 4 * i, true);
    cp_async_commit();
    cp_async<16>(&s[1][4 * i], src + 64 + 4 * i, true);
    cp_async_commit();
    cp_async_wait<1>();
    for (int k = 0; k < 4; ++k) out[4 * i + k] = s[0][4 * i + k], out[64 + 4 * i + k] = s[1][4 * i + k];
    cp_async_wait<0>();
    for (int k = 0; k < 4; ++k) out[128 + 4 * i + k] = s[1][4 * i + k];
}

// a copy never waited for; and a 16-byte copy from an address 4 bytes past a 16-byte boundary
__global__ void never_waits(const float* src) {
    __shared__ __align__(16) float s[64];
    cp_async<4>(&s[threadIdx.x], src + threadIdx.x, true);
    cp_async_commit();
}
__global__ void misaligned(const float* src) {
    __shared__ __align__(16) float s[8];
    cp_async<16>(&s[0], src + 1, true);
    cp_async_commit();
    cp_async_wait<0>();
}
'''


@pytest.mark.parametrize("zero", [False, True])
def test_cp_async_lands_at_the_wait_and_zero_fills(zero):
    """A cp.async copy is made when its thread waits: read after the wait, a thread sees src (or
    zeros, when the copy is told to read nothing), and after a barrier so does its neighbour.
    Read before the wait, the bytes are still those of unwritten shared memory (NaN)."""
    src = np.arange(1, 65, dtype=np.float32)
    want = np.zeros(64, np.float32) if zero else src
    for read_first in (0, 1):
        out = np.full(128, -1.0, np.float32)
        compile_source(CP_ASYNC, "copy_then_read")((1,), (64,), (src, out, np.int32(zero), np.int32(read_first),
                                                                   np.int32(1)))
        if read_first:
            assert np.isnan(out[:64]).all()
        else:
            np.testing.assert_array_equal(out[:64], want)
        np.testing.assert_array_equal(out[64:], np.roll(want, -1))


def test_cp_async_wait_leaves_the_newest_groups_in_flight():
    src = np.arange(1, 129, dtype=np.float32)
    out = np.full(192, -1.0, np.float32)
    compile_source(CP_ASYNC, "two_groups")((1,), (16,), (src, out))
    np.testing.assert_array_equal(out[:64], src[:64])
    assert np.isnan(out[64:128]).all()
    np.testing.assert_array_equal(out[128:], src[64:])


def test_a_neighbours_read_of_a_cp_async_copy_without_a_barrier_is_a_race():
    """The copy's write is tracked at the wait, so a neighbour that reads it with no barrier in
    between races with it, as on the GPU, where the copy is only visible to the block after one."""
    src, out = np.arange(64, dtype=np.float32), np.zeros(128, np.float32)
    args = (src, out, np.int32(0), np.int32(0), np.int32(0))
    with pytest.raises(EmulatorError, match=r"shared-memory race in copy_then_read, block \(0, 0, 0\), thread \(1, 0, 0\): it "
                                            r"writes byte 4 of `s` \(static shared memory\), which thread 0 read"):
        compile_source(CP_ASYNC, "copy_then_read", "race")((1,), (64,), args)


def test_cp_async_copies_never_waited_for_and_misaligned_ones_are_errors():
    src = np.arange(64, dtype=np.float32)
    with pytest.raises(EmulatorError, match=r"never_waits, block \(0, 0, 0\), thread \(\d+, 0, 0\): exits with 1 "
                                            r"cp.async copies never waited for"):
        compile_source(CP_ASYNC, "never_waits")((1,), (64,), (src,))
    with pytest.raises(EmulatorError, match=r"cp.async of 16 bytes .* not both 16-byte aligned"):
        compile_source(CP_ASYNC, "misaligned")((1,), (1,), (src,))


def test_a_static_shared_race_names_the_array():
    """Flash attention's forward stages K and V tiles between two barriers; without the
    second, the next tile overwrites Ks while other threads still read it."""
    src = broken("flash_attention.cu", "            }\n        }\n        __syncthreads();\n    }\n    if (has_row) {\n"
                 "        const S inv", "            }\n        }\n    }\n    if (has_row) {\n        const S inv")
    B, H, T, d = 1, 1, 70, 16
    q = np.random.default_rng(2).standard_normal((B, H, T, d)).astype(np.float32)
    out, lse = emulator.arrays.empty_like(q), emulator.arrays.empty((B, H, T), np.float32)
    args = (q, q, q, out, lse, None, np.int64(0), np.int64(0), np.int64(0), np.int64(0), np.int32(H), np.int32(T),
            np.int32(T), np.int32(d), np.float64(0.25))
    name = flash_kernels.names("float", d)[0]
    with pytest.raises(EmulatorError, match=r"shared-memory race in flash_attention_forward<float, 16, 64, 32>.* "
                                            r"byte \d+ of `[KV]s` \(static shared memory\)"):
        emulator.EmulatedKernel(src, name, "race")((1, 2), (64,), args)


def test_an_index_past_the_end_of_an_argument_is_caught_by_the_memory_check():
    """LayerNorm's forward with each row's output shifted by one: the last row writes one
    float past the end of y. AddressSanitizer catches it, and the report names the thread
    and the argument."""
    src = broken("layer_norm.cu", "T* yr = y + row * D;", "T* yr = y + row * D + 1;")
    args = _ln_args()
    with pytest.raises(EmulatorError) as e:
        emulator.EmulatedKernel(src, "layer_norm_forward<float, 1>", "memory")((1,), (128,), args)
    msg = str(e.value)
    assert msg.startswith("out-of-bounds write of 4 bytes in layer_norm_forward<float, 1>, block (0, 0, 0), thread (")
    assert "argument 3 `y`" in msg and "0 bytes past its end" in msg


def test_an_index_past_the_end_of_a_shared_array_is_caught_by_the_memory_check():
    src = broken("flash_attention.cu", "for (int e = threadIdx.x; e < ROWS * D; e += THREADS)",
                 "for (int e = threadIdx.x; e <= ROWS * D; e += THREADS)")
    q = np.ones((1, 1, 4, 16), np.float32)
    out, lse = emulator.arrays.empty_like(q), emulator.arrays.empty((1, 1, 4), np.float32)
    args = (q, q, q, out, lse, None, np.int64(0), np.int64(0), np.int64(0), np.int64(0), np.int32(1), np.int32(4),
            np.int32(4), np.int32(16), np.float64(0.25))
    with pytest.raises(EmulatorError, match=r"out-of-bounds write of 4 bytes in flash_attention_forward.*thread "
                                            r"\(0, 0, 0\).*0 bytes to the right of global variable 'Ks'"):
        emulator.EmulatedKernel(src, flash_kernels.names("float", 16)[0], "memory")((1, 1), (64,), args)


def test_an_argument_of_the_wrong_width_is_caught_before_the_launch():
    k = emulator.kernel("layer_norm.cu", "layer_norm_forward<float, 1>")
    with pytest.raises(EmulatorError, match=r"layer_norm_forward<float, 1>: argument 6 `rows` \(long long, 8 bytes\): "
                                            r"the launch passes numpy.int32, 4 bytes; cuLaunchKernel would read 8"):
        k((1,), (128,), _ln_args(rows_dtype=np.int32))


def test_wrong_argument_counts_kinds_and_element_types_are_caught():
    k = emulator.kernel("layer_norm.cu", "layer_norm_forward<float, 1>")
    args = _ln_args()
    with pytest.raises(EmulatorError, match=r"takes 9 arguments \(x, gamma, beta, y, mean_out, rstd_out, rows, D, eps\)"
                                            r"; the launch passes 8"):
        k((1,), (128,), args[:8])
    with pytest.raises(EmulatorError, match=r"argument 0 `x` .* points to 4-byte float values, but the launch passes "
                                            r"a float64 array"):
        k((1,), (128,), (args[0].astype(np.float64),) + args[1:])
    with pytest.raises(EmulatorError, match=r"argument 8 `eps` .* is a value, but the launch passes a float32 array"):
        k((1,), (128,), args[:8] + (np.zeros(1, np.float32),))
    with pytest.raises(EmulatorError, match=r"argument 8 `eps` \(double, 8 bytes\) is a float value, but the launch "
                                            r"passes numpy.int64"):
        k((1,), (128,), args[:8] + (np.int64(1),))
    with pytest.raises(EmulatorError, match=r"argument 3 `y` .* is a pointer, but the launch passes numpy.float64"):
        k((1,), (128,), args[:3] + (np.float64(0),) + args[4:])


BIG_SHARED = r'''
__global__ void big_static(float* out) {
    __shared__ float tile[13000];                 // 52,000 bytes: over the 48 KB a kernel may declare
    tile[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = tile[threadIdx.x];
}
'''


def test_launch_limits_of_an_h100_are_enforced():
    k = compile_source(REVERSE, "reverse_in_block<float>")
    x = np.zeros(2048, np.float32)
    out = emulator.arrays.empty_like(x)
    with pytest.raises(EmulatorError, match=r"1025 threads per block \(1025, 1, 1\); an H100 allows at most 1024"):
        k((1,), (1025,), (x, out), shared_mem=1025 * 4)
    with pytest.raises(EmulatorError, match="block dimension z is 65; the limit is 64"):
        k((1,), (1, 1, 65), (x, out), shared_mem=4)
    with pytest.raises(EmulatorError, match="grid dimension y is 65536; the limit is 65535"):
        k((1, 65536), (1,), (x, out), shared_mem=4)
    with pytest.raises(EmulatorError, match=r"49156 bytes of dynamic shared memory, more than the 49152 allowed; above "
                                            r"48 KiB a kernel must opt in"):
        k((1,), (32,), (x, out), shared_mem=48 * 1024 + 4)
    k.max_dynamic_shared_size_bytes = 100 * 1024               # opting in, as with a CuPy RawKernel
    k((1,), (32,), (x, out), shared_mem=64 * 1024)
    with pytest.raises(EmulatorError, match=r"more than the 102400 allowed"):
        k((1,), (32,), (x, out), shared_mem=101 * 1024)
    k.max_dynamic_shared_size_bytes = 300 * 1024
    with pytest.raises(EmulatorError, match=r"0 \+ 240640 bytes of shared memory per block; an H100 has at most 232448"):
        k((1,), (32,), (x, out), shared_mem=235 * 1024)
    with pytest.raises(EmulatorError, match=r"big_static declares 52000 bytes of static shared memory; a kernel may "
                                            r"declare at most 49152"):
        compile_source(BIG_SHARED, "big_static")((1,), (32,), (out,))


def test_an_output_entry_the_kernel_forgets_to_write_is_nan():
    """LayerNorm's parameter-gradient stage with its last column skipped: dγ[-1] keeps the
    NaN that fresh emulated memory holds, and a test comparing outputs fails on it."""
    src = broken("layer_norm.cu", "if (j >= D) return;", "if (j >= D - 1) return;")
    d, blocks = 40, 3
    partial = np.ones((blocks, d), np.float32)
    dg, db = emulator.arrays.empty(d, np.float32), emulator.arrays.empty(d, np.float32)
    emulator.EmulatedKernel(src, "layer_norm_param_grads<float>")((1,), (128,), (partial, partial, dg, db,
                                                                                 np.int32(blocks), np.int32(d)))
    assert np.isnan(dg[-1]) and np.isnan(db[-1]) and (dg[:-1] == 3).all()


# ---------------------------------------------------------------- the real kernels pass the strict checks
def _small_cases(address_tables: bool = True):
    """One small launch of every kernel, through its launcher (the memory/race check is the
    emulator's setting while it runs). ``address_tables=False`` leaves out Adam, whose argument
    is a table of addresses: the memory check runs a launch in another process, on copies of
    the argument arrays, where those addresses mean nothing."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((9, 33)).astype(np.float32)
    w, b = rng.standard_normal(33).astype(np.float32), rng.standard_normal(33).astype(np.float32)
    y, mean, rstd = ln_kernels.forward(x, w, b, 1e-5)
    grads = ln_kernels.backward(x, x, w, mean, rstd)
    s = rng.standard_normal((2, 2, 5, 40)).astype(np.float32)
    mask = rng.random((2, 1, 1, 40)) > 0.3
    p = softmax_kernels.forward(s, mask, 0.5)
    ds = softmax_kernels.backward(p, s, 0.5)
    q = rng.standard_normal((1, 2, 70, 24)).astype(np.float32)
    causal = np.tril(np.ones((70, 70), bool))
    out, lse = flash_kernels.forward(q, q, q, causal, 0.2)
    dq = flash_kernels.backward(q, q, q, q, out, lse, causal, 0.2)
    logits, target = rng.standard_normal((3, 300)).astype(np.float32), np.array([5, 0, 299])
    loss, ce_lse = ce_kernels.forward(logits, target, 0, 0.1)
    dlogits = ce_kernels.backward(logits, target, ce_lse, np.array([0.5, 0.0, 2.0]), 0.1)
    odd = np.random.default_rng(5).standard_normal((3, 301)).astype(np.float32)   # rows not 16-byte multiples
    odd_loss, odd_lse = ce_kernels.forward(odd, target, 0, 0.1)
    odd_grad = ce_kernels.backward(odd, target, odd_lse, np.array([0.5, 0.0, 2.0]), 0.1)
    dropped = dropout_kernels.apply(x[:, :31], 0.3, 11, 5)          # n = 279: the last counter is partial
    sub = rng.standard_normal((9, 33)).astype(np.float32)
    residual = ln_kernels.residual_forward(x, sub, w, b, 1e-5, 0.3, 21, 4)   # y, z, mean, rstd
    residual_grads = ln_kernels.residual_backward(x, residual[1], w, residual[2], residual[3], np.float32, 0.3, 21, 4)
    relu = bias_relu_kernels.forward(rng.standard_normal((70, 33)).astype(np.float32), w)  # 33 columns: 2 tiles
    relu_grads = bias_relu_kernels.backward(relu[::-1].copy(), relu, np.float32)
    # the bias alone, three groups of 9 rows each with its own bias row (the Q, K and V products),
    # 32 columns: 16-byte packs (rng's draws left as they were)
    groups = np.random.default_rng(4).standard_normal((3, 9, 32)).astype(np.float32)
    biased = bias_relu_kernels.forward(groups, np.stack([w[:32], w[:32] + 1, w[:32] - 1]), relu=False)
    # the tensor-core kernels on a (B, T, H, d) view, a padding mask and the causal flag (tiles skipped)
    hq = rng.standard_normal((1, 70, 2, 32)).astype(np.float16).swapaxes(1, 2)
    tc_out, tc_lse = flash_kernels.forward(hq, hq, hq, mask[:1, :, :, :1] | (np.arange(70) < 60), 0.2, causal=True)
    tc_grads = flash_kernels.backward(hq, hq, hq, hq, tc_out, tc_lse, None, 0.2, causal=True)
    # and in TF32, float32 on the tensor cores, with the padding mask as a bool mask
    fq = hq.astype(np.float32)
    tf_out, tf_lse = flash_kernels.forward(fq, fq, fq, mask[:1, :, :, :1] | (np.arange(70) < 60), 0.2, tf32=True)
    tf_grads = flash_kernels.backward(fq, fq, fq, fq, tf_out, tf_lse, mask[:1, :, :, :1] | (np.arange(70) < 60), 0.2,
                                      tf32=True)
    # 130 queries: the kernels whose warps take two blocks of 16 rows, the last block part empty
    lq = np.random.default_rng(6).standard_normal((1, 2, 130, 32)).astype(np.float16)
    long_out, long_lse = flash_kernels.forward(lq, lq, lq, None, 0.2, causal=True)
    long_grads = flash_kernels.backward(lq, lq, lq, lq, long_out, long_lse, None, 0.2, causal=True)
    # the same kernels with their products on wgmma: 130 queries of head size 64 (two warpgroup
    # blocks a warp) with the causal flag, and the (B, T, H, d) view with the padding mask
    was = cuda.wgmma_enabled()
    cuda.set_wgmma(True)
    try:
        wq = np.random.default_rng(7).standard_normal((1, 2, 130, 64)).astype(np.float16)
        wg_out, wg_lse = flash_kernels.forward(wq, wq, wq, None, 0.125, causal=True)
        wg_grads = flash_kernels.backward(wq, wq, wq, wq, wg_out, wg_lse, None, 0.125, causal=True)
        padding = mask[:1, :, :, :1] | (np.arange(70) < 60)
        wv_out, wv_lse = flash_kernels.forward(hq, hq, hq, padding, 0.2)
        wv_grads = flash_kernels.backward(hq, hq, hq, hq, wv_out, wv_lse, padding, 0.2)
    finally:
        cuda.set_wgmma(was)
    # the one-pass backward: 130 keys (three key blocks taking turns on dQ), on mma.sync with the causal
    # flag and on wgmma with the padding mask
    was = cuda.wgmma_enabled(), cuda.one_pass_backward_enabled()
    cuda.set_one_pass_backward(True)
    try:
        one_grads = flash_kernels.backward(lq, lq, lq, lq, long_out, long_lse, None, 0.2, causal=True)
        cuda.set_wgmma(True)
        long_padding = mask[:1, :, :, :1] | (np.arange(130) < 100)
        wq_out, wq_lse = flash_kernels.forward(wq, wq, wq, long_padding, 0.125)
        one_wg_grads = flash_kernels.backward(wq, wq, wq, wq, wq_out, wq_lse, long_padding, 0.125)
    finally:
        cuda.set_wgmma(was[0])
        cuda.set_one_pass_backward(was[1])
    kernels = (y, mean, rstd) + tuple(grads) + (p, ds, out, lse) + tuple(dq) \
        + (loss, ce_lse, dlogits, odd_loss, odd_lse, odd_grad, dropped, relu, biased) \
        + tuple(relu_grads) + tuple(residual) + tuple(residual_grads) + (tc_out, tc_lse) + tuple(tc_grads) \
        + (tf_out, tf_lse) + tuple(tf_grads) + (long_out, long_lse) + tuple(long_grads) \
        + (wg_out, wg_lse) + tuple(wg_grads) + (wv_out, wv_lse) + tuple(wv_grads) + tuple(one_grads) \
        + (wq_out, wq_lse) + tuple(one_wg_grads)
    if not address_tables:
        return kernels
    params = [x.copy(), w.copy(), np.zeros(0, np.float32)]             # an empty one too
    grads_, ms, vs = ([a + 1 for a in params], [np.zeros_like(a) for a in params], [np.zeros_like(a) for a in params])
    adam_kernels.step(params, grads_, ms, vs, 0.9, 0.98, 1e-9, 0.0, numbers=lambda: (0.01, 1.0, 1.0))
    nonfinite = loss_scale_kernels.unscale(grads_, 0.5)
    halves = cast_kernels.cast_all(params, np.float16)
    return kernels + tuple(halves[:2]) + tuple(params[:2]) + tuple(ms[:2]) + tuple(vs[:2]) + tuple(grads_[:2]) \
        + (nonfinite,)


@pytest.mark.parametrize("check", ["race", "memory"])
def test_every_real_kernel_passes_the_race_and_memory_checks(check):
    items = [("layer_norm.cu", n) for n in ln_kernels.names("float", 33)]
    items += [("softmax.cu", n) for n in softmax_kernels.names("float", 40)]
    items += [(flash_kernels.source_of(n), n) for n in flash_kernels.names("float", 24) + flash_kernels.names("f16", 32)
              + flash_kernels.names("f16", 32, Tq=70) + flash_kernels.names("float", 32, tf32=True, Tq=70)
              + flash_kernels.names("f16", 64, wg=True) + flash_kernels.names("f16", 32, Tq=70, wg=True)
              + flash_kernels.one_pass_names("f16", 32) + flash_kernels.one_pass_names("f16", 64, wg=True)]
    items += [("cross_entropy.cu", n) for packed in (True, False) for n in ce_kernels.names("float", packed)]
    items += [("dropout.cu", dropout_kernels.name("float")), ("adam.cu", adam_kernels.name("float")),
              ("loss_scale.cu", loss_scale_kernels.name("float"))]
    items += [("bias_relu.cu", n) for n in bias_relu_kernels.names("float", "float")]
    items += [("bias_relu.cu", bias_relu_kernels.names("float", "float", relu=False)[0])]
    items += [("bias_relu.cu", bias_relu_kernels.names("float", "float", packed=False)[0])]
    items += [("cast.cu", cast_kernels.name("float", "f16"))]
    items += [("layer_norm.cu", n) for n in ln_kernels.names("float", 33, "float")]
    emulator.precompile(items, check)
    with cuda.emulate(True, check=check):
        checked = _small_cases(address_tables=check != "memory")
    plain = _small_cases(address_tables=check != "memory")
    for a, b in zip(checked, plain):   # the checked builds use -O1, which contracts other FMAs than -O2
        assert np.isfinite(a[np.isfinite(b)]).all()   # (lse is +inf on rows with no allowed key)
        # A 16-bit result may round the other way (one step is 2^-10 of it), and so may the 16-bit
        # intermediates of a sum (the probabilities and score gradients of the tensor-core
        # attention): one step of the largest term, which a small entry of the sum carries whole.
        wide = a.itemsize >= 4
        atol = 1e-6 if wide else 2.0**-10 * float(np.abs(b[np.isfinite(b)]).max(initial=0.0))
        np.testing.assert_allclose(a.astype(np.float32), b.astype(np.float32), rtol=1e-4 if wide else 2e-3,
                                   atol=max(atol, 1e-6))


def test_every_real_kernel_gives_the_same_bits_whichever_order_its_blocks_start_in():
    """A GPU promises no order in which a launch's blocks start. A kernel whose result hung on it
    (blocks adding into one sum as they come, or waiting for one another) would give other bits
    from run to run, or hang: every kernel's small launch above gives the same bits with its blocks
    started from the last as in blockIdx order."""
    with cuda.emulate(True):
        in_order = _small_cases()
        with emulator.block_order("reverse"):
            backwards = _small_cases()
    assert len(in_order) == len(backwards)
    for a, b in zip(in_order, backwards):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# ---------------------------------------------------------------- the switch
def _layer_norm_launches(x, w, b) -> int:
    """How many times F.layer_norm launches the LayerNorm forward kernel."""
    name = ln_kernels.names("float", x.shape[-1])[0]
    before = emulator.launches.get(name, 0)
    F.layer_norm(x, w, b)
    return emulator.launches.get(name, 0) - before


def test_emulate_routes_numpy_ops_through_the_kernels_and_restores_the_setting():
    x = mt.tensor(np.random.default_rng(4).standard_normal((3, 8)).astype(np.float32))
    w, b = mt.ones(8), mt.zeros(8)
    assert not cuda.emulating()
    with cuda.emulate():
        assert cuda.emulating() and cuda.emulator_check() is None
        assert _layer_norm_launches(x, w, b) == 1
    assert not cuda.emulating()
    assert _layer_norm_launches(x, w, b) == 0
    with pytest.raises(ValueError, match="check must be one of"):
        cuda.emulate(True, check="asan")


def test_the_environment_variable_turns_the_emulator_on():
    code = ("import minitensor as mt, minitensor.functional as F\nfrom minitensor.cuda import emulator\n"
            "F.layer_norm(mt.ones(2, 8), mt.ones(8), mt.zeros(8))\n"
            "print(mt.cuda.emulating(), mt.cuda.emulator_check(), sum(emulator.launches.values()))")
    env = {**os.environ, "MINITENSOR_CUDA": "emulate", "MINITENSOR_EMULATOR_CHECK": "race"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.split() == ["True", "race", "1"], out.stderr
    env["MINITENSOR_CUDA"] = "emulator"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert "MINITENSOR_CUDA must be one of emulate, got emulator" in out.stderr


def test_the_environment_variable_puts_the_attention_products_on_wgmma():
    """MINITENSOR_WGMMA=1 sends 16-bit flash attention through the wgmma kernels (the emulator
    models them), unset it stays on mma.sync, and a value other than 0 or 1 is refused."""
    code = ("import numpy as np\nfrom minitensor import cuda\nfrom minitensor.cuda import emulator\n"
            "from minitensor.cuda import flash_attention as fa\ncuda.emulate(True)\n"
            "q = np.ones((1, 1, 40, 32), np.float16)\nfa.forward(q, q, q, None, 0.2)\n"
            "print(cuda.wgmma_enabled(), *[name.endswith(', true>') for name in emulator.launches])")
    env = {k: v for k, v in os.environ.items() if k not in ("MINITENSOR_WGMMA", "MINITENSOR_CUDA")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.split() == ["False", "False"], out.stderr
    out = subprocess.run([sys.executable, "-c", code], env={**env, "MINITENSOR_WGMMA": "1"}, capture_output=True,
                         text=True)
    assert out.stdout.split() == ["True", "True"], out.stderr
    out = subprocess.run([sys.executable, "-c", code], env={**env, "MINITENSOR_WGMMA": "yes"}, capture_output=True,
                         text=True)
    assert "MINITENSOR_WGMMA must be one of 0, 1, got yes" in out.stderr


def test_the_environment_variable_runs_the_attention_backward_in_one_pass():
    """MINITENSOR_ONE_PASS_BACKWARD=1 sends the 16-bit flash backward through the one-pass kernels
    (delta first, then dK, dV and dQ together), unset it keeps the two passes, and a value other
    than 0 or 1 is refused."""
    code = ("import numpy as np\nfrom minitensor import cuda\nfrom minitensor.cuda import emulator\n"
            "from minitensor.cuda import flash_attention as fa\ncuda.emulate(True)\n"
            "q = np.ones((1, 1, 40, 32), np.float16)\nout, lse = fa.forward(q, q, q, None, 0.2)\n"
            "fa.backward(q, q, q, q, out, lse, None, 0.2)\n"
            "print(cuda.one_pass_backward_enabled(), *sorted(name.split('<')[0] for name in emulator.launches))")
    env = {k: v for k, v in os.environ.items() if k not in ("MINITENSOR_ONE_PASS_BACKWARD", "MINITENSOR_CUDA")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.split() == ["False", "flash_attention_tc_backward_dkdv", "flash_attention_tc_backward_dq",
                                  "flash_attention_tc_forward"], out.stderr
    out = subprocess.run([sys.executable, "-c", code], env={**env, "MINITENSOR_ONE_PASS_BACKWARD": "1"},
                         capture_output=True, text=True)
    assert out.stdout.split() == ["True", "flash_attention_tc_backward_dkdv", "flash_attention_tc_delta",
                                  "flash_attention_tc_forward"], out.stderr
    out = subprocess.run([sys.executable, "-c", code], env={**env, "MINITENSOR_ONE_PASS_BACKWARD": "on"},
                         capture_output=True, text=True)
    assert "MINITENSOR_ONE_PASS_BACKWARD must be one of 0, 1, got on" in out.stderr


def test_a_wgmma_reading_cp_async_writes_that_were_not_fenced_is_refused():
    """wgmma reads shared memory through the tensor cores' (async) proxy: the tiles' cp.async
    writes must each be fenced (fence.proxy.async) before the barrier. The flash forward without
    its fence fails on the emulator; with it (the test of the kernels themselves) it runs."""
    name = flash_kernels.names("f16", 32, Tq=40, wg=True)[0]
    src = broken("flash_attention_tc.cu", "if constexpr (WG) fence_async_shared();", "")
    q = np.random.default_rng(8).standard_normal((1, 1, 40, 32)).astype(np.float16)
    args = (q, q, q, emulator.arrays.empty_like(q), emulator.arrays.empty((1, 1, 40), np.float32)) \
        + flash_kernels._tc_args(emulator.arrays, q, q, q, q, None, False, 0.2)
    with pytest.raises(emulator.EmulatorError, match="did not fence for the tensor cores"):
        emulator.EmulatedKernel(src, name)((1, 1), (128,), args)


# TURNS (test_kernels.py) with its blocks' order broken: a block that reads the word outside its
# turn, and blocks that pass the turn on before they write the word (so the next reads it in its
# turn, but before the write it waited for)
NO_WAIT = ("if (turn > 0) await_turn(FLAG, turn, STALLS, blockIdx.x, WAY);", "")
LATE_WRITE = ("    if (threadIdx.x == 0) *ORDER = *ORDER * 31u + turn + 1;\n    pass_turn(FLAG, turn + 1);",
              "    unsigned int seen = 0;\n    if (threadIdx.x == 0) seen = *ORDER;\n    pass_turn(FLAG, turn + 1);\n"
              "    if (threadIdx.x == 0) *ORDER = seen * 31u + turn + 1;")


@pytest.mark.parametrize(("change", "message"), [
    (None, None),
    (NO_WAIT, "it reads byte .*, which block 0 of this launch wrote, with no await_turn since its own last pass_turn"),
    (LATE_WRITE, "it reads byte .*, which block 0 of this launch wrote, after passing on the turn this thread"),
], ids=["in turns", "no wait", "passed before the write"])
def test_the_race_check_sees_blocks_that_share_global_memory_without_taking_turns(change, message):
    """Blocks run one at a time on the emulator, so one that reads what an earlier block wrote gets
    the right value whether or not it waited; on a GPU they run at once. The race check fails a block
    that touches another block's write without an await_turn, or whose writer passed the turn on
    before writing; the blocks of test_kernels.py's TURNS, which take turns, pass."""
    from .test_kernels import START_ORDER, TURNS  # noqa: PLC0415

    text = TURNS
    if change:
        assert text.count(change[0]) == 1
        text = text.replace(*change)
    order, flag, counter, stalls = (np.zeros(n, t) for n, t in [(1, np.uint32), (1, np.int32), (1, np.int32),
                                                                   (turns.WORDS, np.int32)])
    kernel = emulator.compile_source(text, START_ORDER, "race")
    if message is None:
        kernel((8,), (64,), (order, flag, counter, stalls))
        assert flag[0] == 8 and not stalls.any()
    else:
        with pytest.raises(emulator.EmulatorError, match=message):
            kernel((8,), (64,), (order, flag, counter, stalls))


def _launch_instead(monkeypatch, name: str, src: str, check: str | None = None):
    """The flash launchers take the instantiation ``name`` from the kernel text ``src`` (with the
    emulator's ``check``), and every other one as before."""
    real = flash_kernels.kernel

    def swapped(source, expression, xp, options=()):
        if expression == name:
            return emulator.EmulatedKernel(src, expression, check)
        return real(source, expression, xp, options)

    monkeypatch.setattr(flash_kernels, "kernel", swapped)


@pytest.mark.parametrize(("wait", "message"), [
    ("", "with no await_turn since its own last pass_turn"),
    ("if (kb > 0 && it == 0) await_turn(flag, kb, stalls, n, i0 / BQ);", "after passing on the turn this thread waited for"),
], ids=["never", "first tile only"])
def test_the_race_check_sees_a_one_pass_backward_that_does_not_wait_its_turn(monkeypatch, wait, message):
    """The one-pass attention backward without its await_turn, or with it at the first tile of
    queries only, gives the right dQ on the emulator (the key blocks run in order) and could give a
    wrong one on a GPU: the race check fails it, at the second key block's read of the first block's
    float32 sum (of the first tile, or of the second)."""
    name = flash_kernels.one_pass_names("f16", 32)[1]
    _launch_instead(monkeypatch, name, broken("flash_attention_tc.cu", "if (kb > 0) await_turn(flag, kb, stalls, n, i0 / BQ);",
                                              wait), "race")
    q = np.random.default_rng(9).standard_normal((1, 1, 70, 32)).astype(np.float16)   # two key blocks, two tiles
    out, lse = flash_kernels.forward(q, q, q, None, 0.2)
    monkeypatch.setattr(flash_kernels, "one_pass_backward_enabled", lambda: True)
    with pytest.raises(emulator.EmulatorError, match="global-memory race .* " + message):
        flash_kernels.backward(q, q, q, q, out, lse, None, 0.2)


START_ORDER_LINE = ("const int order = start_order(turns + static_cast<long long>(gridDim.x) * ((Tq + BQ - 1) / BQ), "
                    "started);")


@pytest.mark.parametrize("wg", [False, True], ids=["mma.sync", "wgmma"])
@pytest.mark.parametrize("places", ["start order", "blockIdx"])
def test_the_one_pass_backward_does_not_depend_on_the_order_its_blocks_start_in(monkeypatch, places, wg):
    """A GPU may start a launch's blocks in any order. The one-pass backward's key blocks take their
    places, and so their turns, in the order they start: with the blocks started from the last, the
    emulator gives the same bits as in blockIdx order, and the two passes' gradients to 16-bit
    rounding. The same kernel with its places taken from blockIdx waits there for a block that has
    not started (on a GPU, a hang once the waiting blocks fill it, were the wait not bounded): the
    emulator's block gives up and the launcher raises StalledTurns, naming the turn and the flag;
    the report cleared, the next call gives the bits of blockIdx order again."""
    name = flash_kernels.one_pass_names("f16", 32, wg)[1]
    _launch_instead(monkeypatch, name, broken(
        "flash_attention_tc.cu", START_ORDER_LINE,
        START_ORDER_LINE.replace("started);", "started) * 0 + blockIdx.x + gridDim.x * blockIdx.y;")
        if places == "blockIdx" else START_ORDER_LINE))
    monkeypatch.setattr(flash_kernels, "wgmma_enabled", lambda: wg)
    rng = np.random.default_rng(11)
    q, k, v, g = (rng.standard_normal((2, 2, 150, 32)).astype(np.float16) for _ in range(4))   # 3 key blocks a pair
    out, lse = flash_kernels.forward(q, k, v, None, 0.2, causal=True)
    two_passes = flash_kernels.backward(g, q, k, v, out, lse, None, 0.2, causal=True)
    monkeypatch.setattr(flash_kernels, "one_pass_backward_enabled", lambda: True)
    before = emulator.launches.get(name, 0)
    with emulator.block_order("index"):
        in_order = flash_kernels.backward(g, q, k, v, out, lse, None, 0.2, causal=True)
    assert emulator.launches.get(name, 0) == before + 1   # the kernel under test ran
    if places == "blockIdx":
        with emulator.block_order("reverse"), pytest.raises(turns.StalledTurns, match=(
                r"the one-pass attention backward: a block gave up waiting for turn 2 on the flag of batch·head 3, "
                r"query tile 2, which held 0")):
            flash_kernels.backward(g, q, k, v, out, lse, None, 0.2, causal=True)
        after = flash_kernels.backward(g, q, k, v, out, lse, None, 0.2, causal=True)   # the report was cleared
        assert all(a.tobytes() == b.tobytes() for a, b in zip(after, in_order))
        return
    with emulator.block_order("reverse"):
        backwards = flash_kernels.backward(g, q, k, v, out, lse, None, 0.2, causal=True)
    for first, second, reference in zip(in_order, backwards, two_passes):
        assert first.tobytes() == second.tobytes()
        scale = np.abs(reference.astype(np.float32)).max()
        assert np.abs(first.astype(np.float32) - reference.astype(np.float32)).max() < 0.02 * scale
