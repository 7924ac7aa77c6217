"""Comparisons, logical not and argmax (minitensor/ops/compare.py): NumPy's results, broadcast,
as tensors without history, the same through Tensor's operators and through F."""
import operator

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import minitensor as mt
import minitensor.functional as F
from minitensor.testing import arrays, broadcastable_shapes

COMPARISONS = {"equal": operator.eq, "not_equal": operator.ne, "less": operator.lt, "less_equal": operator.le,
               "greater": operator.gt, "greater_equal": operator.ge}


@pytest.mark.parametrize("name", sorted(COMPARISONS))
@given(data=st.data())
def test_a_comparison_is_numpys_broadcast_and_has_no_history(name, data):
    sa, sb = data.draw(broadcastable_shapes())
    a = data.draw(arrays(sa, -2, 2).map(np.round))  # rounded: equal entries occur
    b = data.draw(arrays(sb, -2, 2).map(np.round))
    op = COMPARISONS[name]
    x = mt.tensor(a, requires_grad=True)
    for got in (getattr(F, name)(x, mt.tensor(b)), op(x, mt.tensor(b)), op(x, b)):
        assert got.dtype == np.bool_ and not got.requires_grad
        np.testing.assert_array_equal(got.numpy(), op(a, b))


def test_a_number_compares_as_it_is_and_the_first_operand_may_be_an_array():
    x = mt.tensor([1.0, 2.0, 3.0])
    np.testing.assert_array_equal((x == 2).numpy(), [False, True, False])
    np.testing.assert_array_equal(F.less(np.array([1.0, 5.0]), x[:2]).numpy(), [False, False])


def test_logical_not_and_argmax_are_numpys_without_history():
    m = mt.tensor(np.array([[True, False], [False, False]]))
    np.testing.assert_array_equal((~m).numpy(), [[False, True], [True, True]])
    np.testing.assert_array_equal(F.logical_not(m).numpy(), (~m).numpy())
    x = mt.tensor(np.array([[0.1, 3.0, -1.0], [7.0, 0.0, 2.0]]), requires_grad=True)
    assert x.argmax().item() == 3 and not x.argmax().requires_grad
    np.testing.assert_array_equal(x.argmax(axis=1).numpy(), [1, 0])
    np.testing.assert_array_equal(F.argmax(x, axis=0).numpy(), [1, 0, 1])


def test_a_tensor_still_hashes_by_identity():
    a, b = mt.tensor([1.0]), mt.tensor([1.0])
    assert len({a, b}) == 2 and a in {a}


def test_bind_tensor_methods_makes_every_entry_of_the_table_a_tensor_attribute(monkeypatch):
    """functional.bind_tensor_methods (called by minitensor/__init__) binds TENSOR_METHODS onto
    Tensor: an operator removed from Tensor comes back, as the table's own function."""
    monkeypatch.delattr(mt.Tensor, "__lt__")
    assert "__lt__" not in vars(mt.Tensor)
    F.bind_tensor_methods()
    assert all(vars(mt.Tensor)[name] is method for name, method in F.TENSOR_METHODS.items())
    assert (mt.tensor([1.0, 3.0]) < 2).numpy().tolist() == [True, False]
