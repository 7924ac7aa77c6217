"""Comparisons, logical not and argmax: results without history (bool or integer tensors have
nothing to differentiate), so no Function. An operand that is not a tensor (a number, an
array) is compared as it is."""
from __future__ import annotations

import operator

from ..tensor import Tensor, as_tensor


def _compare(op):
    def compare(a, b) -> Tensor:
        a = as_tensor(a)
        return Tensor._wrap(op(a.data, b.data if isinstance(b, Tensor) else b))
    compare.__name__ = op.__name__.strip("_")
    compare.__doc__ = f"``operator.{compare.__name__}(a, b)`` elementwise, broadcast: a bool tensor without history."
    return compare


equal, not_equal = _compare(operator.eq), _compare(operator.ne)
less, less_equal = _compare(operator.lt), _compare(operator.le)
greater, greater_equal = _compare(operator.gt), _compare(operator.ge)


def logical_not(a) -> Tensor:
    """``~a`` of a bool tensor (bitwise not of an integer one), without history."""
    return Tensor._wrap(~as_tensor(a).data)


def argmax(a, axis: int | None = None) -> Tensor:
    """The index of the largest entry (along ``axis``; of the flattened tensor for None): an
    integer tensor without history."""
    return Tensor._wrap(as_tensor(a).data.argmax(axis=axis))
