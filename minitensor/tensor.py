"""The Tensor: an n-d array on a device, plus what autograd needs to know about it.

This module holds the tensor itself, its creation functions and the conversion of an op's
arguments into tensors. Its operators and methods that compute (``+``, ``@``, ``sum``,
``softmax``, ``backward``, ...) are the public functions of ``minitensor.functional``,
bound onto the class from one table there.
"""
from __future__ import annotations

import numbers

import numpy as np

from . import backend
from .errors import GraphError, ShapeError
from .ops.precision import is_half
from .random import generator


def _default_dtype(data):
    """float32 for Python floats (and lists of them), int64 for ints, bool for bools."""
    arr = np.asarray(data)
    if arr.dtype.kind == "f":
        return np.float32
    if arr.dtype.kind in "iu":
        return np.int64
    if arr.dtype.kind == "b":
        return np.bool_
    raise TypeError(f"cannot make a tensor from data of dtype {arr.dtype}")


def _check_can_require_grad(dtype) -> None:
    if np.dtype(dtype).kind not in "fc" and not is_half(dtype):   # (bfloat16's NumPy kind is "V")
        raise TypeError(f"only floating-point tensors can require gradients, this one is {np.dtype(dtype)}")


class Tensor:
    """An n-d array (``data``: numpy or cupy) with optional gradient tracking.

    ``grad`` is a Tensor without history (or None); ``requires_grad`` says whether
    backward should compute it; ``_ctx`` is the graph node that produced this tensor
    (None for leaves and for results computed without recording).
    """

    __slots__ = ("data", "grad", "_requires_grad", "_ctx", "__weakref__")
    __array_priority__ = 1000  # numpy scalars defer to Tensor's reflected operators

    def __init__(self, data, requires_grad: bool = False, dtype=None, device=None):
        if isinstance(data, Tensor):
            data = data.data
        is_array = backend.is_array(data)
        if dtype is None and not is_array:
            dtype = _default_dtype(data)
        if device is None:
            device = backend.device_of(data) if is_array else "cpu"
        xp = backend.xp_for(device)
        if is_array and backend.device_of(data) != backend.normalize_device(device):
            data = backend.to_device(data, device)
        self.data = xp.asarray(data, dtype=dtype)
        self.grad = None
        self._ctx = None
        self._requires_grad = False
        self.requires_grad = requires_grad

    @classmethod
    def _wrap(cls, array, ctx=None) -> "Tensor":
        """Fast constructor used by ops: no dtype or device conversion."""
        t = object.__new__(cls)
        if type(array) is not np.ndarray and not backend.is_array(array):
            array = np.asarray(array)  # numpy scalars from full reductions become 0-d arrays
        t.data = array
        t.grad = None
        t._ctx = ctx
        t._requires_grad = ctx is not None
        return t

    # ----------------------------------------------------------------- properties
    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        if value:
            _check_can_require_grad(self.data.dtype)
        elif self._ctx is not None:
            raise GraphError("cannot unset requires_grad on a non-leaf tensor; use .detach()")
        self._requires_grad = bool(value)

    def requires_grad_(self, value: bool = True) -> "Tensor":
        self.requires_grad = value
        return self

    @property
    def is_leaf(self) -> bool:
        return self._ctx is None

    @property
    def shape(self) -> tuple:
        return tuple(self.data.shape)

    @property
    def ndim(self) -> int:
        return self.data.ndim

    @property
    def size(self) -> int:
        return int(self.data.size)

    @property
    def dtype(self):
        return self.data.dtype

    @property
    def device(self) -> str:
        return backend.device_of(self.data)

    @property
    def xp(self):
        return backend.array_module(self.data)

    def __len__(self) -> int:
        return len(self.data)

    def __repr__(self) -> str:
        extra = ", requires_grad=True" if self.requires_grad else ""
        dev = ", device='cuda'" if self.device == "cuda" else ""
        body = np.array2string(backend.to_numpy(self.data), separator=", ", prefix="tensor(")
        return f"tensor({body}, dtype={self.dtype}{dev}{extra})"

    # ----------------------------------------------------------------- conversion
    def numpy(self) -> np.ndarray:
        """The data as a numpy array (a copy from the GPU; the same array on the CPU)."""
        return backend.to_numpy(self.data)

    # ----------------------------------------------------------------- other libraries' arrays
    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        """``np.asarray(t)``: the data as a NumPy array, the same memory unless ``copy`` (NumPy 2's
        argument) or a new ``dtype`` asks for a copy; no history. A tensor on the GPU refuses:
        a copy to the host is asked for with :meth:`numpy`, never made behind the caller's back."""
        if self.device != "cpu":
            raise TypeError(f"a tensor on {self.device} does not become a NumPy array implicitly; "
                            "copy it to the host with .numpy()")
        if copy is False and dtype is not None and np.dtype(dtype) != self.data.dtype:
            raise ValueError(f"copy=False: a {self.data.dtype} tensor cannot be read as {np.dtype(dtype)} without a copy")
        array = self.data if dtype is None else self.data.astype(dtype, copy=False)
        return array.copy() if copy and array is self.data else array

    def __dlpack__(self, **kwargs):
        """The data for another library's ``from_dlpack`` (NumPy, CuPy, PyTorch, JAX), without a
        copy: the array's own DLPack export, with the consumer's arguments (``stream``, ...)."""
        return self.data.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple:
        return self.data.__dlpack_device__()

    def item(self):
        if self.data.size != 1:
            raise ValueError(f"item() needs a tensor with one element, this one has shape {self.shape}")
        return self.data.reshape(()).item()

    def tolist(self):
        return self.numpy().tolist()

    def detach(self) -> "Tensor":
        """The same data (shared, not copied) with no history and no grad."""
        return Tensor._wrap(self.data)

    def zero_grad(self) -> None:
        self.grad = None

    # the operators and most methods (a + b, x.sum(), x == y, ~m, x.argmax()) are the functions
    # of minitensor.functional, bound by its bind_tensor_methods(); a tensor hashes by identity
    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        if self.data.size != 1:
            raise ValueError(f"the truth value of a tensor with shape {self.shape} is ambiguous")
        return bool(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())


# ----------------------------------------------------------------- creation
def tensor(data, requires_grad: bool = False, dtype=None, device=None) -> Tensor:
    """A new leaf tensor from a number, nested list, numpy/cupy array or Tensor.

    dtype: float32 for Python floats, int64 for Python ints, bool for bools; an array
    keeps its dtype. device: the array's device, or ``"cpu"`` for Python data.
    """
    return Tensor(data, requires_grad=requires_grad, dtype=dtype, device=device)


def from_array(array) -> Tensor:
    """A tensor over ``array`` (a NumPy or CuPy array) itself: no copy, no change of dtype or
    device, no history. Writing into one writes into the other; :func:`tensor` copies where
    that matters."""
    if not backend.is_array(array):
        raise TypeError(f"from_array: needs a NumPy or CuPy array, got {type(array).__name__}; "
                        f"minitensor.tensor makes one from other data")
    return Tensor._wrap(array)


_DLPACK_CPU, _DLPACK_CUDA = 1, 2  # DLPack's device types (kDLCPU, kDLCUDA)


def from_dlpack(x) -> Tensor:
    """A tensor over another library's array (anything with ``__dlpack__``: NumPy, CuPy, a
    PyTorch or JAX tensor) without a copy, on the device the array is on; no history. Writing
    into one writes into the other, as with :func:`from_array`."""
    if not hasattr(x, "__dlpack_device__"):
        raise TypeError(f"from_dlpack: needs an array that exports DLPack (__dlpack__), got {type(x).__name__}")
    kind, _ = x.__dlpack_device__()
    if kind == _DLPACK_CPU:
        return Tensor._wrap(np.from_dlpack(x))
    if kind == _DLPACK_CUDA:
        return Tensor._wrap(backend.cupy().from_dlpack(x))
    raise TypeError(f"from_dlpack: the array is on DLPack device type {kind}; minitensor holds CPU (1) "
                    f"and CUDA (2) arrays")


def _shape(shape) -> tuple:
    if len(shape) == 1 and not isinstance(shape[0], numbers.Integral):
        return tuple(shape[0])
    return tuple(shape)


def zeros(*shape, dtype=np.float32, device=None, requires_grad: bool = False) -> Tensor:
    xp = backend.xp_for(device)
    return Tensor(xp.zeros(_shape(shape), dtype=dtype), requires_grad=requires_grad)


def ones(*shape, dtype=np.float32, device=None, requires_grad: bool = False) -> Tensor:
    xp = backend.xp_for(device)
    return Tensor(xp.ones(_shape(shape), dtype=dtype), requires_grad=requires_grad)


def full(shape, value, dtype=np.float32, device=None, requires_grad: bool = False) -> Tensor:
    xp = backend.xp_for(device)
    return Tensor(xp.full(tuple(shape), value, dtype=dtype), requires_grad=requires_grad)


def zeros_like(t: Tensor, requires_grad: bool = False) -> Tensor:
    return Tensor(t.xp.zeros_like(t.data), requires_grad=requires_grad)


def ones_like(t: Tensor, requires_grad: bool = False) -> Tensor:
    return Tensor(t.xp.ones_like(t.data), requires_grad=requires_grad)


def arange(start, stop=None, step=1, dtype=None, device=None) -> Tensor:
    """Like numpy.arange; int64 for integer arguments, float32 otherwise."""
    if stop is None:
        start, stop = 0, start
    if dtype is None:
        ints = all(isinstance(v, numbers.Integral) for v in (start, stop, step))
        dtype = np.int64 if ints else np.float32
    xp = backend.xp_for(device)
    return Tensor(xp.arange(start, stop, step, dtype=dtype))


def randn(*shape, dtype=np.float32, device=None, requires_grad: bool = False) -> Tensor:
    """Standard normal samples from the generator seeded by ``manual_seed``."""
    xp = backend.xp_for(device)
    data = generator(xp).standard_normal(_shape(shape), dtype=dtype)
    return Tensor(data, requires_grad=requires_grad)


def rand(*shape, dtype=np.float32, device=None, requires_grad: bool = False) -> Tensor:
    """Uniform [0, 1) samples from the generator seeded by ``manual_seed``."""
    xp = backend.xp_for(device)
    data = generator(xp).random(_shape(shape), dtype=dtype)
    return Tensor(data, requires_grad=requires_grad)


# ----------------------------------------------------------------- an op's arguments as tensors
def as_tensor(x, like: Tensor | None = None) -> Tensor:
    """``x`` as a Tensor; a Python number takes the floating dtype and device of ``like``."""
    if isinstance(x, Tensor):
        return x
    if backend.is_array(x):
        return Tensor._wrap(x)
    if like is None:
        return Tensor(x)
    if isinstance(x, numbers.Number) and not isinstance(x, bool):
        kind = like.data.dtype.kind
        dtype = like.data.dtype if (kind == "f" or isinstance(x, numbers.Integral)) else np.float32
        # why full: on a GPU a kernel writes the number (a copy from the host would be refused in a CUDA graph)
        return Tensor._wrap(like.xp.full((), x, dtype=dtype))
    return Tensor(x, device=like.device)


def as_tensors(a, b) -> tuple:
    """The two operands of a binary op as tensors; a number takes the other one's dtype and device."""
    if isinstance(a, Tensor):
        return a, as_tensor(b, a)
    b = as_tensor(b)
    return as_tensor(a, b), b


def as_mask(m, like: Tensor, op: str) -> Tensor:
    """A bool condition or mask as a tensor on ``like``'s device; any other dtype is refused."""
    m = m if isinstance(m, Tensor) else Tensor._wrap(like.xp.asarray(m))
    if m.dtype != np.bool_:
        raise ShapeError(f"{op}: the condition/mask must be a bool tensor, got dtype {m.dtype}")
    return m


def as_ids(ids, like: Tensor) -> Tensor:
    """Integer ids (an embedding's rows, a loss's targets) as a tensor on ``like``'s device."""
    return ids if isinstance(ids, Tensor) else Tensor._wrap(like.xp.asarray(ids))


__all__ = ["Tensor", "tensor", "zeros", "ones", "full", "zeros_like", "ones_like", "arange", "randn", "rand",
           "as_tensor", "as_tensors", "as_mask", "as_ids"]
