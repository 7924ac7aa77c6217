"""The benchmarks' harness: the machine's description, timing, device peaks, JSON results.

Not part of the package; imported by the scripts beside it.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np

# Dense (no sparsity) datasheet peaks in TFLOP/s: (fp32 CUDA cores, tf32, fp16/bf16 tensor cores).
# Model FLOP utilisation (MFU) is reported against the peak of the precision the step used.
PEAK_TFLOPS = {
    "H100 PCIe": (51.2, 378.0, 756.0),
    "H100": (66.9, 494.7, 989.4),     # SXM5 (H100 80GB HBM3)
    "H200": (66.9, 494.7, 989.4),
    "A100": (19.5, 156.0, 312.0),
}


def peak_tflops(gpu_name: str, precision: str) -> float | None:
    for key in sorted(PEAK_TFLOPS, key=len, reverse=True):  # "H100 PCIe" before "H100"
        if key in gpu_name:
            fp32, tf32, half = PEAK_TFLOPS[key]
            return {"fp32": fp32, "tf32": tf32, "fp16": half, "bf16": half}[precision]
    return None


def _proc_field(path: str, key: str) -> str | None:
    """The value of the first ``key: value`` line of a /proc file (None where there is none)."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return None
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith(key)), None)


def commit(tree: Path) -> str | None:
    """``git describe --always --dirty`` of a source tree: the code a result measured (None outside git)."""
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], cwd=tree, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def environment(device: str) -> dict:
    """What the figures depend on: versions, and the CPU (model, cores, memory, NumPy's BLAS
    kernels) or the GPU."""
    env = {"python": platform.python_version(), "numpy": np.__version__, "machine": platform.machine(),
           "os": platform.platform()}
    if device == "cpu":
        from minitensor import blas

        mem_kib = _proc_field("/proc/meminfo", "MemTotal")
        env.update(cpu=_proc_field("/proc/cpuinfo", "model name") or platform.processor(), cores=os.cpu_count(),
                   memory_gib=round(int(mem_kib.split()[0]) / 2**20, 1) if mem_kib else None, blas=blas.info())
    if device == "cuda":
        import cupy as cp

        props = cp.cuda.runtime.getDeviceProperties(0)
        env.update(gpu=props["name"].decode() if isinstance(props["name"], bytes) else props["name"],
                   cupy=cp.__version__, cuda_runtime=cp.cuda.runtime.runtimeGetVersion(),
                   cuda_driver=cp.cuda.runtime.driverGetVersion(), multiprocessors=props["multiProcessorCount"],
                   memory_gib=round(props["totalGlobalMem"] / 2**30, 1))
    try:
        import torch

        env["torch"] = torch.__version__
        env["torch_threads"] = torch.get_num_threads()
    except ImportError:
        env["torch"] = None
    return env


def sync(device: str) -> None:
    if device == "cuda":
        import cupy as cp

        cp.cuda.Device().synchronize()


def median_seconds(fn, device: str, warmup: int, repeat: int) -> float:
    """Median wall time of ``fn()`` with the device synchronised around each call."""
    for _ in range(warmup):
        fn()
    sync(device)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def product_timer(shapes):
    """``rates(repeats=1)``: {"MxKxN": GFLOP/s} of float32 NumPy products (m, k) x (k, n),
    each the best of ``repeats`` calls, for each shape and a 2048-cube (a large square product,
    near the BLAS kernels' best). The operands are made, and each product run once, here, so
    that a call times only the products: a benchmark can call it between the steps it times
    and see the machine at the same speed as they do."""
    rng = np.random.default_rng(0)
    pairs = {}
    for m, k, n in [*shapes, (2048, 2048, 2048)]:
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        a @ b  # warm-up: the BLAS threads start, the pages are touched
        pairs[f"{m}x{k}x{n}"] = (a, b, 2.0 * m * k * n)

    def rates(repeats: int = 1) -> dict:
        out = {}
        for name, (a, b, flops) in pairs.items():
            best = np.inf
            for _ in range(repeats):
                t0 = time.perf_counter()
                a @ b
                best = min(best, time.perf_counter() - t0)
            out[name] = round(flops / best / 1e9, 1)
        return out

    return rates


def like_prepared(prep: Path, run: Path) -> Path:
    """A new run directory ``run`` holding the BPE model and id caches of the run in ``prep``, so
    that timed runs skip the data preparation (made once, by a one-update run into ``prep``)."""
    run.mkdir()
    shutil.copy(prep / "spm.model", run / "spm.model")
    shutil.copytree(prep / "cache", run / "cache")
    return run


def seconds_per_update(run: Path, skip: int) -> float:
    """A training run's seconds per update in the steady state, from its metrics.jsonl: the
    first ``skip`` updates (warm-up, first allocations) are left out."""
    t = [json.loads(x)["seconds"] for x in (Path(run) / "metrics.jsonl").read_text().splitlines()]
    return (t[-1] - t[skip - 1]) / (len(t) - skip)


def write_results(out: dict, path: str | None) -> None:
    text = json.dumps(out, indent=2)
    print(text)
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text + "\n")
