"""The CUDA emulator's fixed costs, which the GPU tests on the CPU pay at every launch and at every
warp operation: a launch of an empty kernel (the same kernel again, and two kernels in turn, as a
model's step launches them), a warp shuffle, a barrier (``minitensor/cuda/emulator/``; no GPU
needed, a C++ compiler is); and what a first use pays, compiling real kernels into an empty cache
for each check, one compiler at a time.

Each figure is the median of ``--rounds`` rounds. With ``--trees A,B`` the rounds run the given
source trees (checkouts of this repository, e.g. ``git worktree add /tmp/old <commit>``) in
turn, each in a fresh process with the tree first on ``PYTHONPATH``, and the table gives B's time
over A's:

    python benchmarks/emulator_overheads.py
    python benchmarks/emulator_overheads.py --trees /tmp/old,. --out benchmarks/results/emulator_overheads.json
    python benchmarks/emulator_overheads.py --trees /tmp/old,. --no-compiles   # the launches alone
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from harness import commit, environment, median_seconds, write_results

SOURCE = r"""
extern "C" __global__ void touch(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}
extern "C" __global__ void shuffles(float* x, int k) {
    float v = x[threadIdx.x];
    for (int j = 0; j < k; ++j) v += __shfl_xor_sync(0xffffffffu, v, 1);
    x[threadIdx.x] = v;
}
extern "C" __global__ void barriers(float* x, int k) {
    float v = x[threadIdx.x];
    for (int j = 0; j < k; ++j) __syncthreads();
    x[threadIdx.x] = v;
}
"""
LAUNCHES = [(1, 32), (1, 256), (4, 256), (1, 1024)]   # (blocks, threads a block)
STEPS = 200                                          # shuffles or barriers a thread, in one block of 256
COMPILED = [("layer_norm.cu", "layer_norm_forward<float, 1>"),                  # a small kernel
            ("flash_attention_tc.cu", "flash_attention_tc_forward<bf16, 64, 64, 2>"),   # the largest ones
            ("flash_attention_tc.cu", "flash_attention_tc_backward_dkdv<bf16, 64, 64>"),
            ("flash_attention_tc.cu", "flash_attention_tc_backward_dq<bf16, 64, 32, 2>")]


def compile_seconds(check) -> float:
    """Seconds to build ``COMPILED`` for ``check`` into an empty cache, one compiler at a time."""
    import tempfile  # noqa: PLC0415
    import time  # noqa: PLC0415

    from minitensor.cuda import emulator

    before = os.environ.get("MINITENSOR_EMULATOR_CACHE")
    with tempfile.TemporaryDirectory(prefix="emulator-cache-") as cache:
        os.environ["MINITENSOR_EMULATOR_CACHE"] = cache
        try:
            t0 = time.perf_counter()
            emulator.precompile(COMPILED, check, workers=1)
            return time.perf_counter() - t0
        finally:
            if before is None:
                os.environ.pop("MINITENSOR_EMULATOR_CACHE")
            else:
                os.environ["MINITENSOR_EMULATOR_CACHE"] = before


def measure(compiles: bool = True) -> dict:
    """One round in this process: ms a launch, µs a warp operation or barrier, s to compile."""
    from minitensor.cuda import emulator

    kernels = {name: emulator.compile_source(SOURCE, name) for name in ("touch", "shuffles", "barriers")}
    other = emulator.compile_source(SOURCE + "\n// another library\n", "touch")
    out = {}
    for blocks, threads in LAUNCHES:
        x = np.zeros(blocks * threads, np.float32)
        out[f"launch, {blocks} x {threads} threads (ms)"] = 1e3 * median_seconds(
            lambda: kernels["touch"]((blocks,), (threads,), (x, np.int32(x.size))), "cpu", warmup=1, repeat=50)
    x = np.zeros(256, np.float32)
    # as in a model's step: each launch another kernel's (each kernel is a library of its own)
    out["launch, 1 x 256 threads, two kernels in turn (ms)"] = 1e3 / 2 * median_seconds(
        lambda: (kernels["touch"]((1,), (256,), (x, np.int32(256))), other((1,), (256,), (x, np.int32(256)))),
        "cpu", warmup=1, repeat=50)
    for name, what in (("shuffles", "a warp shuffle, 32 lanes (µs)"), ("barriers", "a barrier, 256 threads (µs)")):
        k = kernels[name]
        base = median_seconds(lambda: k((1,), (256,), (x, np.int32(0))), "cpu", warmup=1, repeat=20)
        full = median_seconds(lambda: k((1,), (256,), (x, np.int32(STEPS))), "cpu", warmup=1, repeat=5)
        out[what] = 1e6 * (full - base) / STEPS / (8 if name == "shuffles" else 1)
    for check in emulator.CHECKS if compiles else ():
        out[f"compiling {len(COMPILED)} kernels, {check or 'plain'} (s)"] = compile_seconds(check)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trees", help="comma-separated source trees to compare, in turn (default: this one)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--no-compiles", action="store_true", help="time the launches, shuffles and barriers only")
    p.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)   # one round, JSON on stdout
    p.add_argument("--out")
    a = p.parse_args()
    if a.measure:
        print(json.dumps(measure(not a.no_compiles)))
        return
    trees = [str(Path(t).resolve()) for t in a.trees.split(",")] if a.trees else [None]
    rounds = {t: [] for t in trees}
    for _ in range(a.rounds):
        for t in trees:
            env = dict(os.environ)
            if t:
                env["PYTHONPATH"] = t + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
            cmd = [sys.executable, __file__, "--measure"] + (["--no-compiles"] if a.no_compiles else [])
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise SystemExit(f"{t or '.'}: {proc.stderr[-2000:]}")
            rounds[t].append(json.loads(proc.stdout.splitlines()[-1]))
    medians = {t: {k: float(np.median([r[k] for r in rs])) for k in rs[0]} for t, rs in rounds.items()}
    names = list(medians[trees[0]])
    width = max(map(len, names))
    head = "".join(f"{Path(t).name if t else '.':>12}" for t in trees)
    print(f"{'':{width}}{head}" + ("       ratio" if len(trees) == 2 else ""))
    for n in names:
        row = "".join(f"{medians[t][n]:12.3f}" for t in trees)
        ratio = f"{medians[trees[1]][n] / medians[trees[0]][n]:11.3f}x" if len(trees) == 2 else ""
        print(f"{n:{width}}{row}{ratio}")
    write_results({"benchmark": "CUDA emulator: fixed costs", "environment": environment("cpu"),
                   "trees": {t or ".": commit(Path(t or ".")) for t in trees}, "rounds": a.rounds,
                   "compiles": not a.no_compiles,
                   "medians": {t or ".": m for t, m in medians.items()}}, a.out)


if __name__ == "__main__":
    main()
