"""Data-parallel communication: one small interface, two real engines.

    comm = distributed.init()          # MPI when launched under mpiexec with >1 process, else single
    comm.rank, comm.world_size, comm.local_rank, comm.local_size
    comm.all_reduce(array)             # in place, sum over ranks
    comm.broadcast(array, root=0)      # in place
    comm.barrier()
    grad_scale, sums = reduce_gradients(comm, params, tokens, values)   # a training step's one call

- :class:`MPICommunicator`: NumPy arrays over MPI (mpi4py; ``pip install -e '.[mpi]'``).
- :class:`NCCLCommunicator`: CuPy arrays over NCCL (``cupy.cuda.nccl``). Each process selects
  GPU ``local_rank`` *before* the communicator is created; rank 0 makes the NCCL unique id and
  shares it over MPI, so the same ``mpiexec`` launch works on one node or across nodes.

CPU ranks that share a machine share its cores: each runs the BLAS and minitensor's worker
threads on ``cores // local_size`` threads (:func:`share_cores`), unless a thread variable
such as ``OPENBLAS_NUM_THREADS`` says otherwise. Left alone, every rank would start one
thread per core, and 2 ranks on 2 cores would run 4 busy threads.

Failure behaviour: every collective waits at most ``timeout`` seconds (default 600, or
``$MINITENSOR_DIST_TIMEOUT``). A rank that died or never started makes the others raise
:class:`DistributedError` within that bound instead of hanging; under MPI the job is then
aborted, so mpiexec ends every process. A wait that lasts :data:`WAIT_NOTE_SECONDS` says so
once, naming the collective and when the job will give up, so a frozen rank is not a silent hang.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

from . import backend, blas, environment, threads
from .tensor import from_array


class DistributedError(RuntimeError):
    """A collective did not complete (a peer died, never started, or timed out)."""


def default_timeout() -> float:
    return environment.value("MINITENSOR_DIST_TIMEOUT")


WAIT_NOTE_SECONDS = 60.0  # a collective that waits this long says so (once)


def _waiting(rank: int, what: str, since: float, limit: float, noted: bool) -> bool:
    """Say once that ``rank`` has waited long in ``what``; returns whether it has been said."""
    if not noted and time.monotonic() - since >= min(WAIT_NOTE_SECONDS, limit / 2):
        print(f"note: rank {rank} has waited {time.monotonic() - since:.0f} s for the other ranks in {what}; it gives up "
              f"after {limit:.0f} s (MINITENSOR_DIST_TIMEOUT) if one has died or is frozen", file=sys.stderr, flush=True)
        return True
    return noted


class Communicator:
    """rank / world_size / local_rank, and in-place sum all-reduce, broadcast and barrier."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_size: int = 1  # the ranks on this machine

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def all_reduce(self, array) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def broadcast(self, array, root: int = 0) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def barrier(self, timeout: float | None = None) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def sum_on_host(self, values) -> tuple:
        """``values`` (host floats) summed over the ranks: a decision every rank must take alike
        (when to stop), made from what each rank knows."""
        array = np.asarray(values, dtype=np.float64)
        if self.world_size > 1:
            self.all_reduce(array)
        return tuple(array.tolist())


class SingleProcess(Communicator):
    """World size 1: every collective is the identity."""

    def all_reduce(self, array) -> None:
        return None

    def broadcast(self, array, root: int = 0) -> None:
        return None

    def barrier(self, timeout: float | None = None) -> None:
        return None


def _mpi():
    try:
        from mpi4py import MPI  # noqa: PLC0415
    except ImportError as e:
        raise DistributedError("MPI needs mpi4py and an MPI library: pip install -e '.[mpi]'") from e
    return MPI


def _local_rank_and_size(comm) -> tuple[int, int]:
    """The rank among the processes on this node (to pick a GPU), and how many they are."""
    node = comm.Split_type(_mpi().COMM_TYPE_SHARED)
    return node.Get_rank(), node.Get_size()


# variables by which a user chooses thread counts; share_cores leaves a process alone when one is set
THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "MINITENSOR_THREADS")


def share_cores(local_size: int) -> int | None:
    """Give this process its share of the machine's cores when ``local_size`` ranks run on it:
    the BLAS and :mod:`minitensor.threads` use ``cores // local_size`` threads (at least 1; all
    the cores a launcher bound it to, when it did). Returns the thread count, or None when a
    variable in :data:`THREAD_VARIABLES` is set (the user's choice stands) or the rank is alone."""
    if local_size <= 1 or any(os.environ.get(v) for v in THREAD_VARIABLES):
        return None
    usable = threads.cores()
    bound = usable < (os.cpu_count() or usable)  # the launcher pinned this rank to some cores
    n = usable if bound else max(1, usable // local_size)
    blas.set_threads(n)
    threads.limit(n)
    return n


class MPICommunicator(Communicator):
    """Collectives over MPI on NumPy arrays, each bounded by ``timeout`` seconds."""

    def __init__(self, timeout: float | None = None):
        MPI = _mpi()
        self.MPI = MPI
        self.comm = MPI.COMM_WORLD
        self.rank, self.world_size = self.comm.Get_rank(), self.comm.Get_size()
        self.local_rank, self.local_size = _local_rank_and_size(self.comm)
        self.timeout = default_timeout() if timeout is None else timeout

    def _wait(self, request, what: str, timeout: float | None = None) -> None:
        limit = self.timeout if timeout is None else timeout
        since = time.monotonic()
        deadline, noted = since + limit, False
        while not request.Test():
            noted = _waiting(self.rank, what, since, limit, noted)
            if time.monotonic() > deadline:
                msg = (f"rank {self.rank}: {what} did not complete within {limit:.0f} s; another rank has "
                       "probably died or never started. Aborting the job.")
                print(f"error: {msg}", file=sys.stderr, flush=True)  # as the command line's errors read
                time.sleep(1.0)  # let the launcher forward the message before Abort tears the job down
                self.comm.Abort(1)
                raise DistributedError(msg)  # only reached if Abort returns (it should not)
            time.sleep(0.0005)

    def all_reduce(self, array) -> None:
        if not isinstance(array, np.ndarray):
            raise TypeError("MPICommunicator.all_reduce needs a NumPy array; use NCCL for GPU arrays")
        self._wait(self.comm.Iallreduce(self.MPI.IN_PLACE, array, op=self.MPI.SUM), "all_reduce")

    def broadcast(self, array, root: int = 0) -> None:
        self._wait(self.comm.Ibcast(array, root=root), "broadcast")

    def barrier(self, timeout: float | None = None) -> None:
        self._wait(self.comm.Ibarrier(), "barrier", timeout)


def _contiguous(array, what: str) -> int:
    """The device address of ``array``, which NCCL reads as ``array.size`` items one after the
    other: a strided view would have it reduce the wrong elements, so it is refused."""
    if not array.flags.c_contiguous:
        raise ValueError(f"NCCL {what}: needs a C-contiguous array, got a view of shape {array.shape} "
                         f"with strides {array.strides}")
    return array.data.ptr


class NCCLCommunicator(Communicator):
    """Collectives over NCCL on CuPy arrays; MPI only launches the processes and shares the id."""

    def __init__(self, timeout: float | None = None):
        # under mpiexec: MPI tells the ranks and carries the id; alone: a world of one, no MPI needed
        self.mpi = MPICommunicator(timeout) if launched_under_mpi() else SingleProcess()
        self.rank, self.world_size = self.mpi.rank, self.mpi.world_size
        self.local_rank, self.local_size = self.mpi.local_rank, self.mpi.local_size
        cp = backend.cupy()
        nccl = load_nccl()
        self.cp, self.nccl = cp, nccl
        cp.cuda.Device(self.local_rank % cp.cuda.runtime.getDeviceCount()).use()  # before the communicator
        uid = share_unique_id(self.mpi, nccl.get_unique_id)
        self.comm = nccl.NcclCommunicator(self.world_size, uid, self.rank)
        self.timeout = default_timeout() if timeout is None else timeout

    def _dtype(self, array):
        n = self.nccl
        table = {np.dtype(np.float32): n.NCCL_FLOAT32, np.dtype(np.float64): n.NCCL_FLOAT64,
                 np.dtype(np.float16): n.NCCL_FLOAT16, np.dtype(np.int32): n.NCCL_INT32, np.dtype(np.int64): n.NCCL_INT64}
        if array.dtype not in table:
            raise TypeError(f"NCCL all_reduce: unsupported dtype {array.dtype}")
        return table[array.dtype]

    def _sync(self, what: str) -> None:
        stream = self.cp.cuda.get_current_stream()
        event = stream.record()
        since = time.monotonic()
        deadline, noted = since + self.timeout, False
        while not event.done:
            noted = _waiting(self.rank, f"NCCL {what}", since, self.timeout, noted)
            if time.monotonic() > deadline:
                self.comm.abort()
                raise DistributedError(f"rank {self.rank}: NCCL {what} did not complete within {self.timeout:.0f} s")
            time.sleep(0.0005)

    def all_reduce(self, array) -> None:
        stream = self.cp.cuda.get_current_stream().ptr
        ptr = _contiguous(array, "all_reduce")
        self.comm.allReduce(ptr, ptr, array.size, self._dtype(array), self.nccl.NCCL_SUM, stream)
        self._sync("all_reduce")

    def broadcast(self, array, root: int = 0) -> None:
        stream = self.cp.cuda.get_current_stream().ptr
        self.comm.bcast(_contiguous(array, "broadcast"), array.size, self._dtype(array), root, stream)
        self._sync("broadcast")

    def barrier(self, timeout: float | None = None) -> None:
        self.mpi.barrier(timeout)

    def sum_on_host(self, values) -> tuple:
        """Host numbers go over MPI, which launched the ranks: no device copy and no wait on the stream."""
        return self.mpi.sum_on_host(values)


NCCL_UNIQUE_ID_BYTES = 128


def load_nccl(module=None):
    """CuPy's NCCL bindings (``cupy.cuda.nccl``), or a :class:`DistributedError` saying how to
    get the library when CuPy could not load it (``cupy.cuda.nccl.available`` is False)."""
    if module is None:
        from cupy.cuda import nccl as module  # noqa: PLC0415
    if not getattr(module, "available", False):
        raise DistributedError(
            "NCCL is not available to CuPy (cupy.cuda.nccl.available is False): install the NCCL library for "
            "your CUDA version, e.g. pip install nvidia-nccl-cu13 (or -cu12); the cuda12/cuda13 extras include it")
    return module


def share_unique_id(comm: Communicator, make_id) -> bytes:
    """Rank 0 calls ``make_id()`` (NCCL's ``get_unique_id``: 128 bytes) and every rank gets
    those bytes, broadcast over ``comm`` (MPI), as ``NcclCommunicator`` takes them."""
    buf = np.zeros(NCCL_UNIQUE_ID_BYTES, dtype=np.uint8)
    if comm.rank == 0:
        uid = make_id()
        if not isinstance(uid, bytes) or len(uid) != NCCL_UNIQUE_ID_BYTES:
            raise DistributedError(f"expected a {NCCL_UNIQUE_ID_BYTES}-byte NCCL unique id, got {type(uid).__name__} "
                                   f"of length {len(uid)}")
        buf[:] = np.frombuffer(uid, dtype=np.uint8)
    comm.broadcast(buf)
    return buf.tobytes()


def launched_under_mpi() -> bool:
    """True when an MPI launcher started this process as one of several."""
    for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"):  # (the launchers' own)
        size = os.environ.get(var, "").strip()
        if size.isdigit() and int(size) > 1:
            return True
    return False


def reduce_gradients(comm: Communicator, params, count, values=()) -> tuple[float, tuple]:
    """Sum the gradients of ``params`` over the ranks, for their mean over ``count`` items
    (target tokens, say: each rank gives its own count).

    Returns ``(grad_scale, sums)``: ``grad_scale`` is 1 / (the counts summed over ranks), the
    factor that makes the summed gradients a mean, for the optimizer to apply in its own pass
    (``optimizer.step(grad_scale)``); ``sums`` are ``values`` (floats or device scalars) summed
    over ranks. The gradients, the count and the values travel in one flat buffer through one
    all-reduce, after which each gradient is a view of that buffer. With one process nothing
    moves and nothing waits: the values come back as given, device scalars still on the device.
    """
    values = tuple(values)
    if comm.world_size == 1:
        return 1.0 / count, values
    params = list(params)
    xp = params[0].xp
    sizes = [p.size for p in params]
    flat = xp.zeros(sum(sizes) + 1 + len(values), dtype=params[0].dtype)
    offset = 0
    for p, n in zip(params, sizes):
        if p.grad is not None:
            flat[offset:offset + n] = p.grad.data.reshape(-1)
        offset += n
    flat[offset] = count
    for i, v in enumerate(values):
        flat[offset + 1 + i] = v
    comm.all_reduce(flat)
    total, *sums = flat[offset:].tolist()
    offset = 0
    for p, n in zip(params, sizes):
        p.grad = from_array(flat[offset:offset + n].reshape(p.shape))
        offset += n
    return 1.0 / total, tuple(sums)


def init(device: str = "cpu", timeout: float | None = None) -> Communicator:
    """The communicator for this process: NCCL for "cuda" (a world of one without mpiexec);
    for "cpu", MPI when mpiexec started several processes, otherwise :class:`SingleProcess`."""
    if backend.normalize_device(device) == "cuda":
        return NCCLCommunicator(timeout)
    if not launched_under_mpi():
        return SingleProcess()
    comm = MPICommunicator(timeout)
    share_cores(comm.local_size)
    return comm
