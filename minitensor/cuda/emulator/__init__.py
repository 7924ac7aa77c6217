"""Run this folder's CUDA kernels on the CPU, with strict checks: the emulator.

The kernels in ``minitensor/cuda/*.cu`` are written for NVIDIA GPUs and compiled at run time
by NVRTC. This module compiles *the same text* (``common.cuh`` pasted in, as NVRTC sees it)
with the host C++ compiler, together with ``emulator.h``, which supplies the CUDA the kernels
use: ``threadIdx``/``blockIdx``/``blockDim``/``gridDim``, static and dynamic shared memory,
``__syncthreads``, warp shuffles and votes, the float intrinsics, and f16 conversions that
round bit for bit as PTX ``cvt`` does. Each CUDA thread runs on a fiber of its own and the
threads of a block take turns at every barrier and warp operation, so barriers and shuffles
behave as they do on hardware. Blocks run one after another.

It exists for correctness and for learning, not for speed: a launch of a few hundred threads
takes milliseconds, as long as a GPU takes for a large model step. Use it to run and test
the kernels on a machine without a GPU, and to find the bugs a GPU would hide or turn into
hangs. What it checks, each reported as an :class:`EmulatorError` that names the kernel and,
where it applies, the block and the thread:

* a ``__syncthreads`` or a warp operation that some thread of the block or warp never
  reaches (it exited, or waits elsewhere): a deadlock report, never a hang;
* the arguments, unpacked as ``cuLaunchKernel`` unpacks them: their count, each one's byte
  size against the kernel's C++ parameter type, pointer against value, and an array's
  element type against the pointer's;
* the launch limits of an H100: 1024 threads per block, block (1024, 1024, 64), grid y and
  z up to 65535, 48 KiB of static shared memory, 48 KiB of dynamic shared memory without
  opting in (``kernel.max_dynamic_shared_size_bytes``) and 227 KiB with;
* uninitialised memory: arrays from :data:`arrays` ``.empty``/``.empty_like`` (what the
  launchers allocate outputs with) and shared memory at the start of every block are filled
  with NaN bytes, so an entry a kernel forgets to write, or a shared value it reads before
  writing, shows up as NaN;
* ``check="memory"``: each launch runs in a subprocess built with AddressSanitizer, so an
  out-of-bounds access to an argument buffer or to shared memory is reported with the
  thread that made it;
* ``check="race"``: every access to shared memory is tracked (through the compiler's
  ThreadSanitizer instrumentation, routed to ``emulator.h``), and two threads touching the
  same byte between two barriers, one of them writing, is reported as a race. Global memory
  too: a block that touches a byte another block of the launch wrote must have taken its turn
  (``common.cuh``'s ``await_turn``), and the writer must have passed the turn on after writing;
  otherwise the access is reported (blocks run one at a time here, but at once on a GPU);
* blocks that wait for one another: a block that waits for a turn no block started before it
  can pass on gives up at once and reports it, as on a GPU it would after its bound
  (``common.cuh``'s ``await_turn``; the kernel's caller reads the report). Blocks start in
  ``blockIdx`` order (x fastest), or from the last block back under :func:`block_order`
  ``("reverse")``: CUDA
  promises no order, so a kernel whose blocks take turns should give the same result in both.

How it is called: exactly as CuPy calls a compiled kernel, ``kernel(grid, block, args,
shared_mem=...)``, with NumPy arrays where CuPy would take CuPy arrays (a NumPy array is
passed as a pointer to its first element, the way CuPy passes a ``cupy.ndarray``; scalars are
marshalled as CuPy 14 marshals them). The launchers in this folder get their kernels from
:func:`minitensor.cuda.build.kernel`, which hands out emulated ones for NumPy arrays, so
they run unchanged. Turn it on with ``MINITENSOR_CUDA=emulate`` or
:func:`minitensor.cuda.emulate`; the ops' kernel routes (LayerNorm, the fused softmax,
flash attention) then take NumPy arrays through the emulator end to end.

Floating point: nvcc and NVRTC contract ``a*b + c`` into fused multiply-adds; the emulator
compiles with ``-ffp-contract=fast`` (and ``-mfma`` where the CPU has FMA), so it does the
same. Results can still differ from a GPU's in the last bits where (1) the two compilers
contract different pairs of a longer expression; (2) ``__expf``, ``__logf`` and ``rsqrtf``,
which are hardware approximations on the GPU (within 2 ulp), are computed here from
correctly rounded ``exp2``/``log2``/``sqrt``; (3) CuPy compiles with ``-ftz=true``, which
flushes float32 subnormals to zero on the GPU and not here. Everything else, including the
order of every sum and the 16-bit conversions, is the same.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import re
import shutil
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

import numpy as np

from ... import environment, threads
from .. import sources

HEADER = Path(__file__).resolve().parent / "emulator.h"
CHECKS = (None, "race", "memory")

# Launch limits of an H100 (compute capability 9.0)
MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK = (1024, 1024, 64)
MAX_GRID = (2**31 - 1, 65535, 65535)
STATIC_SHARED_LIMIT = 48 * 1024
DYNAMIC_SHARED_DEFAULT = 48 * 1024          # without opting in
SHARED_OPT_IN_LIMIT = 227 * 1024            # static + dynamic, opted in
_ERRLEN = 16384
_ASAN_EXIT = 86
BLOCK_ORDERS = ("index", "reverse")
_block_order = "index"


class EmulatorError(RuntimeError):
    """A kernel broke a rule of CUDA on the emulator (deadlock, race, bad argument, launch
    limit, out-of-bounds access), or the emulator itself could not run (no C++ compiler)."""


# ------------------------------------------------------------------ the array module of the emulated device
def poison(a: np.ndarray) -> np.ndarray:
    """Fill ``a`` with NaN (floating dtypes) or 0xff bytes (others): memory nobody wrote."""
    if a.dtype.kind == "f" or a.dtype.name == "bfloat16":
        a.fill(np.nan)
    elif a.size:
        a.view(np.uint8).fill(0xFF)
    return a


class DeviceArrays:
    """NumPy as the emulated device's array module: everything is NumPy's, except that
    ``empty`` and ``empty_like`` return memory filled with NaN, as fresh GPU memory holds
    garbage. A launcher that allocates its outputs with them (as with ``cupy.empty``) and a
    kernel that leaves an entry unwritten give a NaN there, which the tests catch."""

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def empty(shape, dtype=float, order="C"):
        return poison(np.empty(shape, dtype=dtype, order=order))

    @staticmethod
    def empty_like(a, dtype=None, order="K", subok=True, shape=None):
        return poison(np.empty_like(a, dtype=dtype, order=order, subok=subok, shape=shape))


arrays = DeviceArrays()


# ------------------------------------------------------------------ the compiler
def compiler() -> str:
    """The C++ compiler the emulator uses: ``$CXX``, else ``c++``/``g++``/``clang++`` on PATH."""
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    raise EmulatorError("the CUDA emulator needs a C++17 compiler and found none: install g++ "
                        "(Debian/Ubuntu: apt install g++) or set CXX")


@lru_cache(maxsize=None)
def _compiler_identity(cxx: str) -> str:
    out = subprocess.run([cxx, "--version"], capture_output=True, text=True)
    return out.stdout.splitlines()[0] if out.stdout else cxx


def _x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64", "i686", "i386")


@lru_cache(maxsize=None)
def _cpu_has_fma() -> bool:
    """Whether the CPU has a fused multiply-add (every 64-bit ARM does; x86 from Haswell on)."""
    if not _x86():
        return platform.machine().lower() in ("aarch64", "arm64")
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return bool(re.search(r"^flags\s*:.*\bfma\b", flags, re.M))


def _flags(check: str | None) -> list[str]:
    f = ["-std=c++17", "-fPIC", "-fvisibility=hidden", "-ffp-contract=fast", "-fno-strict-aliasing",
         "-Wno-unknown-pragmas", "-pthread", "-U_FORTIFY_SOURCE"]   # the fibers' _longjmp (emulator.h)
    if _cpu_has_fma() and _x86():
        f.append("-mfma")   # contract a*b + c into one rounding, as the GPU does
    if check == "memory":   # -g1: line tables alone, enough for AddressSanitizer's file:line
        return f + ["-O1", "-g1", "-fno-omit-frame-pointer", "-fsanitize=address", "-DMT_EMU_RUNNER"]
    if check == "race":     # no -g: emulator.h takes the instrumentation's calls and reports by itself
        return f + ["-O1", "-fsanitize=thread", "-DMT_EMU_RACE"]
    return f + ["-O2"]


def cache_dir() -> Path:
    """Where compiled kernels are kept: ``$MINITENSOR_EMULATOR_CACHE``, else ``emulator/`` in the
    project's cache (:func:`minitensor.environment.cache_folder`)."""
    if (folder := environment.value("MINITENSOR_EMULATOR_CACHE")) is not None:
        return Path(folder)
    return environment.cache_folder() / "emulator"


# ------------------------------------------------------------------ kernel signatures from the source
def _split_top(text: str) -> list[str]:
    """Split a parameter list at the commas outside <>, () and []."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur))
    return parts


@lru_cache(maxsize=None)
def signatures(source: str) -> dict[str, list[tuple[str, str]]]:
    """{kernel name: [(C++ type as written, parameter name), ...]} for every ``__global__``
    function in the kernel text ``source`` (for error messages; the sizes come from the compiler)."""
    text = re.sub(r"//[^\n]*", "", source)
    out = {}
    for m in re.finditer(r"__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(", text):
        depth, i = 1, m.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        params = []
        for p in _split_top(text[m.end():i - 1]):
            p = " ".join(p.replace("__restrict__", "").split())
            name = re.search(r"(\w+)\s*$", p).group(1)
            params.append((p[: -len(name)].strip(), name))
        out[m.group(1)] = params
    return out


# ------------------------------------------------------------------ building
_KIND = {0: "other", 1: "pointer", 2: "float", 3: "signed", 4: "unsigned", 5: "bool", 6: "struct"}


class _ParamInfo(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint), ("kind", ctypes.c_int), ("pointee_size", ctypes.c_uint),
                ("pointee_kind", ctypes.c_int), ("pointee_const", ctypes.c_int)]


class _Launch(ctypes.Structure):
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("dynamic_shared", ctypes.c_ulonglong),
                ("track_races", ctypes.c_int), ("reverse_blocks", ctypes.c_int), ("nshared", ctypes.c_int),
                ("shared", ctypes.POINTER(ctypes.c_ulonglong)), ("fibers", ctypes.c_void_p)]


# The fibers (a stack and a thread record for each thread of a block), made once for every
# in-process launch (they run one at a time, under _launch_lock): making them at each launch cost
# more than a small kernel's work, and a thread that exited waits where the next launch, of any
# kernel, resumes it (emulator.h's Fibers). Their address (0: each launch makes its own), or None
# before the first launch.
_fibers: int | None = None


def _fiber_pool(lib) -> int:
    global _fibers
    if _fibers is None:
        lib.mt_emu_make_fibers.restype = ctypes.c_void_p
        _fibers = lib.mt_emu_make_fibers(MAX_THREADS_PER_BLOCK) or 0
    return _fibers


def _unit(expression: str, check: str | None) -> str:
    """The translation unit: emulator.h, the kernel text in an anonymous namespace, exports."""
    name = expression.replace("\\", "\\\\").replace('"', '\\"')
    text = ['#include "emulator.h"', "namespace {", '#include "kernel.cuh"', "}",
            f"static constexpr auto mt_kernel = &{expression};",
            'extern "C" __attribute__((visibility("default"))) int mt_emu_param_count() '
            "{ return mt_emu::param_count(mt_kernel); }",
            'extern "C" __attribute__((visibility("default"))) void mt_emu_param_info(mt_emu::ParamInfo* out) '
            "{ mt_emu::param_info(mt_kernel, out); }"]
    if check == "memory":
        text.append("int main(int argc, char** argv) "
                    f'{{ return mt_emu::runner_main(argc, argv, &mt_emu::entry<mt_kernel>, "{name}"); }}')
    else:
        text.append('extern "C" __attribute__((visibility("default"))) int mt_emu_launch('
                    "const mt_emu::Launch* cfg, void** args, char* err, unsigned long long errlen) "
                    f'{{ return mt_emu::launch(&mt_emu::entry<mt_kernel>, "{name}", cfg, args, err, errlen); }}')
        text.append('extern "C" __attribute__((visibility("default"))) mt_emu::Fibers* mt_emu_make_fibers(int n) '
                    "{ return mt_emu::make_fibers(n); }")
    return "\n".join(text) + "\n"


_build_locks: dict[str, threading.Lock] = {}
_build_locks_guard = threading.Lock()


def _run(cmd, cwd, what: str):
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if out.returncode != 0:
        raise EmulatorError(f"the C++ compiler failed on {what}:\n{' '.join(cmd)}\n{out.stderr[-6000:]}")


def _cached_build(key: str, target_name: str, make) -> Path:
    """``cache_dir()/key/target_name``, built by ``make(work)`` in a fresh folder the first time,
    once across threads and processes (the finished folder is renamed into place)."""
    out_dir = cache_dir() / key
    target = out_dir / target_name
    if target.exists():
        return target
    with _build_locks_guard:
        lock = _build_locks.setdefault(key, threading.Lock())
    with lock:
        if target.exists():
            return target
        cache_dir().mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="build-", dir=cache_dir()))
        try:
            make(work)
            try:
                os.replace(work, out_dir)
            except OSError:       # another process built it first
                shutil.rmtree(work, ignore_errors=True)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
    return target


@lru_cache(maxsize=None)
def _is_gcc(cxx: str) -> bool:
    """Whether ``cxx`` is GCC (clang defines __GNUC__ too, and finds no .gch by #include)."""
    out = subprocess.run([cxx, "-dM", "-E", "-x", "c++", os.devnull], capture_output=True, text=True)
    return out.returncode == 0 and "__GNUC__" in out.stdout and "__clang__" not in out.stdout


def precompiled_header(check: str | None = None) -> Path | None:
    """The folder holding ``emulator.h`` and GCC's precompiled form of it for ``check``'s flags
    (built once and kept in the cache), or None where the compiler is not GCC. A kernel's unit
    includes the header from there, so that GCC loads the parsed header instead of parsing it, and
    the standard headers it includes, again for every kernel."""
    cxx = compiler()
    if not _is_gcc(cxx):
        return None
    flags = _flags(check)
    key = "pch-" + hashlib.sha256("\0".join([HEADER.read_text(), str(check), " ".join(flags),
                                             _compiler_identity(cxx)]).encode()).hexdigest()[:32]

    def make(work: Path) -> None:
        shutil.copy(HEADER, work / "emulator.h")
        _run([cxx, *flags, "-x", "c++-header", "emulator.h", "-o", "emulator.h.gch"], work, "emulator.h")
    return _cached_build(key, "emulator.h.gch", make).parent


def build_unit(source: str, expression: str, check: str | None = None, label: str = "<source>") -> Path:
    """Compile ``expression`` (a kernel instantiation in the kernel text ``source``) for
    ``check`` and return the built file (a shared library, or the subprocess runner for
    ``check="memory"``), from the cache when it is there. The cache key covers the header,
    the kernel text, the expression, the flags and the compiler."""
    if check not in CHECKS:
        raise ValueError(f"check must be one of {CHECKS}, got {check!r}")
    cxx = compiler()
    flags = _flags(check)
    key = hashlib.sha256("\0".join([HEADER.read_text(), source, expression, str(check), " ".join(flags),
                                    _compiler_identity(cxx)]).encode()).hexdigest()[:32]
    what = f"{expression} of {label}"

    def make(work: Path) -> None:
        (work / "kernel.cuh").write_text(source)
        (work / "unit.cpp").write_text(_unit(expression, check))
        header = precompiled_header(check)
        if header is None:
            shutil.copy(HEADER, work / "emulator.h")
        cmd = [cxx, *flags, *(["-I", str(header)] if header else [])]
        if check == "memory":
            _run([*cmd, "-rdynamic", "unit.cpp", "-o", "runner"], work, what)
        elif check == "race":  # instrument, but link no ThreadSanitizer runtime: emulator.h takes the calls
            _run([*cmd, "-c", "unit.cpp", "-o", "unit.o"], work, what)
            _run([cxx, "-shared", "unit.o", "-o", "kernel.so"], work, what)
        else:
            _run([*cmd, "-shared", "unit.cpp", "-o", "kernel.so"], work, what)
    return _cached_build(key, "runner" if check == "memory" else "kernel.so", make)


def precompile(items, check: str | None = None, workers: int | None = None) -> None:
    """Build several ``(filename, expression)`` pairs of this folder at once, by default a compiler
    per core this process may use (:func:`minitensor.threads.count`: its share where processes
    share the machine)."""
    items = list(items)
    with ThreadPoolExecutor(max_workers=workers or threads.count()) as pool:
        list(pool.map(lambda it: build_unit(sources.source(it[0]), it[1], check, it[0]), items))


_KERNEL_DATA = ("_ZZN12_GLOBAL__N_1", "_ZN12_GLOBAL__N_1")  # statics of the kernel text (anonymous namespace)


def _nm() -> str:
    nm = shutil.which("nm")
    if nm is None:
        raise EmulatorError("the CUDA emulator reads kernels' symbol tables with nm, which is missing: install binutils")
    return nm


def symbols(library: Path) -> tuple[list[tuple[str, int, int]], dict[str, int]]:
    """([(name, address, bytes)] of the kernel's static ``__shared__`` arrays, sorted by
    address; {exported function: address}) from a built library's symbol table. Every
    static object of the kernel text is a ``__shared__`` array: CUDA allows no other."""
    shared, exported = [], {}
    raw = subprocess.run([_nm(), "-S", "--defined-only", str(library)], capture_output=True, text=True).stdout
    nice = subprocess.run([_nm(), "-S", "-C", "--defined-only", str(library)], capture_output=True, text=True).stdout
    for line, pretty in zip(raw.splitlines(), nice.splitlines()):
        parts = line.split()
        if len(parts) == 4 and parts[2] in "bBdD" and parts[3].startswith(_KERNEL_DATA):
            shared.append((pretty.split(None, 3)[3].rsplit("::", 1)[-1], int(parts[0], 16), int(parts[1], 16)))
        elif len(parts) >= 3 and parts[-2] == "T" and parts[-1].startswith("mt_emu_"):
            exported[parts[-1]] = int(parts[0], 16)
    return sorted(shared, key=lambda s: s[1]), exported


# ------------------------------------------------------------------ arguments, as CuPy marshals them
def _marshal(arg):
    """(bytes or None, numpy dtype or None, array or None) for one kernel argument, following
    CuPy 14's ``cupy/cuda/function.pyx`` ``_pointer``: None is a null pointer; an array (NumPy
    here, CuPy there) is a pointer to its first element; a NumPy scalar is its bytes; a Python
    bool, int and float become bool, int64 (uint64 from 2**63) and float64."""
    if arg is None:
        return _NULL, _NULL_DTYPE, None
    if isinstance(arg, np.ndarray):
        return None, arg.dtype, arg
    if type(arg).__module__.startswith("cupy"):
        raise EmulatorError("the emulator runs kernels on NumPy arrays; got a cupy.ndarray")
    if isinstance(arg, np.generic):
        return arg.tobytes(), arg.dtype, None
    if type(arg) is bool:
        value = np.bool_(arg)
    elif type(arg) is float:
        value = np.float64(arg)
    elif type(arg) is int:
        value = np.uint64(arg) if arg >= 2**63 else np.int64(arg)
    elif type(arg) is complex:
        value = np.complex128(arg)
    else:
        raise TypeError(f"Unsupported type {type(arg)}")  # CuPy's own message
    return value.tobytes(), value.dtype, None


_NULL, _NULL_DTYPE = np.uint64(0).tobytes(), np.dtype(np.uint64)


def _describe(arg) -> str:
    """What a launch passed, for an error message (``_marshal`` takes ``arg`` as this says)."""
    if arg is None:
        return "None (a null pointer)"
    if isinstance(arg, np.ndarray):
        return f"a {arg.dtype.name} array of shape {arg.shape}"
    if isinstance(arg, np.generic):
        return f"numpy.{arg.dtype.name}"
    return f"a Python {type(arg).__name__} (passed as {_marshal(arg)[1].name})"


def _dtype_fits(dtype: np.dtype, kind: int) -> bool:
    """Whether values of ``dtype`` have the C++ kind ``kind`` (sizes are checked apart)."""
    if kind == 2:
        return dtype.kind == "f"
    if kind in (3, 4):
        return dtype.kind in "iu" or (dtype.kind == "b" and dtype.itemsize == 1)  # bool masks as unsigned char
    if kind == 5:
        return dtype.kind in "bu"
    if kind == 6:  # f16 / bf16 storage structs: 16-bit floats or their raw bits
        return dtype.kind in "fuV" or dtype.name == "bfloat16"
    return True


def _span(a: np.ndarray) -> tuple[int, int]:
    """[lo, hi) byte offsets, relative to a's data pointer, of the memory ``a`` covers."""
    if a.size == 0:
        return 0, 0
    lo = sum(min(0, (n - 1) * s) for n, s in zip(a.shape, a.strides))
    hi = sum(max(0, (n - 1) * s) for n, s in zip(a.shape, a.strides)) + a.itemsize
    return lo, hi


def _kernel_name(expression: str) -> str:
    return expression.split("<", 1)[0].strip()


class EmulatedKernel:
    """One kernel instantiation on the emulator, called as CuPy calls a ``RawKernel``:
    ``kernel(grid, block, args, shared_mem=0)``."""

    def __init__(self, source: str, expression: str, check: str | None = None, label: str = "<source>"):
        if check not in CHECKS:
            raise ValueError(f"check must be one of {CHECKS}, got {check!r}")
        self.source, self.expression, self.check, self.label = source, expression, check, label
        self.name = expression
        self.max_dynamic_shared_size_bytes = DYNAMIC_SHARED_DEFAULT
        self._lib = None
        self._runner = None
        self._params = None

    # -- what the compiler says about the instantiation
    def _load(self):
        if self._params is not None:
            return
        path = build_unit(self.source, self.expression, self.check, self.label)
        if self.check == "memory":
            self._runner = path
            info_path = build_unit(self.source, self.expression, None, self.label)  # the same unit, for its metadata
        else:
            info_path = path
        lib = ctypes.CDLL(str(info_path))
        lib.mt_emu_param_count.restype = ctypes.c_int
        lib.mt_emu_launch.restype = ctypes.c_int
        lib.mt_emu_launch.argtypes = [ctypes.POINTER(_Launch), ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p,
                                      ctypes.c_ulonglong]
        n = lib.mt_emu_param_count()
        infos = (_ParamInfo * max(n, 1))()
        lib.mt_emu_param_info(infos)
        shared, exported = symbols(info_path)
        base = ctypes.cast(lib.mt_emu_launch, ctypes.c_void_p).value - exported["mt_emu_launch"]  # where it loaded
        self._shared_names = [name for name, _, _ in shared]
        self._shared = (ctypes.c_ulonglong * max(2 * len(shared), 1))(
            *[v for _, addr, size in shared for v in (base + addr, size)])
        self.shared_size_bytes = sum(size for _, _, size in shared)
        self._lib = lib
        self._params = [infos[i] for i in range(n)]

    @property
    def param_infos(self):
        self._load()
        return self._params

    def _param_text(self, i: int) -> str:
        sig = signatures(self.source).get(_kernel_name(self.expression))
        p = self._params[i]
        if sig and i < len(sig):
            return f"argument {i} `{sig[i][1]}` ({sig[i][0]}, {p.size} bytes)"
        return f"argument {i} ({_KIND[p.kind]}, {p.size} bytes)"

    # -- checks before a launch
    def _arg_error(self, i: int, arg, message: str) -> EmulatorError:
        """``message`` with {where} (the parameter) and {what} (the argument) filled in: made only
        when a check fails, as a launch is often a small kernel's."""
        return EmulatorError(message.format(where=f"{self.name}: {self._param_text(i)}", what=_describe(arg)))

    def _check_args(self, args) -> list:
        params = self._params
        if len(args) != len(params):
            sig = signatures(self.source).get(_kernel_name(self.expression), [])
            names = ", ".join(n for _, n in sig)
            raise EmulatorError(f"{self.name} takes {len(params)} arguments ({names}); the launch passes {len(args)}")
        packed = []
        for i, (arg, p) in enumerate(zip(args, params)):
            data, dtype, array = _marshal(arg)
            size = 8 if array is not None else len(data)
            if p.kind == 1:  # a pointer parameter
                if array is None and not (dtype is not None and dtype.kind in "iu" and size == 8 and
                                          int.from_bytes(data, "little") == 0):
                    raise self._arg_error(i, arg, "{where} is a pointer, but the launch passes {what}")
                if array is not None and p.pointee_size and (array.itemsize != p.pointee_size
                                                            or not _dtype_fits(array.dtype, p.pointee_kind)):
                    raise self._arg_error(i, arg, f"{{where}} points to {p.pointee_size}-byte "
                                          f"{_KIND[p.pointee_kind]} values, but the launch passes {{what}}")
            else:
                if array is not None:
                    raise self._arg_error(i, arg, "{where} is a value, but the launch passes {what} (a pointer)")
                if size != p.size:
                    raise self._arg_error(i, arg, f"{{where}}: the launch passes {{what}}, {size} bytes; "
                                          f"cuLaunchKernel would read {p.size} bytes from it")
                if not _dtype_fits(dtype, p.kind):
                    raise self._arg_error(i, arg, f"{{where}} is a {_KIND[p.kind]} value, "
                                          "but the launch passes {what}")
            packed.append((data, array))
        return packed

    def _check_launch(self, grid, block, shared_mem) -> tuple:
        if not isinstance(grid, tuple) or not isinstance(block, tuple):
            raise TypeError(f"{self.name}: grid and block must be tuples (CuPy's Function.__call__ takes "
                            f"`tuple grid, tuple block`), got {type(grid).__name__} and {type(block).__name__}")
        # as CuPy: pad to three dimensions, and a 0 becomes 1
        grid = tuple(max(1, int(g)) for g in (grid + (1, 1))[:3])
        block = tuple(max(1, int(b)) for b in (block + (1, 1))[:3])
        threads = block[0] * block[1] * block[2]
        if threads > MAX_THREADS_PER_BLOCK:
            raise EmulatorError(f"{self.name}: {threads} threads per block {block}; an H100 allows at most "
                                f"{MAX_THREADS_PER_BLOCK}")
        for axis, (b, lim) in enumerate(zip(block, MAX_BLOCK)):
            if b > lim:
                raise EmulatorError(f"{self.name}: block dimension {'xyz'[axis]} is {b}; the limit is {lim}")
        for axis, (g, lim) in enumerate(zip(grid, MAX_GRID)):
            if g > lim:
                raise EmulatorError(f"{self.name}: grid dimension {'xyz'[axis]} is {g}; the limit is {lim}")
        if shared_mem < 0:
            raise OverflowError(f"{self.name}: shared_mem is negative ({shared_mem})")
        static = self.shared_size_bytes
        if static > STATIC_SHARED_LIMIT:
            raise EmulatorError(f"{self.name} declares {static} bytes of static shared memory; a kernel may declare "
                                f"at most {STATIC_SHARED_LIMIT} (48 KiB)")
        if shared_mem > self.max_dynamic_shared_size_bytes:
            raise EmulatorError(f"{self.name}: {shared_mem} bytes of dynamic shared memory, more than the "
                                f"{self.max_dynamic_shared_size_bytes} allowed; above 48 KiB a kernel must opt in by "
                                "setting kernel.max_dynamic_shared_size_bytes")
        if static + shared_mem > SHARED_OPT_IN_LIMIT:
            raise EmulatorError(f"{self.name}: {static} + {shared_mem} bytes of shared memory per block; an H100 "
                                f"has at most {SHARED_OPT_IN_LIMIT} (227 KiB)")
        return grid, block

    # -- the launch
    def __call__(self, grid, block, args, shared_mem=0, stream=None, enable_cooperative_groups=False):
        self._load()
        grid, block = self._check_launch(grid, block, int(shared_mem))
        packed = self._check_args(tuple(args))
        launches[self.expression] = launches.get(self.expression, 0) + 1
        if self.check == "memory":
            self._run_subprocess(grid, block, int(shared_mem), packed)
            return
        keep = []                          # the argument bytes must outlive the call
        pointers = (ctypes.c_void_p * max(len(packed), 1))()
        for i, (data, array) in enumerate(packed):
            if array is not None:
                data = np.uint64(array.__array_interface__["data"][0]).tobytes()
            buf = ctypes.create_string_buffer(data, len(data))
            keep.append(buf)
            pointers[i] = ctypes.cast(buf, ctypes.c_void_p)
        err = ctypes.create_string_buffer(_ERRLEN)
        with _launch_lock:
            cfg = _Launch((ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*block), int(shared_mem),
                          1 if self.check == "race" else 0, _block_order == "reverse", len(self._shared_names),
                          self._shared, _fiber_pool(self._lib) or None)
            rc = self._lib.mt_emu_launch(ctypes.byref(cfg), pointers, err, _ERRLEN)
        if rc != 0:
            raise EmulatorError(self._explain(err.value.decode(errors="replace")))

    def _explain(self, message: str) -> str:
        """Name the static shared array a race report points at."""
        return re.sub(r"static shared array (\d+)",
                      lambda m: f"`{self._shared_names[int(m.group(1))]}` (static shared memory)", message)

    def _run_subprocess(self, grid, block, shared_mem, packed):
        """check="memory": the launch in a subprocess built with AddressSanitizer."""
        # the memory the pointer arguments span, merged where they overlap: one malloc each
        spans = []
        for i, (_, array) in enumerate(packed):
            if array is not None:
                base = array.__array_interface__["data"][0]
                lo, hi = _span(array)
                spans.append([base + lo, base + hi, [i]])
        spans.sort()
        regions = []
        for s in spans:
            if regions and s[0] < regions[-1][1]:
                regions[-1][1] = max(regions[-1][1], s[1])
                regions[-1][2] += s[2]
            else:
                regions.append(s)
        region_of = {i: r for r, reg in enumerate(regions) for i in reg[2]}
        request = bytearray(b"MTEMU02\0")
        request += np.array(grid, np.uint32).tobytes() + np.array(block, np.uint32).tobytes()
        request += np.uint64(shared_mem).tobytes() + np.int32(_block_order == "reverse").tobytes()
        request += np.uint32(len(regions)).tobytes()
        for lo, hi, _ in regions:
            request += np.uint64(hi - lo).tobytes() + ctypes.string_at(lo, hi - lo)
        request += np.uint32(len(packed)).tobytes()
        for i, (data, array) in enumerate(packed):
            if array is None:
                request += b"\0" + np.uint32(len(data)).tobytes() + data
            else:
                r = region_of[i]
                offset = array.__array_interface__["data"][0] - regions[r][0]
                request += b"\1" + np.uint32(r).tobytes() + np.uint64(offset).tobytes()
        with tempfile.TemporaryDirectory(prefix="mt-emu-") as tmp:
            req, resp = Path(tmp) / "request", Path(tmp) / "response"
            req.write_bytes(bytes(request))
            env = dict(os.environ, ASAN_OPTIONS=f"detect_leaks=0:exitcode={_ASAN_EXIT}:halt_on_error=1:"
                                                "allocator_may_return_null=1:print_legend=0")
            out = subprocess.run([str(self._runner), str(req), str(resp)], capture_output=True, text=True, env=env)
            if out.returncode == 0:
                data = resp.read_bytes()
                pos = 0
                for lo, hi, members in regions:
                    if any(packed[i][1].flags.writeable for i in members):
                        ctypes.memmove(lo, data[pos:pos + hi - lo], hi - lo)
                    pos += hi - lo
                return
        raise EmulatorError(self._explain_subprocess(out, regions, packed))

    def _explain_subprocess(self, out, regions, packed) -> str:
        err = out.stderr
        m = re.search(r"MT_EMU_ERROR: (.*)", err, re.S)
        if m:
            return m.group(1).strip()
        f = re.search(r"MT_EMU_FAULT kernel=(.*?)(?: block=(\S+) thread=(\S+))? access=(\w+) size=(\d+)"
                      r"(?: region=(\d+) offset=(-?\d+))?\n", err)
        if not f:
            return f"{self.name} crashed in the memory-check subprocess (exit code {out.returncode}):\n{err[-4000:]}"
        kernel, blk, thr, access, size, region, offset = f.groups()
        msg = f"out-of-bounds {access} of {size} bytes in {kernel}"
        if blk:
            msg += f", block ({blk.replace(',', ', ')}), thread ({thr.replace(',', ', ')})"
        if region is not None:
            lo, hi, members = regions[int(region)]
            off = int(offset)
            for i in members:
                array = packed[i][1]
                base = array.__array_interface__["data"][0] - lo
                a_lo, a_hi = _span(array)
                rel = off - base
                if a_lo - 4096 <= rel < a_hi + 4096:
                    side = (f"{rel - a_hi} bytes past its end" if rel >= a_hi else
                            f"{a_lo - rel} bytes before its start" if rel < a_lo else "inside it")
                    msg += (f": byte {rel} of {self._param_text(i)}, a {array.dtype.name} array of shape "
                            f"{array.shape} spanning {a_hi - a_lo} bytes ({side})")
                    break
        else:
            desc = re.search(r"is located .*", err)
            if desc:
                msg += ": the address " + desc.group(0).strip()
                if "global variable" in desc.group(0):
                    msg += " (on the emulator a __shared__ array is such a variable)"
        summary = re.search(r"SUMMARY: AddressSanitizer: .*", err)
        if summary:
            msg += f"\n{summary.group(0)}"
        return msg


@contextmanager
def block_order(order: str):
    """Within the ``with``, every launch starts its blocks in ``order``: ``"index"`` (``blockIdx``
    order, x fastest: the default) or ``"reverse"`` (from the last block back). A GPU may start a
    launch's blocks in any order; a kernel whose blocks wait for one another must neither hang nor
    change its result, and running it both ways here shows it. The setting is the process's (the
    emulator runs one launch at a time), so launches from other threads take it too."""
    global _block_order
    if order not in BLOCK_ORDERS:
        raise ValueError(f"order must be one of {BLOCK_ORDERS}, got {order!r}")
    before, _block_order = _block_order, order
    try:
        yield
    finally:
        _block_order = before


_launch_lock = threading.Lock()   # the runtime of one library is one block at a time
launches: dict[str, int] = {}      # how many times each instantiation was launched (for tests and lessons)


@lru_cache(maxsize=None)
def kernel(filename: str, expression: str, check: str | None = None) -> EmulatedKernel:
    """The emulated kernel ``expression`` of this folder's source ``filename`` (compiled on
    the first launch)."""
    return EmulatedKernel(sources.source(filename), expression, check, filename)


def compile_source(source: str, expression: str, check: str | None = None) -> EmulatedKernel:
    """An emulated kernel from CUDA text of your own (``#include "common.cuh"`` works), e.g.
    ``compile_source(text, "my_kernel<float>")``: for experiments, lessons and tests."""
    return EmulatedKernel(sources.with_common(source), expression, check)


@lru_cache(maxsize=None)
def available() -> tuple[bool, str]:
    """(True, "") when the emulator can run here, else (False, why)."""
    try:
        cxx = compiler()
    except EmulatorError as e:
        return False, str(e)
    if os.name != "posix":
        return False, "the CUDA emulator needs a POSIX system (ucontext fibers)"
    if shutil.which("nm") is None:
        return False, "the CUDA emulator reads symbol tables with nm: install binutils"
    return True, cxx
