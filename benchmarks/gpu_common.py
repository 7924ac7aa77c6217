"""Shared by the GPU benchmarks: device description, timing, peaks, JSON results.

Not part of the package; imported by benchmarks/base_step.py and benchmarks/kernels.py.
"""
from __future__ import annotations

import json
import platform
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


def environment(device: str) -> dict:
    env = {"python": platform.python_version(), "numpy": np.__version__, "machine": platform.machine()}
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


def write_results(out: dict, path: str | None) -> None:
    text = json.dumps(out, indent=2)
    print(text)
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text + "\n")
