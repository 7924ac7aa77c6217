"""Exercise 02 (lesson 2) — broadcasting's ``sum_to``, and the engine's operations.

NumPy broadcasts: x of shape (3, 1) plus y of shape (4,) is (3, 4). Each entry of x was used
4 times, so its gradient is the sum of 4 entries of the output's gradient. ``sum_to(grad,
shape)`` does that in general: it sums ``grad`` over the axes that broadcasting added in
front and over the axes where ``shape`` has a 1, and returns an array of ``shape``.

Write:
1. ``sum_to(grad, shape)``.
2. ``MatMul.backward``: z = x @ y, for 2-D matrices and for stacks of them (..., n, k) @
   (..., k, m), where the stacks broadcast like any other axes (a (2, 3, 4, 5) stack times
   one (5, 6) matrix). The gradients are grad @ yᵀ and xᵀ @ grad, each brought back to its
   input's shape with ``sum_to``.

Every other operation below is written for you: read them, they follow the same pattern
(``forward`` keeps what ``backward`` needs; ``backward`` brings each gradient back with
``sum_to``). The last lines give ``Tensor`` its operators (+, −, *, /, @, unary −, indexing)
and methods (sum, mean, reshape, transpose, T, exp, log, relu, masked_fill, and max, which
needs no gradient) on top of exercise 01's; ``concat(tensors, axis)`` joins tensors.

Check by hand: sum_to(np.ones((2, 3, 4)), (3, 1)) is an array of shape (3, 1) full of 8.

Check it with:  python lessons/check.py 02
"""
import numpy as np

from ex01_tensor import Add, Function, Mul, Tensor


def sum_to(grad, shape):
    raise NotImplementedError("exercise 02: write sum_to")


class BroadcastAdd(Add):
    """z = x + y, shapes broadcast."""

    def forward(self, x, y):
        self.shapes = x.shape, y.shape
        return x + y

    def backward(self, grad):
        return sum_to(grad, self.shapes[0]), sum_to(grad, self.shapes[1])


class BroadcastMul(Mul):
    """z = x · y, shapes broadcast."""

    def backward(self, grad):
        return sum_to(grad * self.y, self.x.shape), sum_to(grad * self.x, self.y.shape)


class Sub(Function):
    """z = x − y."""

    def forward(self, x, y):
        self.shapes = x.shape, y.shape
        return x - y

    def backward(self, grad):
        return sum_to(grad, self.shapes[0]), sum_to(-grad, self.shapes[1])


class Div(Function):
    """z = x / y."""

    def forward(self, x, y):
        self.x, self.y = x, y
        return x / y

    def backward(self, grad):
        return sum_to(grad / self.y, self.x.shape), sum_to(-grad * self.x / self.y**2, self.y.shape)


class MatMul(Function):
    """z = x @ y."""

    def forward(self, x, y):
        self.x, self.y = x, y
        return x @ y

    def backward(self, grad):
        raise NotImplementedError("exercise 02: write MatMul.backward")


class Sum(Function):
    """z = the sum of x over ``axis`` (all axes when None)."""

    def forward(self, x, axis=None, keepdims=False):
        self.shape, self.axis, self.keepdims = x.shape, axis, keepdims
        return x.sum(axis=axis, keepdims=keepdims)

    def backward(self, grad):
        if self.axis is not None and not self.keepdims:
            grad = np.expand_dims(grad, self.axis)
        return (np.broadcast_to(grad, self.shape).copy(),)


class Reshape(Function):
    def forward(self, x, shape):
        self.shape = x.shape
        return x.reshape(shape)

    def backward(self, grad):
        return (grad.reshape(self.shape),)


class Transpose(Function):
    """Axes permuted (``axes``) or, when None, the last two swapped."""

    def forward(self, x, axes=None):
        self.axes = axes if axes is not None else tuple(range(x.ndim - 2)) + (x.ndim - 1, x.ndim - 2)
        return x.transpose(self.axes)

    def backward(self, grad):
        return (grad.transpose(np.argsort(self.axes)),)


class Exp(Function):
    def forward(self, x):
        self.out = np.exp(x)
        return self.out

    def backward(self, grad):
        return (grad * self.out,)


class Log(Function):
    def forward(self, x):
        self.x = x
        return np.log(x)

    def backward(self, grad):
        return (grad / self.x,)


class ReLU(Function):
    def forward(self, x):
        self.positive = x > 0
        return np.where(self.positive, x, 0.0).astype(x.dtype)

    def backward(self, grad):
        return (grad * self.positive,)


class MaskedFill(Function):
    """x with ``value`` where ``mask`` (a bool array that broadcasts to x) is True."""

    def forward(self, x, mask, value):
        self.mask = np.broadcast_to(mask, x.shape)
        return np.where(self.mask, np.asarray(value, x.dtype), x)

    def backward(self, grad):
        return (np.where(self.mask, 0.0, grad).astype(grad.dtype),)


class GetItem(Function):
    """x[index], for any NumPy index."""

    def forward(self, x, index):
        self.shape, self.index = x.shape, index
        return x[index]

    def backward(self, grad):
        g = np.zeros(self.shape, grad.dtype)
        np.add.at(g, self.index, grad)
        return (g,)


class Concat(Function):
    """The inputs joined along ``axis``."""

    def forward(self, *xs, axis=0):
        self.axis, self.sizes = axis, [x.shape[axis] for x in xs]
        return np.concatenate(xs, axis=axis)

    def backward(self, grad):
        return tuple(np.split(grad, np.cumsum(self.sizes)[:-1], axis=self.axis))


def concat(tensors, axis=0):
    return Concat.apply(*tensors, axis=axis)


def _binary(fn, reflected=False):
    return (lambda a, b: fn.apply(b, a)) if reflected else (lambda a, b: fn.apply(a, b))


def _mean(x, axis=None, keepdims=False):
    total = x.sum(axis, keepdims)
    return total * (total.data.size / x.data.size)


Tensor.__add__, Tensor.__radd__ = _binary(BroadcastAdd), _binary(BroadcastAdd, True)
Tensor.__mul__, Tensor.__rmul__ = _binary(BroadcastMul), _binary(BroadcastMul, True)
Tensor.__sub__, Tensor.__rsub__ = _binary(Sub), _binary(Sub, True)
Tensor.__truediv__, Tensor.__rtruediv__ = _binary(Div), _binary(Div, True)
Tensor.__matmul__ = _binary(MatMul)
Tensor.__neg__ = lambda self: Sub.apply(Tensor(np.zeros((), self.dtype)), self)
Tensor.__getitem__ = lambda self, index: GetItem.apply(self, index=index)
Tensor.sum = lambda self, axis=None, keepdims=False: Sum.apply(self, axis=axis, keepdims=keepdims)
Tensor.mean = _mean
Tensor.reshape = lambda self, *shape: Reshape.apply(self, shape=shape[0] if len(shape) == 1 else shape)
Tensor.transpose = lambda self, *axes: Transpose.apply(self, axes=axes or None)
Tensor.exp = lambda self: Exp.apply(self)
Tensor.log = lambda self: Log.apply(self)
Tensor.relu = lambda self: ReLU.apply(self)
Tensor.masked_fill = lambda self, mask, value: MaskedFill.apply(self, mask=np.asarray(mask, bool), value=value)
Tensor.max = lambda self, axis=None, keepdims=False: Tensor(self.data.max(axis=axis, keepdims=keepdims))  # no gradient
Tensor.T = property(lambda self: self.transpose())
