"""The Tensor: an n-d array on a device, plus what autograd needs to know about it."""
from __future__ import annotations

import numbers

import numpy as np

from . import backend
from .autograd import GraphError, no_grad, run_backward


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
    if np.dtype(dtype).kind not in "fc":
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

    @property
    def T(self) -> "Tensor":
        return F.transpose(self)

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

    def item(self):
        if self.data.size != 1:
            raise ValueError(f"item() needs a tensor with one element, this one has shape {self.shape}")
        return self.data.reshape(()).item()

    def tolist(self):
        return self.numpy().tolist()

    def to(self, device) -> "Tensor":
        """This tensor on ``device``; differentiable (gradients flow back to the source device)."""
        if backend.device_of(self.data) == backend.normalize_device(device):
            return self
        return F.to_device(self, device)

    def cpu(self) -> "Tensor":
        return self.to("cpu")

    def cuda(self) -> "Tensor":
        return self.to("cuda")

    def astype(self, dtype) -> "Tensor":
        return F.cast(self, dtype)

    def float(self) -> "Tensor":
        return self.astype(np.float32)

    def double(self) -> "Tensor":
        return self.astype(np.float64)

    def detach(self) -> "Tensor":
        """The same data (shared, not copied) with no history and no grad."""
        return Tensor._wrap(self.data)

    # ----------------------------------------------------------------- autograd
    def backward(self, grad=None, retain_graph: bool = False) -> None:
        """Accumulate d(self)/d(leaf) into ``leaf.grad`` for every leaf that requires grad.

        ``grad`` is the cotangent (same shape as self); it may be omitted only for a
        single-element tensor, where it defaults to 1. Without ``retain_graph`` the saved
        arrays are freed, and a second backward through the same graph raises.
        """
        if not self.requires_grad:
            raise GraphError("backward() on a tensor that does not require grad (nothing in its graph does)")
        if grad is None:
            if self.data.size != 1:
                raise GraphError(f"backward() without grad needs a single-element tensor, this one has shape {self.shape}")
            g = self.xp.ones_like(self.data)
        else:
            g = grad.data if isinstance(grad, Tensor) else self.xp.asarray(grad, dtype=self.dtype)
            if g.shape != self.data.shape:
                raise GraphError(f"backward(): grad has shape {tuple(g.shape)} but the tensor has shape {self.shape}")
            if backend.device_of(g) != self.device:
                raise backend.DeviceError("backward(): grad is on a different device from the tensor")
        run_backward(self, g, retain_graph=retain_graph)

    def zero_grad(self) -> None:
        self.grad = None

    # ----------------------------------------------------------------- operators
    def __add__(self, other):
        return F.add(self, other)

    def __radd__(self, other):
        return F.add(other, self)

    def __sub__(self, other):
        return F.sub(self, other)

    def __rsub__(self, other):
        return F.sub(other, self)

    def __mul__(self, other):
        return F.mul(self, other)

    def __rmul__(self, other):
        return F.mul(other, self)

    def __truediv__(self, other):
        return F.div(self, other)

    def __rtruediv__(self, other):
        return F.div(other, self)

    def __pow__(self, other):
        return F.pow(self, other)

    def __rpow__(self, other):
        return F.pow(other, self)

    def __matmul__(self, other):
        return F.matmul(self, other)

    def __rmatmul__(self, other):
        return F.matmul(other, self)

    def __neg__(self):
        return F.neg(self)

    def __getitem__(self, index):
        return F.getitem(self, index)

    # comparisons give bool tensors without history
    def _compare(self, other, op):
        o = other.data if isinstance(other, Tensor) else other
        return Tensor._wrap(op(self.data, o))

    def __eq__(self, other):  # noqa: D105
        return self._compare(other, lambda a, b: a == b)

    def __ne__(self, other):  # noqa: D105
        return self._compare(other, lambda a, b: a != b)

    def __lt__(self, other):
        return self._compare(other, lambda a, b: a < b)

    def __le__(self, other):
        return self._compare(other, lambda a, b: a <= b)

    def __gt__(self, other):
        return self._compare(other, lambda a, b: a > b)

    def __ge__(self, other):
        return self._compare(other, lambda a, b: a >= b)

    def __invert__(self):
        return Tensor._wrap(~self.data)

    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        if self.data.size != 1:
            raise ValueError(f"the truth value of a tensor with shape {self.shape} is ambiguous")
        return bool(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    # ----------------------------------------------------------------- methods
    def sum(self, axis=None, keepdims: bool = False):
        return F.sum(self, axis=axis, keepdims=keepdims)

    def mean(self, axis=None, keepdims: bool = False):
        return F.mean(self, axis=axis, keepdims=keepdims)

    def max(self, axis=None, keepdims: bool = False):
        return F.max(self, axis=axis, keepdims=keepdims)

    def reshape(self, *shape):
        return F.reshape(self, shape[0] if len(shape) == 1 and not isinstance(shape[0], numbers.Integral) else shape)

    def view(self, *shape):
        return self.reshape(*shape)

    def transpose(self, *axes):
        return F.transpose(self, *axes)

    def permute(self, *axes):
        return F.permute(self, *axes)

    def broadcast_to(self, shape):
        return F.broadcast_to(self, shape)

    def exp(self):
        return F.exp(self)

    def log(self):
        return F.log(self)

    def sqrt(self):
        return F.sqrt(self)

    def tanh(self):
        return F.tanh(self)

    def relu(self):
        return F.relu(self)

    def sigmoid(self):
        return F.sigmoid(self)

    def softmax(self, axis: int = -1):
        return F.softmax(self, axis=axis)

    def log_softmax(self, axis: int = -1):
        return F.log_softmax(self, axis=axis)

    def logsumexp(self, axis=None, keepdims: bool = False):
        return F.logsumexp(self, axis=axis, keepdims=keepdims)

    def masked_fill(self, mask, value):
        return F.masked_fill(self, mask, value)

    def split(self, sections, axis: int = 0):
        return F.split(self, sections, axis=axis)

    def argmax(self, axis=None):
        return Tensor._wrap(self.data.argmax(axis=axis))


# ----------------------------------------------------------------- creation
def tensor(data, requires_grad: bool = False, dtype=None, device=None) -> Tensor:
    """A new leaf tensor from a number, nested list, numpy/cupy array or Tensor.

    dtype: float32 for Python floats, int64 for Python ints, bool for bools; an array
    keeps its dtype. device: the array's device, or ``"cpu"`` for Python data.
    """
    return Tensor(data, requires_grad=requires_grad, dtype=dtype, device=device)


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
    from .random import generator  # noqa: PLC0415

    xp = backend.xp_for(device)
    data = generator(xp).standard_normal(_shape(shape), dtype=dtype)
    return Tensor(data, requires_grad=requires_grad)


def rand(*shape, dtype=np.float32, device=None, requires_grad: bool = False) -> Tensor:
    """Uniform [0, 1) samples from the generator seeded by ``manual_seed``."""
    from .random import generator  # noqa: PLC0415

    xp = backend.xp_for(device)
    data = generator(xp).random(_shape(shape), dtype=dtype)
    return Tensor(data, requires_grad=requires_grad)


from . import functional as F  # noqa: E402  (functional needs Tensor defined first)

__all__ = ["Tensor", "tensor", "zeros", "ones", "full", "zeros_like", "ones_like", "arange", "randn", "rand", "no_grad"]
