"""Tensor-core attention, forward + backward, on mma.sync and on wgmma with several tile settings,
and with the backward in two passes or one, side by side (needs a GPU of compute capability 9.0 for
the wgmma ones): the measurement that decides ``flash_attention.TC_TILES`` for the wgmma kernels and
whether ``set_wgmma`` and ``set_one_pass_backward`` should be on.

Each setting is the products' instruction, whether the backward is one pass, and the head-64 row of
``TC_TILES``: ((BK, MT) of the forward, BQ of the dK/dV pass, (BK, MT) of the dQ pass; the one-pass
backward takes ``ONE_PASS_BQ`` instead of the last two). At each length the settings alternate,
``--repeat`` rounds of each, and the forward alone is timed too; B x T is the same at every length
(``--tokens``), 8 heads of 64, bf16 by default. NVRTC compiles each setting's kernels on first use.

    python benchmarks/attention_tiles.py --out benchmarks/results/gpu_attention_tiles_h200.json
"""
from __future__ import annotations

import argparse

import numpy as np
from harness import environment, write_results

from minitensor import backend, cuda
from minitensor.cuda import flash_attention as flash

# name: (wgmma, one-pass backward, head-64 tiles)
SETTINGS = {
    "mma.sync": (False, False, ((64, 2), 64, (32, 2))),
    "mma.sync one pass": (False, True, ((64, 2), 64, (32, 2))),
    "wgmma": (True, False, ((64, 2), 64, (32, 2))),
    "wgmma one pass": (True, True, ((64, 2), 64, (32, 2))),
    "wgmma forward MT 1": (True, False, ((64, 1), 64, (32, 2))),
    "wgmma dK/dV BQ 32": (True, False, ((64, 2), 32, (32, 2))),
    "wgmma dQ BK 64 MT 1": (True, False, ((64, 2), 64, (64, 1))),
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", default="512,1024,2048,4096")
    p.add_argument("--dtype", default="bfloat16", help="bfloat16 or float16")
    p.add_argument("--tokens", type=int, default=16_384)
    p.add_argument("--repeat", type=int, default=3, help="rounds of each setting")
    p.add_argument("--settings", default=",".join(SETTINGS), help="a comma-separated choice among: "
                   + ", ".join(SETTINGS))
    p.add_argument("--out")
    a = p.parse_args()
    chosen = a.settings.split(",")
    unknown = [s for s in chosen if s not in SETTINGS]
    if unknown:
        raise SystemExit(f"--settings: no setting {unknown} (there are {list(SETTINGS)})")
    cp = backend.cupy()
    from cupyx.profiler import benchmark

    tables = dict(flash.TC_TILES)
    rows = []
    for T in map(int, a.lengths.split(",")):
        B, H, d = max(1, a.tokens // T), 8, 64
        q, k, v, g = (cp.random.standard_normal((B, H, T, d), dtype=cp.float32).astype(a.dtype) for _ in range(4))

        def forward():
            return flash.forward(q, k, v, None, d ** -0.5)

        def step():
            out, lse = forward()
            flash.backward(g, q, k, v, out, lse, None, d ** -0.5)

        times = {s: ([], []) for s in chosen}
        for _ in range(a.repeat):
            for s in chosen:
                wg, one_pass, tiles = SETTINGS[s]
                cuda.set_wgmma(wg)
                cuda.set_one_pass_backward(one_pass)
                flash.TC_TILES[d] = tiles
                times[s][0].append(float(np.median(benchmark(step, n_repeat=10, n_warmup=2).gpu_times) * 1e3))
                times[s][1].append(float(np.median(benchmark(forward, n_repeat=10, n_warmup=2).gpu_times) * 1e3))
        flash.TC_TILES.update(tables)
        cuda.set_wgmma(False)
        cuda.set_one_pass_backward(False)
        r = {"dtype": a.dtype, "batch": B, "heads": H, "T": T, "head_size": d}
        for s, (whole, fwd) in times.items():
            r[f"{s} ms"] = round(float(np.median(whole)), 4)
            r[f"{s} forward ms"] = round(float(np.median(fwd)), 4)
            r[f"{s} speed vs mma.sync"] = round(r["mma.sync ms"] / r[f"{s} ms"], 3) if "mma.sync ms" in r else None
        rows.append(r)
        print(r, flush=True)
    write_results({"benchmark": "tensor-core attention: mma.sync and wgmma tile settings", "settings":
                   {s: dict(zip(("wgmma", "one_pass", "tiles"), SETTINGS[s])) for s in chosen},
                   "environment": environment("cuda"), "rows": rows}, a.out)


if __name__ == "__main__":
    main()
