# %% [markdown]
# # Lesson 16 — The GPU backend
#
# Every op gets its array module from its inputs (`ctx.xp`): NumPy for "cpu" tensors, CuPy for
# "cuda" ones. Nothing else changes — the same `Function` classes run on both, and
# `model.to("cuda")` moves parameters and buffers. Hand-written CUDA kernels (LayerNorm,
# softmax-attention) will slot into the same ops on CuPy arrays; they are not in the package
# yet. Without a GPU (or without CuPy) this lesson runs its CPU half and says so.

# %%
import numpy as np

import minitensor as mt
import minitensor.functional as F
from transformer import Transformer, TransformerConfig, label_smoothed_loss
from transformer.lesson import figure_dir, smoke

print("CUDA available:", mt.cuda.is_available())
try:
    mt.tensor([1.0], device="cuda")
except mt.DeviceError as e:
    print("asking for cuda without one gives a clear error:\n ", e)

# %% [markdown]
# ## The same loss and gradients on both devices

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
if mt.cuda.is_available():
    model.zero_grad()
    model.to("cuda")
    loss = label_smoothed_loss(model(mt.tensor(src, device="cuda"), mt.tensor(tgt[:, :-1], device="cuda")),
                               mt.tensor(tgt[:, 1:], device="cuda"), 0)
    loss.backward()
    print(f"gpu loss {loss.item():.6f}")
    assert abs(loss.item() - cpu_loss) < 1e-4
    for n, p in model.named_parameters():
        assert np.allclose(p.grad.numpy(), cpu_grads[n], atol=1e-4), n
    print("gradients agree to float32 tolerance")
else:
    print("(no GPU here: the GPU half of this lesson is skipped)")

# %%
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sizes = [64, 128, 256] if smoke() else [64, 128, 256, 512, 1024]
import time  # noqa: E402

times = []
for n in sizes:
    a = mt.tensor(rng.standard_normal((n, n)).astype(np.float32))
    t0 = time.perf_counter()
    for _ in range(5):
        F.matmul(a, a)
    times.append((time.perf_counter() - t0) / 5)
fig, ax = plt.subplots(figsize=(5, 3))
ax.loglog(sizes, [2 * n**3 / t / 1e9 for n, t in zip(sizes, times)], marker="o", label="cpu")
ax.set_xlabel("matrix size n")
ax.set_ylabel("GFLOP/s of n x n @ n x n")
ax.legend()
fig.tight_layout()
fig.savefig(figure_dir("16") / "matmul_throughput.png")
print("saved", figure_dir("16") / "matmul_throughput.png")
