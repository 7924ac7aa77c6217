"""Shape ops (minitensor/ops/shape.py): reshape, permute, transpose, indexing, concat, stack, split
and broadcast_to; forward equals NumPy, gradients pass gradcheck."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import minitensor as mt
import minitensor.functional as F
from minitensor.testing import arrays, broadcastable_shapes, shapes

from ...helpers import close, leaf


@given(data=st.data())
def test_reshape_roundtrips_and_gradcheck(data, device):
    x = data.draw(arrays(shapes(max_dims=3)))
    target = data.draw(st.sampled_from([(-1,), (1, x.size), tuple(reversed(x.shape)), (x.size, 1, 1)]))
    t = leaf(x, device)
    close(t.reshape(target), x.reshape(target))
    assert mt.gradcheck(lambda u: F.reshape(u, target), [t])


@given(data=st.data())
def test_permute_matches_numpy_transpose_and_gradcheck(data, device):
    x = data.draw(arrays(shapes(min_dims=1, max_dims=4)))
    perm = tuple(data.draw(st.permutations(range(x.ndim))))
    t = leaf(x, device)
    close(F.permute(t, *perm), np.transpose(x, perm))
    assert mt.gradcheck(lambda u: F.permute(u, perm), [t])


def test_transpose_swaps_two_axes_or_reverses_all():
    x = np.arange(24.0).reshape(2, 3, 4)
    t = leaf(x)
    close(F.transpose(t, 0, 2), np.swapaxes(x, 0, 2))
    close(F.transpose(t, -1, -2), np.swapaxes(x, -1, -2))
    close(t.transpose(), x.T)
    close(t.T, x.T)
    assert mt.gradcheck(lambda u: F.transpose(u, 1, 2), [t])


INDEXES = [
    1,
    -1,
    slice(1, None),
    (slice(None), 0),
    (Ellipsis, slice(None, None, 2)),
    (None, 0),
    np.array([0, 2, 0, 0]),                # repeats: their gradients add up
    np.array([2, -1, 0, -3, 2]),           # a row gather where -1 is row 2 and -3 row 0
    (np.array([1, 0]), np.array([2, 2])),  # pairs of coordinates
    (slice(None), [0, 0, 1]),              # a list, with repeats
]


@pytest.mark.parametrize("index", INDEXES, ids=repr)
def test_getitem_matches_numpy_and_gradcheck(index, device):
    x = np.random.default_rng(1).standard_normal((3, 4))
    t = leaf(x, device)
    np_index = tuple(np.asarray(i) if isinstance(i, list) else i for i in index) if isinstance(index, tuple) else index
    close(t[index], x[np_index])
    close(F.getitem(t, index), x[np_index])
    assert mt.gradcheck(lambda u: u[index], [t])


def test_getitem_with_repeated_ids_accumulates_gradient():
    t = leaf([1.0, 2.0, 3.0])
    t[np.array([0, 0, 2, 0])].sum().backward()
    close(t.grad, [3.0, 0.0, 1.0])


@given(data=st.data())
def test_a_row_gather_sends_each_row_the_sum_of_its_picks(data):
    n = data.draw(st.integers(1, 5))
    tail = data.draw(shapes(min_dims=0, max_dims=2))
    ids = np.array(data.draw(st.lists(st.integers(-n, n - 1), min_size=1, max_size=8)))
    x = np.random.default_rng(0).standard_normal((n,) + tail)
    g = np.random.default_rng(1).standard_normal((len(ids),) + tail)
    t = leaf(x)
    (t[ids] * mt.tensor(g)).sum().backward()
    expected = np.zeros_like(x)
    np.add.at(expected, ids, g)  # the unbuffered reference
    close(t.grad, expected)


def test_getitem_with_bool_mask_and_tensor_index(device):
    x = np.arange(6.0).reshape(2, 3)
    t = leaf(x, device)
    m = x > 2
    close(t[mt.tensor(m, device=device)], x[m])
    assert mt.gradcheck(lambda u: u[mt.tensor(m, device=device)], [t])
    close(t[mt.tensor(np.array([1, 1]), device=device)], x[[1, 1]])


@given(data=st.data())
def test_concat_and_stack_match_numpy_and_gradcheck(data, device):
    base = data.draw(shapes(min_dims=1, max_dims=3))
    axis = data.draw(st.integers(0, len(base) - 1))
    sizes = data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    parts = [data.draw(arrays(base[:axis] + (n,) + base[axis + 1:])) for n in sizes]
    ts = [leaf(p, device) for p in parts]
    close(F.concat(ts, axis=axis), np.concatenate(parts, axis=axis))
    assert mt.gradcheck(lambda *u: F.concat(u, axis=axis), ts)
    same = [data.draw(arrays(base)) for _ in sizes]
    ss = [leaf(p, device) for p in same]
    close(F.stack(ss, axis=axis), np.stack(same, axis=axis))
    assert mt.gradcheck(lambda *u: F.stack(u, axis=axis), ss)


def test_split_into_equal_parts_and_by_sizes(device):
    x = np.arange(12.0).reshape(2, 6)
    t = leaf(x, device)
    a, b, c = F.split(t, 3, axis=1)
    close(b, x[:, 2:4])
    p, q = t.split([1, 5], axis=1)
    close(q, x[:, 1:])
    assert mt.gradcheck(lambda u: F.split(u, [4, 2], axis=1)[0] * 2 + 0, [t])
    assert mt.gradcheck(lambda u: F.concat(F.split(u, 2, axis=1)[::-1], axis=1), [t])


@given(data=st.data())
def test_broadcast_to_matches_numpy_and_gradcheck(data, device):
    sx, so = data.draw(broadcastable_shapes(2))
    target = np.broadcast_shapes(sx, so)
    x = data.draw(arrays(sx))
    t = leaf(x, device)
    close(F.broadcast_to(t, target), np.broadcast_to(x, target))
    assert mt.gradcheck(lambda u: F.broadcast_to(u, target), [t])
