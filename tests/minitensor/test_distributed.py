"""minitensor.distributed over MPI: collectives across 2 processes, and bounded failure."""
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


def launch(n, *args, timeout=120):
    t0 = time.monotonic()
    proc = subprocess.run([mpiexec(), "-n", str(n), sys.executable, str(SCRIPT), *args], capture_output=True,
                          text=True, timeout=timeout)
    return proc, time.monotonic() - t0


def test_single_process_collectives_are_the_identity():
    comm = distributed.init()
    assert isinstance(comm, distributed.SingleProcess) and comm.world_size == 1 and comm.rank == 0
    a = np.arange(3.0)
    comm.all_reduce(a)
    comm.broadcast(a)
    comm.barrier()
    np.testing.assert_array_equal(a, [0.0, 1.0, 2.0])


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
def test_a_rank_that_never_joins_makes_the_others_exit_with_a_clear_error():
    proc, seconds = launch(2, "stuck-peer", "3")
    assert proc.returncode != 0
    assert "did not complete within 3 s" in proc.stderr + proc.stdout
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
