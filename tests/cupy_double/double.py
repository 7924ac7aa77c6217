"""The CuPy double's implementation: see ``__init__.py`` for what it is and is not.

Every array is a NumPy array inside a ``cupy.ndarray`` that is not a NumPy subclass. Module
attributes are served from ``spec.json``: what CuPy 14.2 has exists, nothing else does.
"""
from __future__ import annotations

import collections
import ctypes
import functools
import itertools
import json
import math
import sys
import time
import types
import weakref
from pathlib import Path

import numpy as np

SPEC = json.loads((Path(__file__).resolve().parent / "spec.json").read_text())
_state = {"devices": 1, "current": 0, "installed": False, "sync_allowed": True}


class UnmodelledError(NotImplementedError):
    pass


# ---------------------------------------------------------------- kernel launches, counted
_LAUNCHES: collections.Counter = collections.Counter()


def _launch(what: str) -> None:
    """Count one call that runs work on the device: a kernel (ufunc, reduction, copy, fill,
    gather, RawKernel, ElementwiseKernel, random draw), a cuBLAS product, a host-to-device
    copy or a collective. Views (reshape without a copy, transpose, basic slicing) launch
    nothing. On a GPU each such call costs host time (a few microseconds of Python and driver
    work) whatever its size: the count is the CPU's proxy for that time. While a stream is
    being captured into a graph, the call is recorded instead (see ``_captured``), and a copy
    between host and device, a random draw, or work on another stream is refused."""
    if _CAPTURE["replaying"]:
        return                                   # a graph's launch was counted once
    if _CAPTURE["records"] is not None:
        _capture_allows(what)
        _CAPTURE["launched"] = True
        return
    _LAUNCHES[what] += 1


def launches() -> collections.Counter:
    """How many calls of each kind have launched device work since the double was imported
    (a copy: subtract two of them to count a stretch of code)."""
    return collections.Counter(_LAUNCHES)


_CAPTURE = {"stream": None, "records": None, "launched": False, "snapshot": None, "replaying": False,
            "allocations": None, "depth": 0}


def _refuse_while_capturing(what: str) -> None:
    if _CAPTURE["records"] is not None:
        raise RuntimeError(f"cudaErrorStreamCaptureUnsupported: {what} is not permitted when stream is capturing")


def _capture_allows(what: str) -> None:
    if what in ("device to host", "host to device"):
        raise RuntimeError(f"the current stream is capturing, so {'D2H' if what == 'device to host' else 'H2D'} "
                           f"transfers are disallowed")
    if what == "random":
        raise UnmodelledError("the CuPy double does not model cuRAND inside a captured graph")
    if _current_stream() is not _CAPTURE["stream"]:
        raise RuntimeError("cudaErrorStreamCaptureImplicit: work on another stream while a stream is capturing")


def _in_capture() -> bool:
    """Whether a call that writes only in place (a kernel, a product, a collective) is being
    captured: its arguments are checked and it is recorded, but it runs only at the graph's
    launch, as on a GPU (what it reads may not be written yet: memory a capture reads from the
    host is filled before each launch)."""
    return _CAPTURE["records"] is not None


def _captured(fn):
    """A call of the double that may launch device work: recorded while a stream is captured."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        if _CAPTURE["records"] is None or _CAPTURE["depth"]:
            return fn(*args, **kwargs)
        _CAPTURE["depth"], _CAPTURE["launched"] = 1, False
        try:
            with np.errstate(all="ignore"):   # what it computes now is thrown away (end_capture)
                result = fn(*args, **kwargs)
        finally:
            _CAPTURE["depth"] = 0
        if _CAPTURE["launched"]:
            _CAPTURE["records"].append((fn, args, kwargs, result))
        return result
    return call


def _bfloat16():
    try:
        import ml_dtypes  # noqa: PLC0415
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


def _loop_dtype(char: str) -> np.dtype:
    """A loop-table character as a dtype: CuPy 14 writes bfloat16 as 'E'."""
    return _bfloat16() if char == "E" else np.dtype(char)


# ---------------------------------------------------------------- the array
def _unsupported(value):
    # cupy/_core/_scalar.pyx, CScalar.__init__: anything that is neither a Python scalar nor
    # a NumPy scalar (numpy.generic) is refused, 0-d NumPy arrays and lists included
    return TypeError(f"Unsupported type {type(value)}")


def _is_scalar(value) -> bool:
    return isinstance(value, (bool, int, float, complex, np.generic))


class ndarray:  # noqa: N801  (CuPy's name)
    """cupy.ndarray over a NumPy array: the array is ``_a``; the double never lets it out
    without an explicit ``get()``."""

    __slots__ = ("_a", "__weakref__")
    __module__ = "cupy"
    __array_priority__ = 100

    def __init__(self, shape, dtype=float, memptr=None, strides=None, order="C"):
        if memptr is not None or strides is not None:
            raise UnmodelledError("the CuPy double does not model ndarray(memptr=, strides=)")
        self._a = _allocate(np.empty(shape, dtype=dtype, order=order))

    @classmethod
    def _wrap(cls, a: np.ndarray) -> ndarray:
        out = cls.__new__(cls)
        out._a = a
        return out

    # cupy/_core/core.pyx, __array__: "Implicit conversion to a NumPy array is not allowed"
    def __array__(self, dtype=None, copy=None):
        raise TypeError("Implicit conversion to a NumPy array is not allowed. "
                        "Please use `.get()` to construct a NumPy array explicitly.")

    # cupy/_core/core.pyx, __array_ufunc__: NumPy ufuncs on a cupy.ndarray run CuPy's
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        mine = _module("cupy").__dict__.get(ufunc.__name__) or getattr(_module("cupy"), ufunc.__name__, None)
        if not isinstance(mine, Ufunc):
            return NotImplemented
        if "out" in kwargs:  # NumPy passes out= as a tuple; CuPy unfolds it
            out = kwargs["out"]
            if len(out) != 1:
                raise ValueError("The 'out' parameter must have exactly one array value")
            kwargs["out"] = out[0]
        if method == "__call__":
            return mine(*inputs, **kwargs)
        if method == "at":
            return mine.at(*inputs, **kwargs)
        if method == "reduce":
            return mine.reduce(*inputs, **kwargs)
        return NotImplemented

    # cupy/_core/core.pyx, __array_function__: NumPy functions run CuPy's where it has one
    def __array_function__(self, func, types_, args, kwargs):
        name = func.__name__
        if name in SPEC["modules"]["cupy"]:
            return getattr(_module("cupy"), name)(*args, **kwargs)
        return NotImplemented

    # -- attributes
    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    itemsize = property(lambda self: self._a.itemsize)
    nbytes = property(lambda self: self._a.nbytes)
    strides = property(lambda self: self._a.strides)
    flags = property(lambda self: self._a.flags)
    T = property(lambda self: ndarray._wrap(self._a.T))
    mT = property(lambda self: ndarray._wrap(np.swapaxes(self._a, -1, -2)))
    real = property(lambda self: ndarray._wrap(self._a.real))
    imag = property(lambda self: ndarray._wrap(self._a.imag))
    base = property(lambda self: None if self._a.base is None else ndarray._wrap(self._a.base))
    data = property(lambda self: MemoryPointer(self._a))
    device = property(lambda self: Device(_state["current"]))

    def get(self, stream=None, order="C", out=None, blocking=True):
        _host_read()
        _launch("device to host")
        if out is not None:
            out[...] = self._a
            return out
        return np.array(self._a, order=order)

    def set(self, arr, stream=None):
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"Only numpy.ndarray can be set to cupy.ndarray: got {type(arr)}")
        if arr.shape != self.shape or arr.dtype != self.dtype:
            raise ValueError("Shape or dtype mismatch")
        _launch("host to device")
        self._a[...] = arr

    def item(self, *args):
        _host_read()
        return self._a.item(*args)

    def tolist(self):
        _host_read()
        return self._a.tolist()

    def __float__(self):
        _host_read()
        return float(self._a)

    def __int__(self):
        _host_read()
        return int(self._a)

    def __index__(self):
        _host_read()
        return self._a.__index__()

    def __bool__(self):
        _host_read()
        return bool(self._a)

    def __complex__(self):
        _host_read()
        return complex(self._a)

    def __len__(self):
        return len(self._a)

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(len(self)))

    def __repr__(self):
        return repr(self._a).replace("array(", "array(", 1)

    def __str__(self):
        return str(self._a)

    def __format__(self, spec):
        return format(self._a.item() if self.ndim == 0 else self._a, spec)

    def __hash__(self):
        raise TypeError("unhashable type: 'cupy.ndarray'")

    @_captured
    def __getitem__(self, key):
        result = self._a[_index(key)]
        if isinstance(result, np.ndarray) and not np.may_share_memory(result, self._a):
            _launch("take")                      # advanced indexing gathers; basic slicing is a view
        return _wrap(result)

    @_captured
    def __setitem__(self, key, value):
        _launch("setitem")
        self._a[_index(key)] = _value(value)

    @_captured
    def fill(self, value):
        _launch("fill")
        self._a.fill(_value(value))

    @_captured
    def astype(self, dtype, order="K", casting=None, subok=None, copy=True):
        result = self._a.astype(dtype, order=order, copy=copy)
        if result is not self._a:
            _launch("astype")
        return _wrap(result)

    @_captured
    def copy(self, order="C"):
        _launch("copy")
        return _wrap(_allocate(self._a.copy(order=order)))

    def view(self, dtype=None):
        return _wrap(self._a.view() if dtype is None else self._a.view(dtype))

    def __copy__(self):
        return self.copy()

    def __deepcopy__(self, memo):
        return self.copy()

    def __reduce__(self):
        return (_from_numpy, (self._a.copy(),))

    def __dlpack__(self, *a, **k):
        raise UnmodelledError("the CuPy double does not model DLPack")


class DeviceSynchronized(RuntimeError):
    """cupy/_core/syncdetect.py: raised where ``allow_synchronize(False)`` forbids a wait."""


def _host_read():
    # cupy/_core/core.pyx (get, via syncdetect._declare_synchronize): a copy to the host waits for the
    # device, which cupyx.allow_synchronize(False) forbids with DeviceSynchronized
    _refuse_while_capturing("a read of a device value on the host")
    if not _state["sync_allowed"]:
        raise DeviceSynchronized("Device synchronization was detected while disallowed.")


class allow_synchronize:  # noqa: N801  (CuPy's name)
    def __init__(self, allow: bool):
        self.allow = bool(allow)

    def __enter__(self):
        self._before = _state["sync_allowed"]
        _state["sync_allowed"] = self.allow

    def __exit__(self, *exc):
        _state["sync_allowed"] = self._before


def _from_numpy(a):
    return ndarray._wrap(_allocate(np.array(a)))


def _index(key):
    """Indices may be CuPy arrays, lists, slices, ints (cupy/_core/_routines_indexing.pyx
    converts lists and NumPy arrays used as indices)."""
    if isinstance(key, tuple):
        return tuple(_index(k) for k in key)
    return key._a if isinstance(key, ndarray) else key


def _value(value):
    """A value to store: a CuPy array or a scalar; a NumPy array of more than 0 dimensions or a
    list is refused as ``fill`` refuses it (cupy/_core/_scalar.pyx, CScalar)."""
    if isinstance(value, ndarray):
        return value._a
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value.item()
    if _is_scalar(value):
        return value
    raise _unsupported(value)


def _wrap(result):
    """NumPy results as CuPy ones: arrays wrapped, NumPy scalars as 0-d arrays (CuPy's
    reductions return 0-d arrays), tuples and lists element by element."""
    if isinstance(result, np.ndarray):
        return ndarray._wrap(_allocate(result) if result.base is None else result)
    if isinstance(result, np.generic):
        return ndarray._wrap(_allocate(np.asarray(result)))
    if isinstance(result, (tuple, list)):
        return type(result)(_wrap(r) for r in result)
    return result


def _unwrap(value, *, numpy_ok=False):
    """Arguments to NumPy: CuPy arrays unwrapped; NumPy arrays refused unless ``numpy_ok``."""
    if isinstance(value, ndarray):
        return value._a
    if isinstance(value, np.ndarray):
        if numpy_ok:
            return value
        raise _unsupported(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_unwrap(v, numpy_ok=numpy_ok) for v in value)
    return value


# ---------------------------------------------------------------- methods from the spec
def _method(name):
    keywords = SPEC["ndarray_keywords"].get(name)

    @_captured
    def method(self, *args, **kwargs):
        # cupy/_core/core.pyx: a method takes only the keywords its signature names
        # (``max(initial=0)``, which NumPy takes, raises there)
        for k in kwargs if keywords is not None else ():
            if k not in keywords:
                raise TypeError(f"{name}() got an unexpected keyword argument '{k}'")
        args = tuple(_unwrap(a) for a in args)
        kwargs = {k: (v._a if isinstance(v, ndarray) else _unwrap(v)) for k, v in kwargs.items()}
        out = kwargs.get("out")
        result = getattr(self._a, name)(*args, **kwargs)
        if out is not None or isinstance(result, np.generic) or (
                isinstance(result, np.ndarray) and not np.may_share_memory(result, self._a)):
            _launch(name)                        # a reduction or a copy; a view launches nothing
        return result if out is not None and result is out else _wrap(result)
    method.__name__ = name
    return method


_OPERATORS = {"add": "add", "sub": "subtract", "mul": "multiply", "truediv": "true_divide",
              "floordiv": "floor_divide", "mod": "remainder", "pow": "power", "and": "bitwise_and",
              "or": "bitwise_or", "xor": "bitwise_xor", "lshift": "left_shift", "rshift": "right_shift",
              "matmul": "matmul"}
_COMPARISONS = {"lt": "less", "le": "less_equal", "eq": "equal", "ne": "not_equal", "gt": "greater",
                "ge": "greater_equal"}
_UNARY = {"neg": "negative", "pos": "positive", "abs": "absolute", "invert": "invert"}


def _binary(ufunc_name, reflected=False, inplace=False):
    def op(self, other):
        f = getattr(_module("cupy"), ufunc_name)
        if isinstance(other, np.ndarray) and not isinstance(other, ndarray):
            raise _unsupported(other)
        if reflected:
            return f(other, self)
        return f(self, other, out=self) if inplace else f(self, other)
    return op


def _comparison(ufunc_name):
    def op(self, other):
        # cupy/_core/core.pyx, __richcmp__: a 0-d NumPy array is compared as its scalar
        if isinstance(other, np.ndarray) and other.ndim == 0:
            other = other.item()
        if ufunc_name in ("equal", "not_equal") and (other is None or type(other).__eq__ is object.__eq__):
            return zeros(self.shape, bool) if ufunc_name == "equal" else ones(self.shape, bool)
        return getattr(_module("cupy"), ufunc_name)(self, other)
    return op


for _op, _uf in _OPERATORS.items():
    setattr(ndarray, f"__{_op}__", _binary(_uf))
    setattr(ndarray, f"__r{_op}__", _binary(_uf, reflected=True))
    setattr(ndarray, f"__i{_op}__", _binary(_uf, inplace=True))
for _op, _uf in _COMPARISONS.items():
    setattr(ndarray, f"__{_op}__", _comparison(_uf))
for _op, _uf in _UNARY.items():
    setattr(ndarray, f"__{_op}__", (lambda uf: lambda self: getattr(_module("cupy"), uf)(self))(_uf))

_DEFINED = set(ndarray.__dict__)
for _name in SPEC["ndarray"]:
    if _name.startswith("__") or _name in _DEFINED:
        continue
    if hasattr(np.ndarray, _name):
        setattr(ndarray, _name, _method(_name))


# ---------------------------------------------------------------- ufuncs and the loop search
class Ufunc:
    """A CuPy ufunc: inputs must be CuPy arrays or scalars; the loop is the first of CuPy's
    table (``.types``) that every input can be cast to (cupy/_core/_kernel.pyx,
    ``_guess_routine``: arrays by ``numpy.can_cast(..., 'safe')``, Python scalars by kind)."""

    def __init__(self, name: str, entry: dict):
        self.__name__ = self.name = name
        self.nin, self.nout, self.types = entry["nin"], entry["nout"], entry["types"]
        self._np = getattr(np, name)

    def __repr__(self):
        return f"<ufunc 'cupy_{self.name}'>"

    def _loop(self, inputs):
        for loop in self.types:
            ins, outs = loop.split("->")
            if all(_fits(x, c) for x, c in zip(inputs, ins)):
                return [_loop_dtype(c) for c in ins], [_loop_dtype(c) for c in outs]
        got = tuple(x.dtype if isinstance(x, ndarray) else type(x) for x in inputs)
        raise TypeError(f"Wrong type ({got}) of arguments for cupy_{self.name}")

    @_captured
    def __call__(self, *args, out=None, dtype=None, casting=None, **kwargs):
        if len(args) != self.nin:
            raise TypeError(f"Wrong number of arguments for cupy_{self.name}")
        for a in args:
            if not isinstance(a, ndarray) and not _is_scalar(a):
                raise _unsupported(a)
        if out is not None and not isinstance(out, ndarray):
            raise TypeError("Output arguments must be cupy arrays.")
        if kwargs:
            raise UnmodelledError(f"the CuPy double does not model cupy.{self.name}({', '.join(kwargs)}=)")
        _launch(self.name)
        if dtype is not None:
            ins = [np.dtype(dtype)] * self.nin
            outs = [np.dtype(dtype)] * self.nout
        else:
            ins, outs = self._loop(args)
        values = [a._a.astype(t, copy=False) if isinstance(a, ndarray) else np.asarray(a, dtype=t)
                  for a, t in zip(args, ins)]
        with np.errstate(all="ignore"):
            result = self._np(*values)
        result = result.astype(outs[0], copy=False) if isinstance(result, np.ndarray) else np.asarray(result, outs[0])
        if out is not None:
            # cupy/_core/_dtype.pyx, _raise_if_invalid_cast: an output of another kind than the
            # loop's is refused unless NumPy can cast to it 'same_kind' (float32 into bfloat16 can)
            if result.dtype.kind != out.dtype.kind and not np.can_cast(result.dtype, out.dtype, casting or "same_kind"):
                raise TypeError(f"Cannot cast ufunc '{self.name}' output from {result.dtype} to {out.dtype} "
                                f"with casting rule '{casting or 'same_kind'}'")
            out._a[...] = result
            return out
        return _wrap(result)

    @_captured
    def at(self, a, indices, b=None):
        if not isinstance(a, ndarray):
            raise _unsupported(a)
        if isinstance(b, np.ndarray) or isinstance(indices, np.ndarray):
            raise _unsupported(b if isinstance(b, np.ndarray) else indices)
        _launch(f"{self.name}.at")
        args = (_index(indices),) + (() if b is None else (_value(b) if not isinstance(b, ndarray) else b._a,))
        self._np.at(a._a, *args)

    @_captured
    def reduce(self, a, axis=0, dtype=None, out=None, keepdims=False):
        if not isinstance(a, ndarray):
            raise _unsupported(a)
        _launch(f"{self.name}.reduce")
        return _wrap(self._np.reduce(a._a, axis=axis, dtype=dtype, keepdims=keepdims))


def _fits(x, char: str) -> bool:
    t = _loop_dtype(char)
    if t is None:
        return False
    if isinstance(x, ndarray):
        return bool(np.can_cast(x.dtype, t, "safe"))
    if isinstance(x, np.generic):
        return bool(np.can_cast(x.dtype, t, "safe"))
    if isinstance(x, bool):
        return True
    if isinstance(x, int):
        return t.kind in "iufc" or (t == _bfloat16())
    if isinstance(x, float):
        return t.kind in "fc" or (t == _bfloat16())
    return t.kind == "c"


# ---------------------------------------------------------------- functions
NUMPY_IN = {"array", "asarray", "asanyarray", "ascontiguousarray", "asfortranarray"}
ALLOCATE_ONLY = {"empty", "empty_like"}  # memory from the pool, no kernel


def _function(name: str):
    """A module-level function CuPy has, run by NumPy's function of the same name: CuPy
    arrays in, CuPy arrays out; NumPy arrays only where CuPy converts them (``asarray`` and
    friends)."""
    target = getattr(np, name)

    @_captured
    def function(*args, **kwargs):
        numpy_ok = name in NUMPY_IN
        raw = args
        if name == "ascontiguousarray" and args and isinstance(args[0], ndarray):
            a, dtype = args[0], (args[1:] or [kwargs.get("dtype")])[0]
            # cupy/_core/core.pyx, ascontiguousarray: a C-contiguous array of that dtype is
            # returned itself (a 0-d one raveled to shape (1,)); anything else is copied
            if (dtype is None or np.dtype(dtype) == a.dtype) and a.flags.c_contiguous:
                return a if a.ndim else _wrap(a._a.reshape(1))
        args = tuple(_unwrap(a, numpy_ok=numpy_ok) for a in args)
        kwargs = {k: _unwrap(v, numpy_ok=numpy_ok) for k, v in kwargs.items()}
        if numpy_ok:
            first = args[0]
            if isinstance(first, np.ndarray) and first.dtype == object:
                raise ValueError("Unsupported dtype object")
            _launch(name if any(isinstance(a, ndarray) for a in raw) else "host to device")
            return _wrap(_allocate(np.array(target(*args, **kwargs))))
        result = target(*args, **kwargs)
        ins = [a for a in (*args, *kwargs.values()) if isinstance(a, np.ndarray)]
        outs = result if isinstance(result, (tuple, list)) else (result,)
        if name not in ALLOCATE_ONLY and not all(isinstance(r, np.ndarray) and any(np.may_share_memory(r, a) for a in ins)
                                                  for r in outs):
            _launch(name)                        # it made or wrote an array; a view launches nothing
        return _wrap(result)
    function.__name__ = name
    return function


def asnumpy(a, stream=None, order="C", out=None, *, blocking=True):
    if isinstance(a, ndarray):
        return a.get(order=order, out=out)
    return np.asarray(a, order=order)


def get_array_module(*args):
    return _module("cupy") if any(isinstance(a, ndarray) for a in args) else np


@_captured
def matmul(a, b, out=None, **kwargs):
    for x in (a, b):
        if not isinstance(x, ndarray):
            raise _unsupported(x)
    bf16 = _bfloat16()
    # cupy/_core/_routines_linalg.pyx, matmul: a batched product whose dtype is not one of
    # 'efdFD' goes to the integer GEMM, whose code has no bfloat16: "data type 'E' not understood"
    if max(a.ndim, b.ndim) > 2 and bf16 is not None and bf16 in (a.dtype, b.dtype):
        raise TypeError("data type 'E' not understood")
    dtype = np.result_type(a.dtype, b.dtype)
    _launch("matmul")
    if max(a.ndim, b.ndim) > 2:
        # _routines_linalg.pyx, matmul: ascontiguousarray(a, dtype) for each batched operand, with
        # float16 widened to float32 and the result rounded back: a copy each
        work = np.dtype(np.float32) if dtype == np.float16 else dtype
        for x in (a, b):
            if not x.flags.c_contiguous or x.dtype != work:
                _launch("matmul operand copy")
        if work != dtype:
            _launch("matmul result cast")
    else:
        # dot, _mat_to_cublas_contiguous: a matrix contiguous neither by rows nor by columns is copied
        for x in (a, b):
            if x.ndim == 2 and not (x.flags.c_contiguous or x.flags.f_contiguous):
                _launch("matmul operand copy")
    if dtype in (np.float16, bf16):
        # cupy/_core/_routines_linalg.pyx, tensordot_core_v11: a 16-bit product is computed in
        # float32 (CUBLAS_COMPUTE_32F) and rounded once to the output type (and NumPy's own
        # 16-bit product, which has no BLAS, is several times slower)
        result = np.matmul(a._a.astype(np.float32), b._a.astype(np.float32)).astype(dtype)
    else:
        result = np.matmul(a._a, b._a).astype(dtype, copy=False)
    if out is not None:
        out._a[...] = result
        return out
    return _wrap(result)


@_captured
def zeros(shape, dtype=float, order="C"):
    _launch("zeros")
    return _wrap(_allocate(np.zeros(shape, dtype, order)))


@_captured
def ones(shape, dtype=float, order="C"):
    _launch("ones")
    return _wrap(_allocate(np.ones(shape, dtype, order)))


# ---------------------------------------------------------------- memory
_POOL = {"used": 0, "held": 0, "hooks": []}


def _rounded(nbytes: int) -> int:
    # cupy/cuda/memory.pyx: the pool hands out multiples of 512 bytes
    return -(-nbytes // 512) * 512


def _allocate(a: np.ndarray) -> np.ndarray:
    """Count ``a``'s bytes as pool memory until it is collected, telling the memory hooks."""
    size = _rounded(a.nbytes)
    if size == 0 or a.base is not None:
        return a
    _POOL["used"] += size
    _POOL["held"] = max(_POOL["held"], _POOL["used"])
    for hook in list(_POOL["hooks"]):
        hook.malloc_postprocess(device_id=_state["current"], size=a.nbytes, mem_size=size,
                                mem_ptr=a.__array_interface__["data"][0], pmem_id=id(a))
    weakref.finalize(a, _free, size, a.__array_interface__["data"][0])
    _LIVE[a.__array_interface__["data"][0]] = a
    if _CAPTURE["records"] is not None:
        _CAPTURE["allocations"].append(a)   # the graph's own memory from now on (see Graph)
    return a


_LIVE: weakref.WeakValueDictionary = weakref.WeakValueDictionary()   # address -> every live allocation


def _free(size, ptr):
    _POOL["used"] -= size
    for hook in list(_POOL["hooks"]):
        hook.free_postprocess(device_id=_state["current"], mem_size=size, mem_ptr=ptr, pmem_id=0)


class MemoryPool:
    def used_bytes(self):
        return _POOL["used"]

    def total_bytes(self):
        return _POOL["held"]

    def free_bytes(self):
        return _POOL["held"] - _POOL["used"]

    def free_all_blocks(self, stream=None):
        _POOL["held"] = _POOL["used"]

    def set_limit(self, size=None, fraction=None):
        pass

    def malloc(self, size):
        raise UnmodelledError("the CuPy double's arrays are NumPy's: its pools hand out no memory of their own")


_DEFAULT_POOL = MemoryPool()


class _UsingAllocator:
    """cupy/cuda/memory.pyx, using_allocator: the double's memory is NumPy's whatever the
    allocator (an array lives while referenced, so none is handed out twice)."""

    def __init__(self, allocator):
        self.allocator = allocator

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


def get_default_memory_pool():
    return _DEFAULT_POOL


class MemoryHook:
    """cupy/cuda/memory_hook.py: a context manager that receives malloc and free events."""
    name = "MemoryHook"

    def __enter__(self):
        _POOL["hooks"].append(self)
        return self

    def __exit__(self, *exc):
        _POOL["hooks"].remove(self)

    def malloc_preprocess(self, **kw):
        pass

    def malloc_postprocess(self, **kw):
        pass

    def free_preprocess(self, **kw):
        pass

    def free_postprocess(self, **kw):
        pass


class MemoryPointer:
    def __init__(self, a: np.ndarray):
        self.ptr = a.__array_interface__["data"][0]
        self.device_id = _state["current"]
        _ADDRESSES[self.ptr] = a
        if _CAPTURE["records"] is not None:
            _CAPTURE["allocations"].append(a)   # a pointer a captured call may take: the graph's memory

    def copy_to_host_async(self, mem, size, stream=None):
        """cupy/cuda/memory.pyx: ``size`` bytes from here to host address ``mem`` (pinned memory on
        a GPU), queued on the stream; refused while the stream is captured into a graph. The
        bytes must lie in the array this pointer came from."""
        a = _ADDRESSES.get(self.ptr)
        if a is None:
            raise RuntimeError(f"copy_to_host_async: no array of the CuPy double holds address {self.ptr:#x}")
        if not (a.flags.c_contiguous and size <= a.nbytes):
            raise RuntimeError(f"copy_to_host_async: {size} bytes from {self.ptr:#x} run outside its array's "
                               f"{a.nbytes} dense bytes")
        _launch("device to host")
        ctypes.memmove(mem if isinstance(mem, int) else mem.value, self.ptr, size)


_ADDRESSES: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


# ---------------------------------------------------------------- devices and streams
class Device:
    """cupy/cuda/device.pyx: a context manager selecting one of the configured devices."""

    def __init__(self, device=None):
        self.id = _state["current"] if device is None else int(device)
        if not 0 <= self.id < _state["devices"]:
            raise RuntimeError(f"cudaErrorInvalidDevice: invalid device ordinal ({self.id})")
        self._previous = []

    def use(self):
        _state["current"] = self.id

    def __enter__(self):
        self._previous.append(_state["current"])
        self.use()
        return self

    def __exit__(self, *exc):
        _state["current"] = self._previous.pop()

    def synchronize(self):
        pass

    compute_capability = property(lambda self: "90")
    mem_info = property(lambda self: memGetInfo())

    def __int__(self):
        return self.id

    def __eq__(self, other):
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self):
        return hash(self.id)

    def __repr__(self):
        return f"<CUDA Device {self.id}>"


class Event:
    """cupy/cuda/stream.pyx, Event: every call of the double is synchronous, so an event is
    done as soon as it is recorded."""

    def __init__(self, block=False, disable_timing=False, interprocess=False):
        self.done = True

    def record(self, stream=None):
        self.done = True

    def synchronize(self):
        _refuse_while_capturing("Event.synchronize")


class Stream:
    """cupy/cuda/stream.pyx, Stream: the null stream (ptr 0) or one of the double's own; ``with
    stream:`` makes it the current stream, on which a capture records (begin_capture)."""
    null = None
    _made = itertools.count(2)

    def __init__(self, null=False, non_blocking=False, ptds=False):
        self.ptr = 0 if null else next(Stream._made)
        self._previous = []

    def synchronize(self):
        _refuse_while_capturing("Stream.synchronize")

    def record(self, event=None):
        event = Event() if event is None else event
        event.record(self)
        return event

    def is_capturing(self):
        return _CAPTURE["records"] is not None and _CAPTURE["stream"] is self

    def begin_capture(self, mode=None):
        """cupy/cuda/stream.pyx, begin_capture: not on the legacy null stream. From here until
        end_capture, device work on this stream is recorded, and the device's memory is as it was
        when the capture ended (CUDA runs nothing of a capture)."""
        if self.ptr in (0, 1):
            raise RuntimeError("cannot capture on the default (legacy) stream")
        if _CAPTURE["records"] is not None:
            raise RuntimeError("cudaErrorStreamCaptureUnsupported: a stream is being captured already")
        if _current_stream() is not self:
            raise UnmodelledError("the CuPy double captures only the current stream (use `with stream:`)")
        _CAPTURE.update(stream=self, records=[], launched=False, allocations=[],
                        snapshot=[(a, a.copy()) for a in list(_LIVE.values())])

    def end_capture(self):
        """The graph of what was recorded; every allocation that lived before the capture gets its
        bytes back, and those made during it hold what fresh device memory may hold (NaN, -1)."""
        if not self.is_capturing():
            raise RuntimeError("cudaErrorIllegalState: this stream is not capturing")
        records, snapshot, allocations = _CAPTURE["records"], _CAPTURE["snapshot"], _CAPTURE["allocations"]
        _CAPTURE.update(stream=None, records=None, snapshot=None, allocations=None)
        before = {id(a) for a, _ in snapshot}
        for a, saved in snapshot:
            np.copyto(a, saved)
        for a in list(_LIVE.values()):
            if id(a) not in before:
                _poison(a)
        return Graph._made(records, allocations)

    def __enter__(self):
        self._previous.append(_state.get("stream"))
        _state["stream"] = self
        return self

    def __exit__(self, *exc):
        _state["stream"] = self._previous.pop()


def _current_stream():
    return _state.get("stream") or Stream(null=True)


def get_current_stream(device_id=None):
    return _current_stream()


# ---------------------------------------------------------------- CUDA graphs: stream capture, modelled
# While a stream is captured, a call that launches device work runs (so that it can return its
# arrays, and check its arguments) and is recorded with its arguments; end_capture puts back the
# memory it changed, as CUDA runs nothing of a capture. Graph.launch calls each recorded call
# again with the same arguments: the scalars as they were captured, the arrays as they hold now
# (a kernel reads its pointers at replay), and writes a call's results into the arrays the
# capture returned. As on a GPU: no copy between host and device, no host read, no random draw
# (cuRAND's offsets would be baked) and no work on another stream while capturing.
def _poison(a: np.ndarray) -> None:
    try:
        a[...] = np.nan if a.dtype.kind in "fcV" else (-1 if a.dtype.kind == "i" else np.iinfo(a.dtype).max
                                                       if a.dtype.kind == "u" else True)
    except (TypeError, ValueError):
        pass


def _into(kept, again) -> None:
    if isinstance(kept, ndarray) and isinstance(again, ndarray):
        if kept is not again:
            np.copyto(kept._a, again._a)
    elif isinstance(kept, (tuple, list)) and isinstance(again, (tuple, list)):
        for k, a in zip(kept, again):
            _into(k, a)


class Graph:
    """cupy/cuda/graph.pyx, Graph: made by Stream.end_capture only; ``launch`` runs the capture's
    calls again (one launch, counted as such)."""

    def __init__(self, *args, **kwargs):
        raise RuntimeError("cupy.cuda.Graph objects are not meant to be instantiated by the users")

    @classmethod
    def _made(cls, records, allocations):
        graph = cls.__new__(cls)
        graph._records = records
        # what the capture allocated stays the graph's, as the blocks of a capture's memory pool
        # do on a GPU: a launch reads and writes them through the pointers it was captured with
        graph._allocations = allocations
        return graph

    def launch(self, stream=None):
        _refuse_while_capturing("Graph.launch")
        _LAUNCHES["graph"] += 1
        _CAPTURE["replaying"] = True
        try:
            for fn, args, kwargs, result in self._records:
                _into(result, fn(*args, **kwargs))
        finally:
            _CAPTURE["replaying"] = False

    def upload(self, stream=None):
        pass


def getDeviceCount():
    return _state["devices"]


def getDevice():
    return _state["current"]


def setDevice(device):
    Device(device).use()


TOTAL_MEMORY = 80 * 2**30


def memGetInfo():
    return TOTAL_MEMORY - _POOL["held"], TOTAL_MEMORY


def getDeviceProperties(device):
    Device(device)
    return {"name": b"CuPy double (NumPy)", "totalGlobalMem": TOTAL_MEMORY, "major": 9, "minor": 0,
            "multiProcessorCount": 132, "sharedMemPerBlock": 49152, "sharedMemPerBlockOptin": 232448,
            "maxThreadsPerBlock": 1024, "warpSize": 32, "clockRate": 1980000, "memoryClockRate": 2619000,
            "memoryBusWidth": 5120}


def runtimeGetVersion():
    return 13000


def driverGetVersion():
    return 13000


def deviceSynchronize():
    pass


# ---------------------------------------------------------------- random numbers
class RandomState:
    """cupy/random/_generator.py: float32 and float64 only (``_check_and_get_dtype``); the
    draws come from NumPy, so they are not cuRAND's."""

    def __init__(self, seed=None, method=None):
        self.method = method
        self.seed(seed)

    def seed(self, seed=None):
        if seed is not None and not 0 <= int(seed) < 2**64:
            raise ValueError("Seed must be an integer between 0 and 2**64 - 1")
        self._rs = np.random.RandomState(None if seed is None else int(seed) % 2**32)

    @staticmethod
    def _dtype(dtype):
        dtype = np.dtype(dtype)
        if dtype.char not in ("f", "d"):
            raise TypeError("cupy.random only supports float32 and float64")
        return dtype

    def random_sample(self, size=None, dtype=float):
        return _drawn(np.asarray(self._rs.random_sample(size), self._dtype(dtype)))

    def standard_normal(self, size=None, dtype=float):
        return _drawn(np.asarray(self._rs.standard_normal(size), self._dtype(dtype)))

    def normal(self, loc=0.0, scale=1.0, size=None, dtype=float):
        return _drawn(np.asarray(self._rs.normal(loc, scale, size), self._dtype(dtype)))

    def uniform(self, low=0.0, high=1.0, size=None, dtype=float):
        return _drawn(np.asarray(self._rs.uniform(low, high, size), self._dtype(dtype)))

    def randint(self, low, high=None, size=None, dtype="l"):
        return _drawn(self._rs.randint(low, high, size).astype(dtype))

    def permutation(self, n):
        return _drawn(self._rs.permutation(n))

    def rand(self, *size, dtype=float):
        return self.random_sample(size, dtype)

    def randn(self, *size, dtype=float):
        return self.standard_normal(size, dtype)


_GLOBAL_RS = {}


def _drawn(a: np.ndarray) -> ndarray:
    _launch("random")
    return _wrap(a)


def get_random_state():
    return _GLOBAL_RS.setdefault(_state["current"], RandomState(0))


def _random_function(name):
    def f(*args, **kwargs):
        return getattr(get_random_state(), name)(*args, **kwargs)
    f.__name__ = name
    return f


# ---------------------------------------------------------------- kernels
class RawModule:
    """cupy/cuda/compiler.py, RawModule: compiled here by the project's CUDA emulator; each
    function checks its launch arguments as CuPy's ``function.pyx`` does, then runs there."""

    def __init__(self, code=None, path=None, options=(), backend="nvrtc", translate_cucomplex=False,
                 enable_cooperative_groups=False, name_expressions=None, jitify=False):
        if code is None:
            raise UnmodelledError("the CuPy double compiles RawModule(code=...) only")
        if not isinstance(options, tuple):
            raise TypeError("options must be a tuple")
        self.code, self.options, self.name_expressions = code, options, tuple(name_expressions or ())

    def get_function(self, name):
        if self.name_expressions and name not in self.name_expressions:
            raise RuntimeError(f"The kernel {name!r} was not given as a name expression")
        from minitensor.cuda import emulator  # noqa: PLC0415

        return RawKernel(emulator.EmulatedKernel(self.code, name, None, "<RawModule>"), name)


class RawKernel:
    def __init__(self, emulated, name):
        self._k, self.name = emulated, name
        self.max_dynamic_shared_size_bytes = emulated.max_dynamic_shared_size_bytes

    def __setattr__(self, key, value):
        object.__setattr__(self, key, value)
        if key == "max_dynamic_shared_size_bytes" and "_k" in self.__dict__:
            self._k.max_dynamic_shared_size_bytes = value

    @_captured
    def __call__(self, grid, block, args, shared_mem=0, stream=None, enable_cooperative_groups=False):
        # cupy/cuda/function.pyx: args must be a tuple; each a cupy.ndarray (a pointer), None
        # (a null pointer), a NumPy scalar or a Python int/float/bool; anything else is refused
        if not isinstance(args, tuple):
            raise TypeError("args must be a tuple")
        plain = []
        for a in args:
            if isinstance(a, ndarray):
                plain.append(a._a)
            elif isinstance(a, np.ndarray):
                raise TypeError(f"Unsupported type {type(a)}")
            else:
                plain.append(a)
        _launch(f"kernel {self.name}")
        if _in_capture():
            return
        self._k(grid, block, tuple(plain), shared_mem=shared_mem)


_ELEMENTWISE = {}


def elementwise_reference(name: str, in_params: str, out_params: str):
    """Register the NumPy reference of an ``ElementwiseKernel``'s body, for its exact
    parameter lists: a kernel whose parameters change must get a new reference."""
    def register(f):
        _ELEMENTWISE[name] = (in_params, out_params, f)
        return f
    return register


class ElementwiseKernel:
    def __init__(self, in_params, out_params, operation, name="kernel", **kwargs):
        self.in_params, self.out_params, self.operation, self.name = in_params, out_params, operation, name
        if name not in _ELEMENTWISE:
            raise UnmodelledError(f"the CuPy double has no NumPy reference for ElementwiseKernel {name!r}")
        ins, outs, self._f = _ELEMENTWISE[name]
        if (" ".join(in_params.split()), " ".join(out_params.split())) != (ins, outs):
            raise UnmodelledError(f"ElementwiseKernel {name!r} changed its parameters: its reference is for "
                                  f"({ins}) -> ({outs})")
        self._n_in = len(in_params.split(","))
        self._n_out = len(out_params.split(","))

    @_captured
    def __call__(self, *args, size=None, block_size=None, stream=None):
        if len(args) != self._n_in + self._n_out:
            raise TypeError(f"Wrong number of arguments for {self.name!r}")
        for a in args:
            if isinstance(a, np.ndarray) or not (isinstance(a, ndarray) or _is_scalar(a)):
                raise _unsupported(a)
        _launch(f"elementwise {self.name}")
        if _in_capture():
            return
        self._f(*[a._a if isinstance(a, ndarray) else a for a in args])


# ---------------------------------------------------------------- NCCL over MPI
NCCL_UNIQUE_ID_BYTES = 128


def get_unique_id():
    return bytes(np.random.default_rng().integers(0, 256, NCCL_UNIQUE_ID_BYTES, dtype=np.uint8))


class NcclCommunicator:
    """cupy_backends/cuda/libs/nccl.pyx: ``__init__(int ndev, bytes commId, int rank)``, the id
    exactly 128 bytes; collectives take integer pointers (``intptr_t``) and run over MPI on
    the arrays at those addresses."""

    def __init__(self, ndev, commId, rank, config=None):
        _typed("NcclCommunicator", "__init__", (ndev, commId, rank))
        if len(commId) != NCCL_UNIQUE_ID_BYTES:
            raise ValueError(f"commId length {len(commId)} != {NCCL_UNIQUE_ID_BYTES}.")
        from mpi4py import MPI  # noqa: PLC0415

        self._mpi = MPI.COMM_WORLD
        if self._mpi.Get_size() != ndev or self._mpi.Get_rank() != rank:
            raise RuntimeError(f"the CuPy double runs NCCL over MPI's world ({self._mpi.Get_size()} ranks); "
                               f"got ndev={ndev}, rank={rank}")
        self._ndev, self._rank = ndev, rank

    def rank_id(self):
        return self._rank

    def size(self):
        return self._ndev

    def device_id(self):
        return _state["current"]

    def _array(self, ptr, count, datatype):
        a = _ADDRESSES.get(ptr)
        if a is None:
            raise RuntimeError(f"no array of the CuPy double starts at address {ptr:#x}")
        if a.dtype != _NCCL_DTYPES[datatype] or a.size != count:
            raise RuntimeError(f"NCCL call says {count} items of type {datatype}; the array at {ptr:#x} "
                               f"holds {a.size} of {a.dtype}")
        if not a.flags.c_contiguous:  # NCCL reads and writes count items one after the other from ptr
            raise RuntimeError(f"NCCL reads {count} contiguous items from {ptr:#x}; the array there is a "
                               f"strided view {a.shape} (strides {a.strides})")
        return a

    @_captured
    def allReduce(self, sendbuf, recvbuf, count, datatype, op, stream):
        _typed("NcclCommunicator", "allReduce", (sendbuf, recvbuf, count, datatype, op, stream))
        from mpi4py import MPI  # noqa: PLC0415

        send, recv = self._array(sendbuf, count, datatype), self._array(recvbuf, count, datatype)
        _launch("nccl allReduce")
        if _in_capture():
            return
        mpi_op = {0: MPI.SUM, 1: MPI.PROD, 2: MPI.MAX, 3: MPI.MIN}[op]
        src = MPI.IN_PLACE if sendbuf == recvbuf else np.ascontiguousarray(send)
        if recv.dtype == _bfloat16() or recv.dtype == np.float16:
            total = self._mpi.allreduce(recv.astype(np.float32) if src is MPI.IN_PLACE else send.astype(np.float32),
                                        op=mpi_op)
            recv[...] = total.astype(recv.dtype)
            return
        self._mpi.Allreduce(src, recv, op=mpi_op)

    @_captured
    def bcast(self, buff, count, datatype, root, stream):
        _typed("NcclCommunicator", "bcast", (buff, count, datatype, root, stream))
        a = self._array(buff, count, datatype)
        _launch("nccl bcast")
        if _in_capture():
            return
        self._mpi.Bcast(a, root=root)

    def destroy(self):
        pass


_NCCL_DTYPES = {0: np.dtype(np.int8), 1: np.dtype(np.uint8), 2: np.dtype(np.int32), 3: np.dtype(np.uint32),
                4: np.dtype(np.int64), 5: np.dtype(np.uint64), 6: np.dtype(np.float16), 7: np.dtype(np.float32),
                8: np.dtype(np.float64)}
if _bfloat16() is not None:
    _NCCL_DTYPES[9] = _bfloat16()

_CYTHON = {"int": int, "size_t": int, "intptr_t": int, "long long": int, "bytes": bytes, "list": list}


def _typed(cls: str, method: str, args: tuple) -> None:
    """Cython's argument conversion for the signature in CuPy's source (NCCL's communicator)."""
    _check_params(SPEC["modules"]["cupy.cuda.nccl"][cls]["methods"][method], method, args)


def _check_params(params: list, method: str, args: tuple) -> None:
    """An ``int``, ``size_t``, ``long long`` or ``intptr_t`` parameter takes an integer (or an
    object with ``__index__``), ``bytes`` takes bytes only."""
    for param, value in zip(params, args):
        ctype, pname = param.rsplit(" ", 1)
        want = _CYTHON.get(ctype)
        if want is int:
            if isinstance(value, (float, ndarray, np.ndarray)) or not hasattr(value, "__index__"):
                raise TypeError(f"{method}() argument '{pname}' must be an integer ({ctype}), "
                                f"not {type(value).__name__}")
        elif want is not None and not isinstance(value, want):
            raise TypeError(f"Argument '{pname}' has incorrect type (expected {want.__name__}, "
                            f"got {type(value).__name__})")


# ---------------------------------------------------------------- cuBLAS's GEMMs
def get_cublas_handle():
    """cupy/cuda/device.pyx: the current device's cuBLAS handle, an integer."""
    return 0xC0B1A5 + _state["current"]


def _cublas(name: str) -> dict:
    return SPEC["modules"]["cupy_backends.cuda.libs.cublas"][name]


def _cublas_error(status: str):
    err = getattr(_module("cupy_backends.cuda.libs.cublas"), "CUBLASError")
    return err(status)


def _cuda_dtype(code: int) -> np.dtype:
    """cudaDataType (runtime.pxd) as a dtype: CUDA_R_32F 0, CUDA_R_64F 1, CUDA_R_16F 2, CUDA_R_16BF 14."""
    table = {0: np.dtype(np.float32), 1: np.dtype(np.float64), 2: np.dtype(np.float16), 14: _bfloat16()}
    if code not in table or table[code] is None:
        raise _cublas_error("CUBLAS_STATUS_NOT_SUPPORTED")
    return table[code]


def _gemm_types(atype: int, btype: int, ctype: int, compute: int) -> np.dtype:
    """The compute dtype of a gemmEx type combination that cuBLAS supports (cuBLAS's gemmEx
    table: A and B of one type; 16-bit in with 16-bit or float32 out under COMPUTE_32F; float32
    under COMPUTE_32F or its TF32 mode; float64 under COMPUTE_64F); anything else is
    CUBLAS_STATUS_NOT_SUPPORTED."""
    c32 = {_cublas(n)["value"] for n in ("CUBLAS_COMPUTE_32F", "CUBLAS_COMPUTE_32F_PEDANTIC",
                                         "CUBLAS_COMPUTE_32F_FAST_TF32")}
    c64 = {_cublas(n)["value"] for n in ("CUBLAS_COMPUTE_64F", "CUBLAS_COMPUTE_64F_PEDANTIC")}
    a, b, c = _cuda_dtype(atype), _cuda_dtype(btype), _cuda_dtype(ctype)
    ok = a == b and (
        (compute in c32 and a.itemsize == 2 and c in (a, np.dtype(np.float32)))
        or (compute in c32 and a == c == np.float32)
        or (compute in c64 and a == c == np.float64))
    if not ok or (compute == _cublas("CUBLAS_COMPUTE_32F_FAST_TF32")["value"] and a != np.float32):
        raise _cublas_error("CUBLAS_STATUS_NOT_SUPPORTED")
    return np.dtype(np.float64) if compute in c64 else np.dtype(np.float32)


def _device_matrices(ptr: int, dtype: np.dtype, rows: int, cols: int, ld: int, stride: int, batch: int,
                     what: str) -> np.ndarray:
    """The ``batch`` column-major rows x cols matrices that cuBLAS reads (or writes) at device
    address ``ptr``: leading dimension ``ld``, ``stride`` elements from one matrix to the next.
    The address must lie in an array of the double, and every element read inside that array's
    allocation (CUBLAS would read another allocation's bytes, or fault)."""
    owner = None
    exact = _ADDRESSES.get(ptr)                  # the usual case: the array whose .data.ptr was passed
    # the others are read only where that one does not hold ptr (listing them all is slow)
    # (and, where none is, every live allocation: a graph's launch passes pointers whose views are gone)
    for a in itertools.chain([exact] if exact is not None else [], _ADDRESSES.values(), _LIVE.values()):
        root = a
        while isinstance(root.base, np.ndarray):
            root = root.base
        lo, hi = _extent(root)
        if lo <= ptr < hi:
            owner = root
            break
    if owner is None:
        raise RuntimeError(f"cuBLAS {what}: no array of the CuPy double holds address {ptr:#x}")
    start, end = _extent(owner)
    if end - start != owner.nbytes:
        raise UnmodelledError("cuBLAS on an array whose allocation is not one dense block")
    offset = ptr - start
    if offset % dtype.itemsize:
        raise RuntimeError(f"cuBLAS {what}: address {ptr:#x} is not aligned to its type {dtype}")
    last = offset // dtype.itemsize + (batch - 1) * stride + (cols - 1) * ld + (rows - 1) if rows and cols and batch else -1
    first = offset // dtype.itemsize + min(0, (batch - 1) * stride)
    if first < 0 or (last + 1) * dtype.itemsize > owner.nbytes:
        raise RuntimeError(f"cuBLAS {what}: {batch} matrices of {rows} x {cols} (ld {ld}, stride {stride}) "
                           f"run outside the allocation of {owner.nbytes} bytes at {start:#x}")
    # the allocation's bytes, whatever order NumPy laid its elements in (a device buffer has none)
    memory = np.frombuffer((ctypes.c_uint8 * owner.nbytes).from_address(start), np.uint8)
    flat = memory[offset:offset + (owner.nbytes - offset) // dtype.itemsize * dtype.itemsize].view(dtype)
    e = dtype.itemsize
    return np.lib.stride_tricks.as_strided(flat, (batch, cols, rows), (stride * e, ld * e, e)).transpose(0, 2, 1)


def _bytes_touched(ptr: int, itemsize: int, rows: int, cols: int, ld: int, stride: int, batch: int) -> np.ndarray:
    """Every byte address a column-major batch of matrices occupies, one row per element."""
    first = (np.arange(batch)[:, None, None] * stride + np.arange(cols)[None, :, None] * ld
             + np.arange(rows)[None, None, :]).ravel() * itemsize + ptr
    return first[:, None] + np.arange(itemsize)[None, :]


def _check_no_overlap(c: tuple, inputs: dict) -> None:
    """cuBLAS's output must not share a byte with an input, nor its batch entries with each
    other (the result would depend on the order the GPU wrote in): ``c`` and each input are
    (ptr, itemsize, rows, cols, ld, stride, batch)."""
    ptr, e, rows, cols, ld, stride, batch = c
    span = lambda p, e, r, cl, ld, st, b: (p + min(0, (b - 1) * st) * e,  # noqa: E731
                                           p + (max(0, (b - 1) * st) + (cl - 1) * ld + r) * e)
    lo, hi = span(*c)
    written = None
    if batch > 1 and abs(stride) < (cols - 1) * ld + rows:    # entries close enough to share an element
        written = _bytes_touched(*c)
        if np.unique(written[:, 0]).size != written.shape[0]:
            raise RuntimeError(f"cuBLAS C: its {batch} matrices of {rows} x {cols} (ld {ld}, stride {stride}) write "
                               "the same elements more than once")
    for name, x in inputs.items():
        x_lo, x_hi = span(*x)
        if x_hi <= lo or hi <= x_lo:
            continue
        written = _bytes_touched(*c) if written is None else written
        if np.intersect1d(written.ravel(), _bytes_touched(*x).ravel()).size:
            raise RuntimeError(f"cuBLAS C overlaps its input {name}: the output's bytes are also read as {name}")


def _extent(a: np.ndarray) -> tuple[int, int]:
    """The addresses [lowest, one past the highest byte] that ``a``'s elements occupy."""
    start = a.__array_interface__["data"][0]
    if a.size == 0:
        return start, start
    lo = start + sum(s * (n - 1) for s, n in zip(a.strides, a.shape) if s < 0)
    hi = start + sum(s * (n - 1) for s, n in zip(a.strides, a.shape) if s > 0) + a.itemsize
    return lo, hi


def _tf32(x: np.ndarray) -> np.ndarray:
    """float32 rounded to TF32 (10 explicit mantissa bits, to nearest even), as tensor cores read it."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0xFFF) + ((bits >> np.uint32(13)) & np.uint32(1))) & np.uint32(0xFFFFE000)
    finite = np.isfinite(x)
    return np.where(finite, rounded.view(np.float32), x)


def _gemm(name, args, batched: bool):
    if _CAPTURE["records"] is not None and not _CAPTURE["depth"]:
        # host pointer mode: cuBLAS reads alpha and beta when the call is captured, and a
        # graph's replay uses those values whatever the host memory holds then
        types = (args[8], args[12], args[17]) if batched else (args[8], args[11], args[15])
        scalar = ctypes.c_double if _gemm_types(*types, args[-2]) == np.float64 else ctypes.c_float
        at = (6, 15) if batched else (6, 13)
        baked = [scalar(scalar.from_address(args[i]).value) for i in at]
        _BAKED.extend(baked)
        args = tuple(ctypes.addressof(baked[at.index(i)]) if i in at else a for i, a in enumerate(args))
        return _captured(_gemm_now)(name, args, batched)
    return _gemm_now(name, args, batched)


_BAKED: list = []   # the scalars captured gemms read at replay


def _gemm_now(name, args, batched: bool):
    params = _cublas(name)["params"]
    if len(args) != len(params):
        raise TypeError(f"{name}() takes exactly {len(params)} positional arguments ({len(args)} given)")
    _check_params(params, name, args)
    if batched:
        (handle, transa, transb, m, n, k, alpha, A, atype, lda, stride_a, B, btype, ldb, stride_b, beta, C, ctype, ldc,
         stride_c, count, compute, algo) = args
    else:
        (handle, transa, transb, m, n, k, alpha, A, atype, lda, B, btype, ldb, beta, C, ctype, ldc, compute,
         algo) = args
        stride_a = stride_b = stride_c = 0
        count = 1
    if handle != get_cublas_handle():
        raise _cublas_error("CUBLAS_STATUS_NOT_INITIALIZED")
    ops = (_cublas("CUBLAS_OP_N")["value"], _cublas("CUBLAS_OP_T")["value"])
    # cuBLAS's argument checks (CUBLAS_STATUS_INVALID_VALUE): sizes >= 0, the leading dimensions
    # at least the stored matrices' rows, a known operation
    if (transa not in ops or transb not in ops or min(m, n, k, count) < 0
            or lda < max(1, m if transa == ops[0] else k) or ldb < max(1, k if transb == ops[0] else n)
            or ldc < max(1, m)):
        raise _cublas_error("CUBLAS_STATUS_INVALID_VALUE")
    work = _gemm_types(atype, btype, ctype, compute)
    _launch(name)
    if m == 0 or n == 0 or count == 0:
        return
    at, bt, ct = _cuda_dtype(atype), _cuda_dtype(btype), _cuda_dtype(ctype)
    ra, ca = (m, k) if transa == ops[0] else (k, m)
    rb, cb = (k, n) if transb == ops[0] else (n, k)
    a = _device_matrices(A, at, ra, ca, lda, stride_a, count, "A")
    b = _device_matrices(B, bt, rb, cb, ldb, stride_b, count, "B")
    c = _device_matrices(C, ct, m, n, ldc, stride_c, count, "C")
    _check_no_overlap((C, ct.itemsize, m, n, ldc, stride_c, count),
                      {"A": (A, at.itemsize, ra, ca, lda, stride_a, count),
                       "B": (B, bt.itemsize, rb, cb, ldb, stride_b, count)})
    if _in_capture():
        return
    scalar = ctypes.c_double if work == np.float64 else ctypes.c_float    # host pointer mode: alpha, beta on the host
    al, be = scalar.from_address(alpha).value, scalar.from_address(beta).value
    a = a.astype(work) if transa == ops[0] else a.transpose(0, 2, 1).astype(work)
    b = b.astype(work) if transb == ops[0] else b.transpose(0, 2, 1).astype(work)
    if compute == _cublas("CUBLAS_COMPUTE_32F_FAST_TF32")["value"]:
        a, b = _tf32(a), _tf32(b)
    with np.errstate(all="ignore"):
        result = work.type(al) * np.matmul(a, b)
        if be != 0:
            result += work.type(be) * c.astype(work)
        c[...] = result.astype(ct)   # (a 16-bit output overflows to inf, silently as on a GPU)


def gemmEx(*args):
    """cupy_backends/cuda/libs/cublas.pyx, gemmEx: C = alpha op(A) op(B) + beta C, column-major."""
    _gemm("gemmEx", args, batched=False)


def gemmStridedBatchedEx(*args):
    """cupy_backends/cuda/libs/cublas.pyx, gemmStridedBatchedEx: the same for ``batchCount``
    matrices at fixed strides."""
    _gemm("gemmStridedBatchedEx", args, batched=True)


# ---------------------------------------------------------------- cupyx.profiler.benchmark
class _PerfCaseResult:
    """cupyx/profiler/_time.py, _PerfCaseResult: row 0 of ``ts`` the CPU times, one row per device."""

    def __init__(self, name, ts, devices):
        self.name, self._ts, self._devices = name, ts, devices

    @property
    def cpu_times(self):
        return self._ts[0]

    @property
    def gpu_times(self):
        return self._ts[1:]

    def __repr__(self):
        return f"{self.name}: CPU {np.mean(self.cpu_times) * 1e6:.3f} us (the CuPy double: GPU times are CPU times)"


def benchmark(func, args=(), kwargs={}, n_repeat=10000, *, name=None, n_warmup=10, max_duration=math.inf,  # noqa: B006 (CuPy's signature)
              devices=None):
    """cupyx/profiler/_time.py, benchmark: the same argument checks; every call of the double
    is synchronous, so each device's time is the call's own wall time."""
    name = func.__name__ if name is None else name
    devices = (getDevice(),) if devices is None else devices
    for ok, what in ((callable(func), "`func` should be a callable object."),
                     (isinstance(args, tuple), "`args` should be of tuple type."),
                     (isinstance(kwargs, dict), "`kwargs` should be of dict type."),
                     (isinstance(n_repeat, int), "`n_repeat` should be an integer."),
                     (isinstance(name, str), "`name` should be a string."),
                     (isinstance(n_warmup, int), "`n_warmup` should be an integer."),
                     (np.isreal(max_duration), "`max_duration` should be given in seconds"),
                     (isinstance(devices, tuple), "`devices` should be of tuple type")):
        if not ok:
            raise ValueError(what)
    for _ in range(n_warmup):
        func(*args, **kwargs)
    times, duration = [], 0.0
    for _ in range(n_repeat):
        t0 = time.perf_counter()
        func(*args, **kwargs)
        times.append(time.perf_counter() - t0)
        duration += times[-1]
        if duration > max_duration:
            break
    return _PerfCaseResult(name, np.asarray([times] * (1 + len(devices)), dtype=np.float64), devices)


# ---------------------------------------------------------------- linalg compute types
_COMPUTE = {}


def set_compute_type(dtype, compute_type):
    _COMPUTE[np.dtype(dtype).char] = compute_type


def get_compute_type(dtype):
    return _COMPUTE.get(np.dtype(dtype).char, SPEC["modules"]["cupy._core._routines_linalg"]
                        ["COMPUTE_TYPE_DEFAULT"]["value"])


# ---------------------------------------------------------------- the modules
IMPLEMENTED = {
    "cupy": {"ndarray": ndarray, "asnumpy": asnumpy, "get_array_module": get_array_module, "matmul": matmul,
             "zeros": zeros, "ones": ones, "get_default_memory_pool": get_default_memory_pool,
             "RawModule": RawModule, "RawKernel": RawKernel, "ElementwiseKernel": ElementwiseKernel,
             "__version__": SPEC["cupy_version"]},
    "cupy.cuda": {"get_cublas_handle": get_cublas_handle, "Device": Device, "Stream": Stream, "Event": Event, "MemoryHook": MemoryHook, "MemoryPointer": MemoryPointer,
                  "Graph": Graph, "using_allocator": lambda allocator=None: _UsingAllocator(allocator),
                  "MemoryPool": MemoryPool, "get_current_stream": get_current_stream,
                  "is_available": lambda: True, "get_device_id": getDevice},
    "cupy.cuda.runtime": {"getDeviceCount": getDeviceCount, "getDevice": getDevice, "setDevice": setDevice,
                          "memGetInfo": memGetInfo, "getDeviceProperties": getDeviceProperties,
                          "runtimeGetVersion": runtimeGetVersion, "driverGetVersion": driverGetVersion,
                          "deviceSynchronize": deviceSynchronize},
    "cupy.random": {"RandomState": RandomState, "get_random_state": get_random_state,
                    **{n: _random_function(n) for n in ("random_sample", "standard_normal", "normal", "uniform",
                                                        "randint", "permutation", "rand", "randn")},
                    "seed": lambda seed=None: get_random_state().seed(seed)},
    "cupy.cuda.nccl": {"NcclCommunicator": NcclCommunicator, "get_unique_id": get_unique_id},
    "cupy._core._routines_linalg": {"set_compute_type": set_compute_type, "get_compute_type": get_compute_type},
    "cupyx": {"allow_synchronize": allow_synchronize, "DeviceSynchronized": DeviceSynchronized,
              "zeros_pinned": lambda shape, dtype=float, order="C": np.zeros(shape, dtype, order)},
    "cupyx.profiler": {"benchmark": benchmark}, "cupy.cuda.curand": {},
    "cupy_backends.cuda.libs.cublas": {"gemmEx": gemmEx, "gemmStridedBatchedEx": gemmStridedBatchedEx},
}
CHILDREN = {"cupy": ["cuda", "random", "_core"], "cupy.cuda": ["runtime", "nccl", "curand"], "cupyx": ["profiler"],
            "cupy_backends": ["cuda"], "cupy_backends.cuda": ["libs"], "cupy_backends.cuda.libs": ["cublas"]}


class SpecModule(types.ModuleType):
    """A module whose attributes are the spec's names: implemented ones as given, ufuncs and
    NumPy-backed functions built on first use, constants with CuPy's values; any other name
    raises AttributeError as the real module would."""

    def __init__(self, name: str):
        super().__init__(name)
        self.__dict__["_spec"] = SPEC["modules"].get(name, {})
        self.__dict__.update(IMPLEMENTED.get(name, {}))

    def __getattr__(self, attr):
        entry = self._spec.get(attr)
        if entry is None:
            raise AttributeError(f"module '{self.__name__}' has no attribute '{attr}'")
        value = _build(self.__name__, attr, entry)
        self.__dict__[attr] = value
        return value

    def __dir__(self):
        return sorted(set(self._spec) | set(self.__dict__))


def _build(module: str, attr: str, entry: dict):
    kind = entry["kind"]
    if entry.get("is_numpy"):
        return getattr(np.linalg if module == "cupy.linalg" else np.fft if module == "cupy.fft" else np, attr)
    if kind == "constant":
        return entry.get("value")
    if kind == "scalar type":
        return getattr(np, entry["numpy"])
    if kind == "ufunc":
        return Ufunc(attr, entry)
    if kind == "function" and module == "cupy" and hasattr(np, attr):
        return _function(attr)
    if kind == "exception":
        return type(attr, (RuntimeError,), {"__module__": module})
    if kind == "module":
        return _module(f"{module}.{attr}")

    def unmodelled(*args, **kwargs):
        raise UnmodelledError(f"the CuPy double does not model {module}.{attr}")
    unmodelled.__name__ = attr
    return unmodelled


_MODULES: dict[str, SpecModule] = {}


def _module(name: str) -> SpecModule:
    if name not in _MODULES:
        _MODULES[name] = SpecModule(name)
    return _MODULES[name]


def install(devices: int = 1) -> types.ModuleType:
    """Put the double into ``sys.modules`` as ``cupy`` (refusing if a real CuPy is already
    imported there) with ``devices`` devices; returns the ``cupy`` module."""
    existing = sys.modules.get("cupy")
    if existing is not None and not isinstance(existing, SpecModule):
        raise RuntimeError("a real CuPy is already imported: the double would shadow it")
    _state.update(devices=int(devices), current=0, installed=True)
    for name in SPEC["modules"]:
        sys.modules[name] = _module(name)
    for parent, children in CHILDREN.items():
        sys.modules.setdefault(parent, _module(parent))  # a package with no names of its own (cupy_backends)
        for child in children:
            full = f"{parent}.{child}"
            if full == "cupy._core":
                core = _MODULES.setdefault("cupy._core", SpecModule("cupy._core"))
                sys.modules["cupy._core"] = core
                core.__dict__["_routines_linalg"] = _module("cupy._core._routines_linalg")
                _module("cupy").__dict__["_core"] = core
                continue
            _module(parent).__dict__[child] = _module(full)
    return _module("cupy")


def uninstall() -> None:
    for name in list(sys.modules):
        if isinstance(sys.modules[name], SpecModule):
            del sys.modules[name]
    _state["installed"] = False


def installed() -> bool:
    return _state["installed"]


