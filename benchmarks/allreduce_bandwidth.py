"""All-reduce bandwidth for a Transformer-base-sized gradient buffer (63,082,496 float32).

    mpiexec -n 2 python benchmarks/allreduce_bandwidth.py --device cpu     # MPI on NumPy arrays
    mpiexec -n 8 python benchmarks/allreduce_bandwidth.py --device cuda    # NCCL, one GPU per rank
    python benchmarks/allreduce_bandwidth.py --device cuda                 # NCCL, world size 1

Prints, on rank 0, the time per all-reduce, the algorithm bandwidth (bytes / time) and the bus
bandwidth (algbw x 2(n-1)/n, the convention of nccl-tests, comparable across world sizes).
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

from minitensor import backend, distributed
from transformer import TransformerConfig


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--elements", type=int, default=TransformerConfig.base(37000).num_parameters())
    p.add_argument("--iters", type=int, default=10)
    a = p.parse_args()
    comm = distributed.init(a.device)  # NCCL on cuda (world of one without mpiexec), MPI on cpu
    if a.device == "cpu" and comm.world_size == 1:
        raise SystemExit("on the CPU there is nothing to measure in one process: mpiexec -n 2 python ...")
    xp = backend.xp_for(a.device)
    buf = xp.ones(a.elements, dtype=np.float32)

    def reduce():
        comm.all_reduce(buf)
        if a.device == "cuda":
            xp.cuda.get_current_stream().synchronize()

    reduce()
    t0 = time.perf_counter()
    for _ in range(a.iters):
        reduce()
    seconds = (time.perf_counter() - t0) / a.iters
    n = comm.world_size
    algbw = buf.nbytes / seconds / 1e9
    busbw = algbw * (2 * (n - 1) / n) if n > 1 else algbw
    if comm.rank == 0:
        print(json.dumps({"device": a.device, "world_size": n, "bytes": int(buf.nbytes),
                          "ms_per_all_reduce": round(seconds * 1000, 2), "algbw_GBps": round(algbw, 2),
                          "busbw_GBps": round(busbw, 2)}))


if __name__ == "__main__":
    main()
