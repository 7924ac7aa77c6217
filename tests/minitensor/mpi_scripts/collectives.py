"""Run under mpiexec by tests/minitensor/test_distributed.py: checks the collectives and prints one line per rank."""
import sys

import numpy as np

from minitensor import distributed

mode = sys.argv[1]
comm = distributed.init("cpu", timeout=float(sys.argv[2]) if mode in ("dead-peer", "stuck-peer") else None)
if mode == "ok":
    a = np.full(5, comm.rank + 1.0, dtype=np.float32)
    comm.all_reduce(a)
    b = np.arange(4.0) * (comm.rank + 7)
    comm.broadcast(b, root=0)
    comm.barrier()
    expected = sum(range(1, comm.world_size + 1))
    # one file per rank: the ranks' stdout lines can interleave in mpiexec's merged output
    with open(f"{sys.argv[2]}/rank{comm.rank}.txt", "w") as f:
        f.write(f"rank {comm.rank}/{comm.world_size} local {comm.local_rank} sum {a[0]:g} ok={a[0] == expected} "
                f"bcast_ok={np.array_equal(b, np.arange(4.0) * 7)}")
elif mode == "nccl-id":  # the NCCL unique id exchange, with a bytes id as CuPy 14's get_unique_id gives
    made = []

    def make_id():
        made.append(comm.rank)
        return bytes(range(128, 256))  # bytes above 127: an int8 conversion of them fails

    uid = distributed.share_unique_id(comm, make_id)
    with open(f"{sys.argv[2]}/rank{comm.rank}.txt", "w") as f:
        f.write(f"{type(uid).__name__} {len(uid)} {uid.hex()} made={made}")
elif mode == "threads":  # how many threads this rank was given for the BLAS and for minitensor's workers
    import os

    from minitensor import blas, threads

    with open(f"{sys.argv[2]}/rank{comm.rank}.txt", "w") as f:
        f.write(f"local_size {comm.local_size} blas {blas.info()['threads']} workers {threads.count()} "
                f"cores {threads.cores()} bound {threads.cores() < os.cpu_count()}")
elif mode == "dead-peer":  # rank 1 dies before the collective; rank 0 must not hang
    if comm.rank == 1:
        import os

        os._exit(3)
    comm.all_reduce(np.ones(3, dtype=np.float32))
elif mode == "stuck-peer":  # rank 1 never joins the collective (as if it never started)
    if comm.rank == 1:
        import time

        time.sleep(600)
    comm.all_reduce(np.ones(3, dtype=np.float32))
