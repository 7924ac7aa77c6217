"""minitensor.distributed over MPI: collectives across 2 processes, and bounded failure."""
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from minitensor import distributed

SCRIPT = Path(__file__).parent / "mpi_scripts" / "collectives.py"


def mpiexec():
    local = Path(sys.executable).parent / "mpiexec"
    return str(local) if local.exists() else shutil.which("mpiexec")


needs_mpi = pytest.mark.skipif(mpiexec() is None, reason="no mpiexec (pip install -e '.[mpi]')")


def launch(n, *args, timeout=120, env=None):
    t0 = time.monotonic()
    proc = subprocess.run([mpiexec(), "-n", str(n), sys.executable, str(SCRIPT), *args], capture_output=True,
                          text=True, timeout=timeout, env=env)
    return proc, time.monotonic() - t0


def test_single_process_collectives_are_the_identity():
    comm = distributed.init()
    assert isinstance(comm, distributed.SingleProcess) and comm.world_size == 1 and comm.rank == 0
    a = np.arange(3.0)
    comm.all_reduce(a)
    comm.broadcast(a)
    comm.barrier()
    np.testing.assert_array_equal(a, [0.0, 1.0, 2.0])


def test_reduce_gradients_alone_moves_nothing_and_gives_the_mean_as_a_factor():
    """With one process the gradients stay the very arrays they were (no copy, no division:
    the optimizer applies 1/count) and the values come back as given, the same objects."""
    import minitensor as mt  # noqa: PLC0415

    w = mt.nn.Parameter(np.ones(3, np.float32))
    w.grad = mt.tensor(np.array([2.0, 4.0, 6.0], np.float32))
    before = w.grad.data
    on_device = np.float32(5.0)  # stands for a device scalar: it must not be read
    grad_scale, sums = distributed.reduce_gradients(distributed.init(), [w], 8, (on_device, 1.0))
    assert grad_scale == 1 / 8 and sums[0] is on_device and sums[1] == 1.0
    assert w.grad.data is before and np.array_equal(before, [2.0, 4.0, 6.0])


@needs_mpi
def test_two_ranks_sum_broadcast_and_know_their_ranks(tmp_path):
    proc, _ = launch(2, "ok", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    lines = [(tmp_path / f"rank{r}.txt").read_text() for r in range(2)]
    assert lines == ["rank 0/2 local 0 sum 3 ok=True bcast_ok=True", "rank 1/2 local 1 sum 3 ok=True bcast_ok=True"]


@needs_mpi
def test_a_rank_that_dies_ends_the_job_instead_of_hanging():
    proc, seconds = launch(2, "dead-peer", "5")
    assert proc.returncode != 0
    assert seconds < 60


@needs_mpi
def test_a_rank_that_never_joins_makes_the_others_say_so_then_exit_with_a_clear_error():
    proc, seconds = launch(2, "stuck-peer", "3")
    assert proc.returncode != 0
    said = proc.stderr + proc.stdout
    assert re.search(r"^error: rank \d: all_reduce did not complete within 3 s", said, re.M)  # as CLI errors read
    # a wait that lasts says so first (halfway, when the limit is shorter than a minute)
    assert "for the other ranks in all_reduce; it gives up after 3 s (MINITENSOR_DIST_TIMEOUT)" in said
    assert seconds < 60


@needs_mpi
def test_the_nccl_unique_id_reaches_every_rank_as_bytes(tmp_path):
    """Rank 0 makes the id (CuPy 14: 128 bytes) and MPI carries it; every rank gets the same
    bytes, ready for NcclCommunicator, and only rank 0 made one."""
    proc, _ = launch(2, "nccl-id", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    expected = "bytes 128 " + bytes(range(128, 256)).hex()
    assert (tmp_path / "rank0.txt").read_text() == expected + " made=[0]"
    assert (tmp_path / "rank1.txt").read_text() == expected + " made=[]"


def without_thread_variables(**extra):
    return {**{k: v for k, v in os.environ.items() if k not in distributed.THREAD_VARIABLES}, **extra}


@needs_mpi
def test_ranks_on_one_machine_share_its_cores_unless_the_user_chose_threads(tmp_path):
    """2 ranks on one machine each run the BLAS and the worker threads on half its cores (at least
    one), not one thread per core each; a thread variable the user set is left to decide."""
    proc, _ = launch(2, "threads", str(tmp_path), env=without_thread_variables())
    assert proc.returncode == 0, proc.stderr
    for r in range(2):
        fields = (tmp_path / f"rank{r}.txt").read_text().split()
        got = dict(zip(fields[::2], fields[1::2]))
        cores = int(got["cores"])
        share = cores if got["bound"] == "True" else max(1, cores // 2)
        assert got["local_size"] == "2"
        assert int(got["workers"]) == share
        if got["blas"] != "None":  # an OpenBLAS this module can reach
            assert int(got["blas"]) == share
    proc, _ = launch(2, "threads", str(tmp_path), env=without_thread_variables(MINITENSOR_THREADS="3"))
    assert proc.returncode == 0, proc.stderr
    assert all(" workers 3 " in (tmp_path / f"rank{r}.txt").read_text() for r in range(2))


def test_share_cores_divides_the_cores_among_local_ranks_and_respects_thread_variables(monkeypatch):
    from minitensor import blas, threads

    for v in distributed.THREAD_VARIABLES:
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setattr(threads, "_limit", None)  # no share yet (a test worker has one), put back afterwards
    before = blas.info()["threads"]
    monkeypatch.setattr(threads, "cores", lambda: 8)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    try:
        assert distributed.share_cores(1) is None and threads.count() == 8  # alone: every core
        assert distributed.share_cores(4) == 2 and threads.count() == 2
        if before is not None:
            assert blas.info()["threads"] == 2
        assert distributed.share_cores(16) == 1  # more ranks than cores: one thread each
        monkeypatch.setattr(threads, "cores", lambda: 3)  # a launcher bound this rank to 3 of the 8 cores
        assert distributed.share_cores(2) == 3
        threads.limit(None)
        monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
        assert distributed.share_cores(4) is None and threads.count() == 3  # the user's choice stands
    finally:
        if before is not None:
            blas.set_threads(before)
