# %% [markdown]
# # Lesson 23 — The GPU backend, hand-written kernels and mixed precision (Section 5.2)
#
# The paper trained on 8 NVIDIA P100 GPUs: 12 hours for the base model (Section 5.2).
#
# Every op gets its array module from its inputs (`ctx.xp`): NumPy for "cpu" tensors, CuPy for
# "cuda" ones, so `model.to("cuda")` is all it takes to train on a GPU. On CuPy arrays some
# ops go further and call kernels written for this project (`minitensor/cuda/*.cu`):
# LayerNorm, a fused scale + mask + softmax for attention scores, and FlashAttention-style
# attention. This lesson reads them, runs two of them on the CPU through an emulator of CUDA,
# replays the idea behind flash attention in NumPy (so it runs anywhere), and tries mixed
# precision. Without a GPU the GPU-only parts say so and are skipped.
#
# **Teaches:** `to`, `DeviceError`, `emulator`, `emulate`, `use_kernels`, `launches`,
# `layer_norm_reference`, `masked_softmax_reference`, `amp`, `autocast`, `LossScaler`; devices,
# GPU kernels, the CUDA emulator, online softmax, mixed precision, loss scaling.
#
# **Uses:** the whole model, layer normalisation, attention, masks, softmax, cross-entropy.

# %%
import textwrap
import time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import minitensor as mt
import minitensor.functional as F
from minitensor import amp
from transformer import Transformer, TransformerConfig, label_smoothed_loss
from lessonkit import Results, checks, show, smoke

results = Results("23")

GPU = mt.cuda.is_available()
print("CUDA available:", GPU)
try:
    mt.tensor([1.0], device="cuda")
except mt.DeviceError as e:
    print("asking for cuda without one gives a clear error:\n ", e)

# %% [markdown]
# ## 1. The same loss and gradients on both devices

# %%
mt.manual_seed(0)
cfg = TransformerConfig.tiny(30, dropout=0.0)
model = Transformer(cfg)
rng = np.random.default_rng(0)
src, tgt = rng.integers(3, 30, (4, 7)), rng.integers(3, 30, (4, 8))
loss = label_smoothed_loss(model(src, tgt[:, :-1]), mt.tensor(tgt[:, 1:]), 0)
loss.backward()
cpu_loss = loss.item()
cpu_grads = {n: p.grad.numpy().copy() for n, p in model.named_parameters()}
print(f"cpu loss {cpu_loss:.6f}")
if GPU:
    model.zero_grad()
    model.to("cuda")
    loss = label_smoothed_loss(model(mt.tensor(src, device="cuda"), mt.tensor(tgt[:, :-1], device="cuda")),
                               mt.tensor(tgt[:, 1:], device="cuda"), 0)
    loss.backward()
    print(f"gpu loss {loss.item():.6f} (with the kernels on)")
    checks.agree(loss.item(), cpu_loss, "GPU vs CPU loss", atol=1e-4)
    checks.agree({n: p.grad.numpy() for n, p in model.named_parameters()}, cpu_grads, "GPU vs CPU gradients", atol=1e-4)
    print("gradients agree to float32 tolerance")
else:
    print("(no GPU here: the GPU half of this section is skipped)")

# %% [markdown]
# ## 2. Reading a kernel: LayerNorm
#
# A GPU runs thousands of threads in groups of 32 (a *warp*) that execute in lockstep.
# `layer_norm.cu` gives each row to one warp: lane `l` holds columns `l, l+32, l+64, …` in
# registers, so the row is read from memory once, and the mean and variance are sums across
# the warp: `warp_sum`, from the kernels' shared header `minitensor/cuda/common.cuh` (printed
# after the kernel), adds with `__shfl_xor_sync` in five butterfly steps, 16, 8, 4, 2, 1 lanes
# apart, after which every lane holds the whole sum. LayerNorm moves bytes rather
# than doing arithmetic, so "fast" means "close to the memory bandwidth". The backward writes
# dγ and dβ through a two-stage reduction in a fixed order, so it is deterministic.

# %%
source = (Path(mt.cuda.__file__).parent / "layer_norm.cu").read_text()
start = source.index("// One warp normalises one row")
print(source[start:source.index("// Stage 1", start)])
common = (Path(mt.cuda.__file__).parent / "common.cuh").read_text()
start = common.index("template <typename A>\n__device__ __forceinline__ A warp_sum")
print(common[start:common.index("}\n", start) + 2])

# %% [markdown]
# `F.layer_norm` decides which implementation runs (`minitensor/ops/norm.py`): on CuPy arrays,
# with kernels on and a case the kernel covers, the kernel's op (`FusedLayerNorm`, beside its
# launcher in `minitensor/cuda/layer_norm.py`); otherwise the plain xp op `LayerNorm`, which is
# also the reference the kernel is tested against. `MINITENSOR_KERNELS=0` (or
# `with mt.cuda.use_kernels(False):`) turns the kernels off to compare.

# %% [markdown]
# ## 3. Running the kernels without a GPU: the emulator
#
# A kernel is just C++ with a few extra words (`__global__`, `threadIdx`, `__shared__`,
# `__syncthreads`, `__shfl_xor_sync`). `minitensor/cuda/emulator/emulator.h` defines those words for
# the CPU, and `minitensor/cuda/emulator/` compiles the very same `.cu` text with the system's C++ compiler.
# Every CUDA thread becomes a fiber; the threads of a block take turns at each barrier and
# each warp shuffle, exactly where a GPU would make them wait for one another. It is slow
# (a fiber per thread), and it is strict: a barrier some thread never reaches, a race in
# shared memory, an argument of the wrong width are errors, where a GPU would hang or give
# wrong numbers. The launchers do not know the difference: they get NumPy arrays and an
# emulated kernel where they would get CuPy arrays and a compiled one.

# %%
from minitensor.cuda import emulator  # noqa: E402
from minitensor.cuda import layer_norm as ln_kernel  # noqa: E402
from minitensor.cuda import softmax as softmax_kernel  # noqa: E402
from minitensor.ops.attention import masked_softmax_reference  # noqa: E402
from minitensor.ops.norm import layer_norm_reference  # noqa: E402

EMULATOR, why_not = emulator.available()
if EMULATOR:
    x = (rng.standard_normal((6, 48)) * 3 + 1).astype(np.float32)
    gamma, beta = rng.uniform(0.5, 1.5, 48).astype(np.float32), rng.standard_normal(48).astype(np.float32)
    y, mean, rstd = ln_kernel.forward(x, gamma, beta, 1e-5)        # 2 blocks x 4 warps: one warp per row
    y_ref, _, _ = layer_norm_reference(np, x.astype(np.float64), gamma.astype(np.float64), beta.astype(np.float64), 1e-5)
    print("LayerNorm kernel vs NumPy (float64): max |difference| =", float(np.abs(y - y_ref).max()))
    results["emulated_layer_norm_max_difference"] = float(np.abs(y - y_ref).max())
    checks.agree(y, y_ref, "LayerNorm kernel vs NumPy", atol=1e-5)

    scores = rng.standard_normal((2, 4, 5, 5)).astype(np.float32) * 3
    causal = np.tril(np.ones((5, 5), dtype=bool))
    p = softmax_kernel.forward(scores, causal, 1 / np.sqrt(16))  # scale, mask and softmax in one pass
    p_ref = masked_softmax_reference(np, scores.astype(np.float64), causal, 1 / np.sqrt(16))
    print("fused softmax kernel vs NumPy: max |difference| =", float(np.abs(p - p_ref).max()),
          "| weights above the diagonal:", float(p[..., ~causal].max()))
    checks.agree(p, p_ref, "fused softmax kernel vs NumPy", atol=1e-6)
    checks.agree(p[..., ~causal], 0.0 * p[..., ~causal], "weights above the causal diagonal", atol=0.0)
    results["emulated_softmax_max_difference"] = float(np.abs(p - p_ref).max())
    results.finding(f"on the CPU emulator of CUDA the LayerNorm kernel matches NumPy's float64 LayerNorm to "
                    f"{results['emulated_layer_norm_max_difference']:.2g} and the fused softmax kernel the masked "
                    f"softmax to {results['emulated_softmax_max_difference']:.2g}, with exactly 0 above the causal "
                    f"diagonal.")

    # the whole op, routed to the kernel: mt.cuda.emulate() (or MINITENSOR_CUDA=emulate)
    forward_kernel = ln_kernel.names("float", 48)[0]
    before = emulator.launches.get(forward_kernel, 0)
    with mt.cuda.emulate():
        F.layer_norm(mt.tensor(x), mt.tensor(gamma), mt.tensor(beta), eps=1e-5)
    took = emulator.launches.get(forward_kernel, 0) - before
    print(f"F.layer_norm under mt.cuda.emulate() launched {forward_kernel}: {took} time(s)")
    checks.agree(float(took), 1.0, "the LayerNorm op took the kernel under emulate()", atol=0)

    # a classic bug, caught: the backward's __syncthreads removed from layer_norm.cu (its one
    # barrier), so warp 0 reads partial sums the other warps have not written yet
    text = (mt.cuda.sources.FOLDER / "layer_norm.cu").read_text().replace("    __syncthreads();\n", "", 1)
    buggy = emulator.EmulatedKernel(mt.cuda.sources.with_common(text), ln_kernel.names("float", 48)[1], check="race")
    dx, pg, pb = (emulator.arrays.empty(shape, np.float32) for shape in ((6, 48), (2, 48), (2, 48)))
    try:
        buggy((2,), (128,), (x, x, gamma, mean, rstd, dx, pg, pb, np.int64(6), np.int32(48), np.int64(3)),
              shared_mem=2 * 4 * 48 * 4)
        raise AssertionError("the race went unnoticed")
    except emulator.EmulatorError as e:
        print("without its barrier:\n  " + "\n  ".join(textwrap.wrap(str(e), 96)))
else:
    print("(no C++ compiler here, so the emulator is skipped:", why_not, ")")

# %% [markdown]
# ## 4. Flash attention, replayed in NumPy
#
# Attention forms a $T_q \times T_k$ matrix of weights. FlashAttention (Dao et al., 2022) never
# stores it: it walks over tiles of keys and keeps, per query, a running maximum $m$, a
# running denominator $l$ and an unnormalised output. When a tile raises the maximum from $m$
# to $m'$, everything so far is
# rescaled by $e^{m - m'}$. Here is that loop in NumPy, checked against the op:

# %%
def tiled_attention(q, k, v, tile):
    """softmax(q kᵀ/√d) v, one tile of keys at a time (online softmax); also returns log-sum-exp."""
    Tq, d = q.shape
    m = np.full(Tq, -np.inf)
    l = np.zeros(Tq)  # noqa: E741 (the paper's name)
    acc = np.zeros((Tq, v.shape[1]))
    for j in range(0, k.shape[0], tile):
        s = (q @ k[j:j + tile].T) / np.sqrt(d)
        m_new = np.maximum(m, s.max(axis=1))
        correction = np.exp(m - m_new)
        p = np.exp(s - m_new[:, None])
        l = l * correction + p.sum(axis=1)  # noqa: E741
        acc = acc * correction[:, None] + p @ v[j:j + tile]
        m = m_new
    return acc / l[:, None], m + np.log(l)


T = 64 if smoke() else 256
q, k, v = (rng.standard_normal((T, 16)) for _ in range(3))
out, lse = tiled_attention(q, k, v, tile=32)
ref = F.scaled_dot_product_attention(mt.tensor(q), mt.tensor(k), mt.tensor(v)).numpy()
print("max |tiled - op| =", np.abs(out - ref).max())
results.finding(f"the tiled (online-softmax) attention replayed in NumPy equals the op to {np.abs(out - ref).max():.2g} "
                f"in float64, for {T} keys in tiles of 32.")
checks.agree(out, ref, "tiled attention vs the op", atol=1e-12)
# the backward needs only lse: every weight is exp(score - lse), recomputed tile by tile
weights = np.exp(q @ k.T / 4.0 - lse[:, None])
checks.agree(weights.sum(axis=1), np.ones(T), "weights recomputed from lse, summed over keys", atol=1e-12)

# %% [markdown]
# The memory it saves: the weights are $T_q T_k$ numbers per head, the log-sum-exp $T_q$.

# %% tags=["fold"]
lengths = np.array([128, 256, 512, 1024, 2048, 4096])
fig, ax = plt.subplots(figsize=(5, 3))
ax.loglog(lengths, 8 * 64 * lengths**2 * 4 / 2**20, marker="o", label="weights (8 heads x 64 sentences)")
ax.loglog(lengths, 8 * 64 * lengths * 4 / 2**20, marker="s", label="log-sum-exp (flash)")
ax.set_xticks(lengths, [str(n) for n in lengths])
ax.minorticks_off()
ax.set_xlabel("sequence length")
ax.set_ylabel("MiB per layer")
ax.legend(fontsize=7)
show(fig, "23", "attention_memory.png")

# %% [markdown]
# On the GPU, `flash_attention.cu` does the same in CUDA (one thread per query, key tiles in
# shared memory) and its backward recomputes the weights from lse. For float16 and bfloat16
# inputs, and for float32 in TF32, the file has a second version on the tensor cores, where a
# warp of 32 threads computes a 16 x 8 block of scores in one `mma.sync` instruction and keeps
# the probabilities in registers for the next product (FlashAttention-2's layout). Let us time
# the three float32 routes and measure their memory.

# %%
if GPU:
    from minitensor import cuda

    B, H, d = 4, 8, 64
    rows = []
    slow_s = 1.0  # a pass slower than this ends the sweep: each length costs about 4x the one before
    for T in ([256, 1024] if smoke() else [256, 512, 1024, 2048]):
        qt, kt, vt = (mt.tensor(rng.standard_normal((B, H, T, d)).astype(np.float32), requires_grad=True, device="cuda")
                      for _ in range(3))
        row = [T]
        for mode in ("flash", "fused", "off"):
            cuda.set_attention("auto" if mode == "off" else mode)
            with cuda.use_kernels(mode != "off"), cuda.PeakMemory() as mem:
                F.scaled_dot_product_attention(qt, kt, vt).sum().backward()  # warm-up + memory
            with cuda.use_kernels(mode != "off"):
                cuda_sync = mt.backend.cupy().cuda.Device().synchronize
                cuda_sync()
                t0 = time.perf_counter()
                for _ in range(5):
                    F.scaled_dot_product_attention(qt, kt, vt).sum().backward()
                cuda_sync()
            row += [(time.perf_counter() - t0) / 5 * 1e3, (mem.peak_bytes - mem.start_bytes) / 2**20]
        cuda.set_attention("auto")
        rows.append(row)
        print("T={}: flash {:.2f} ms {:.0f} MiB | fused {:.2f} ms {:.0f} MiB | plain CuPy {:.2f} ms {:.0f} MiB".format(*row))
        if max(row[1::2]) > slow_s * 1e3:
            print(f"(a pass took over {slow_s:g} s here, far from a GPU's milliseconds, as on the CPU emulator of "
                  f"CUDA: the sweep stops at T={T})")
            break
    checks.always_lower([rows[-1][2]], [rows[-1][4]], "MiB at the longest length: flash vs fused")
else:
    print("(no GPU here: timing the kernels is skipped; benchmarks/kernels.py does it on a GPU)")

# %% [markdown]
# ## 5. Mixed precision
#
# Half-precision numbers (float16) are 2 bytes and tensor cores multiply them many times
# faster, but they store 10 mantissa bits (11 bits of precision with the implicit leading 1)
# and underflow below about 6e-8. The recipe of
# Micikevicius et al. (2018), in `minitensor/amp.py`: matrix products in 16-bit inside
# `amp.autocast`, reductions (layer norm, softmax, cross entropy) in float32, parameters kept
# in float32 ("master weights"), and the loss multiplied by a scale $S$ before backward so
# small gradients survive float16, divided out again before the update.

# %%
x = mt.tensor(rng.standard_normal((8, 16)).astype(np.float32))
w = mt.tensor(rng.standard_normal((16, 4)).astype(np.float32), requires_grad=True)
with amp.autocast("float16"):
    y = F.linear(x, w)
print("inside autocast the product is", y.dtype, "; the weight stays", w.dtype)
tiny = np.float32(1e-8)
print("a gradient of 1e-8 in float16:", np.float16(tiny), "| scaled by 2**15 first:", np.float16(tiny * 2**15))
checks.agree(float(np.float16(tiny)), 0.0, "1e-8 in float16", atol=0)
checks.between([float(np.float16(tiny * 2**15))], 1e-6, np.inf, "1e-8 × 2**15 in float16")

# %% [markdown]
# Dynamic loss scaling picks $S$ by trial: start high; when a gradient overflows float16's
# maximum (65504) to inf, skip that update and halve $S$; after many clean updates, double it.

# %%
scaler = amp.LossScaler(init_scale=2.0**15)
overflows = []
while True:
    w.grad = None
    with amp.autocast("float16"):
        y = F.linear(x, w)
    with np.errstate(over="ignore", invalid="ignore"):
        (y.sum() * scaler.scale).backward()
    scale = scaler.scale
    ok = scaler.unscale_([w])
    scaler.update(found_overflow=not ok)
    print(f"loss scale {scale:>7g}: " + ("gradients finite, the update goes ahead" if ok else
                                         "overflow, update skipped, scale halved"))
    if not ok:
        overflows.append(scale)
    if ok:
        results.finding(f"dynamic loss scaling on the CPU: the float16 gradients of the small example overflow at "
                        f"S = {', '.join(f'{o:g}' for o in overflows)} and the update goes ahead at S = {scale:g}.")
        break
checks.between([scaler.skipped], 1, np.inf, "updates skipped on overflow")
checks.agree(np.dtype(w.grad.dtype).itemsize, 4, "bytes per gradient entry (float32, the master weights' type)", atol=0)
expected = np.repeat(x.numpy().sum(0)[:, None], 4, axis=1)  # d(sum(x w))/dw
print("unscaled float32 gradient vs the exact one, max relative error:",
      float(np.abs(w.grad.numpy() - expected).max() / np.abs(expected).max()))
checks.agree(w.grad.numpy(), expected, "the unscaled gradient vs the exact one", atol=1e-2, rtol=1e-2)

# %% [markdown]
# Takeaways: one engine, two array libraries; kernels are ordinary ops with a reference
# beside them; flash attention is an exact reorganisation of softmax, not an approximation;
# mixed precision is float32 bookkeeping around 16-bit arithmetic.
# `benchmarks/base_step_vs_torch.py --device cuda` and `benchmarks/kernels.py` measure all of
# this against PyTorch on a GPU.

# %% [markdown]
# ## Exercise
#
# Exercise 23 of the track, `lessons/exercises/ex23_online_softmax.py`, asks for
# `blockwise_attention`, attention over one block of keys at a time with a running softmax, the
# idea of flash attention. `python lessons/check.py 23` grades it and, at the first case it gets
# wrong, shows the input, what it expected and what it got.
