"""A strict CuPy double: the CuPy 14 API on NumPy arrays, for running the GPU path without a GPU.

``install(devices=1)`` puts modules named ``cupy``, ``cupy.cuda``, ``cupy.cuda.runtime``,
``cupy.cuda.nccl``, ``cupy.cuda.curand``, ``cupy.random``, ``cupy._core._routines_linalg``,
``cupy_backends.cuda.libs.cublas``, ``cupyx`` and ``cupyx.profiler`` into ``sys.modules``; ``uninstall()`` takes them out again.
It lives under ``tests/`` (never installed with the package) and only ``install`` puts it in
place, so it cannot shadow a real CuPy by accident.

What it offers is read from ``spec.json``, which ``make_spec.py`` writes from the real CuPy
14.2 (and CuPy's source for NCCL, cuRAND and cuBLAS): a name CuPy lacks raises ``AttributeError``; a
name CuPy has but the double does not model raises ``NotImplementedError`` when used. Where
CuPy is strict, the double is too (each rule cites CuPy's source in ``double.py``):

- ``ndarray`` is its own class, not a NumPy subclass; ``np.asarray(x)`` raises CuPy's TypeError;
- a NumPy array as a ufunc operand raises ``TypeError: Unsupported type`` (0-d included;
  comparisons turn a 0-d one into a scalar, as CuPy does);
- ``x[...] = list`` and assigning a NumPy array of more than 0 dimensions raise;
- an ``ndarray`` method takes only the keywords CuPy's signature names (``max(initial=0)`` raises);
- reductions return 0-d arrays; output dtypes follow CuPy's loop search over the real tables;
- batched bfloat16 ``matmul`` raises as ``_routines_linalg.pyx`` does;
- ``RandomState`` draws float32 and float64 only;
- ``RawModule`` kernels check their arguments and run on the project's CUDA emulator;
  ``ElementwiseKernel`` runs a NumPy reference of its body (registered by name);
- ``gemmEx`` and ``gemmStridedBatchedEx`` check their arguments as Cython and cuBLAS do, then read
  and write column-major at the device addresses given, inside the arrays' allocations only;
- every call that would launch device work is counted (``double.launches()``);
- ``NcclCommunicator`` checks the 128-byte id and the integer pointers, and reduces over MPI
  (mpi4py) at the arrays' addresses;
- stream capture (``Stream.begin_capture``/``end_capture``, ``Graph.launch``) runs nothing of
  the capture, keeps each launch's scalars (cuBLAS's alpha and beta too), replays with the
  arrays as they hold then, and refuses copies between host and device, host reads,
  synchronisation and random draws while capturing.

Known differences, which only hardware shows: cuRAND's streams (draws come from NumPy, so
initial weights differ from a GPU's; dropout draws its masks in its own kernel, which runs on
the emulator, so those are a GPU's), asynchrony (every call is synchronous), timings, and real
device memory (the pool counts the bytes of live arrays, rounded as CuPy's pool rounds them; a
graph's own pool hands out nothing, and nothing is ever handed out twice), and the order of
work across streams.
"""
from .double import install, installed, uninstall  # noqa: F401
