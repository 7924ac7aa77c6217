"""A tensor and other libraries' arrays (minitensor/tensor.py): ``np.asarray`` through
``__array__`` (NumPy 2's ``copy`` argument honoured), DLPack both ways (``__dlpack__``,
``__dlpack_device__``, ``mt.from_dlpack``), sharing memory wherever no copy was asked for."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import minitensor as mt
from tests.helpers import torch_or_skip

NUMPY_2 = int(np.__version__.split(".")[0]) >= 2


def arrays(dtypes):
    """Arrays of up to three axes of the ``dtypes``, some of them transposed views (strided)."""
    base = hnp.arrays(st.sampled_from(dtypes), hnp.array_shapes(min_dims=0, max_dims=3, max_side=5))
    return st.tuples(base, st.booleans()).map(lambda ab: ab[0].T if ab[1] else ab[0])


@given(arrays(dtypes=(np.float32, np.float64, np.int64)))
@settings(max_examples=25, deadline=None)
def test_np_asarray_is_the_tensor_s_own_memory_not_an_object_array(a):
    t = mt.tensor(a)
    out = np.asarray(t)
    assert out.dtype == a.dtype and out.shape == a.shape  # (it was an object array of 0-d tensors)
    assert np.shares_memory(out, t.data)
    np.testing.assert_array_equal(out, a)


def test_np_array_copies_and_a_new_dtype_copies_and_copy_false_refuses_a_conversion():
    t = mt.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    copied = np.array(t)  # np.array copies by default
    assert not np.shares_memory(copied, t.data)
    as64 = np.asarray(t, dtype=np.float64)
    assert as64.dtype == np.float64 and not np.shares_memory(as64, t.data)
    assert np.shares_memory(np.asarray(t, dtype=np.float32), t.data)
    if NUMPY_2:
        assert np.shares_memory(np.asarray(t, copy=False), t.data)
        with pytest.raises(ValueError, match="copy=False"):
            np.asarray(t, dtype=np.float64, copy=False)
        assert not np.shares_memory(np.asarray(t, copy=True), t.data)


def test_a_tensor_with_history_gives_its_values_without_history():
    x = mt.tensor(np.ones((2, 2), np.float32), requires_grad=True)
    y = x * 3
    np.testing.assert_array_equal(np.asarray(y), np.full((2, 2), 3, np.float32))
    assert y.requires_grad  # the tensor itself is untouched


@given(arrays(dtypes=(np.float32, np.float64, np.int32, np.int64, np.bool_)))
@settings(max_examples=25, deadline=None)
def test_dlpack_round_trip_with_numpy_shares_memory_both_ways(a):
    t = mt.from_dlpack(a)
    assert isinstance(t, mt.Tensor) and t.device == "cpu" and not t.requires_grad
    assert t.data.dtype == a.dtype and t.shape == a.shape and np.shares_memory(t.data, a)
    back = np.from_dlpack(t)
    assert np.shares_memory(back, a)
    np.testing.assert_array_equal(back, a)


def test_from_dlpack_sees_writes_through_the_other_library():
    a = np.zeros(4, np.float32)
    t = mt.from_dlpack(a)
    a[2] = 5.0
    assert t.tolist() == [0.0, 0.0, 5.0, 0.0]


def test_from_dlpack_refuses_what_does_not_export_dlpack():
    with pytest.raises(TypeError, match="DLPack"):
        mt.from_dlpack([1.0, 2.0])


@given(st.sampled_from([np.float32, np.float64, np.int64]), st.integers(1, 4), st.integers(1, 5))
@settings(max_examples=15, deadline=None)
def test_pytorch_takes_a_tensor_and_gives_one_back_without_a_copy(dtype, rows, cols):
    torch = torch_or_skip()
    t = mt.tensor(np.arange(rows * cols).reshape(rows, cols).astype(dtype))
    pt = torch.from_dlpack(t)
    assert tuple(pt.shape) == t.shape and pt.data_ptr() == t.data.ctypes.data
    pt.add_(1)  # a write in PyTorch is seen by minitensor
    np.testing.assert_array_equal(t.numpy(), np.arange(rows * cols).reshape(rows, cols).astype(dtype) + 1)
    back = mt.from_dlpack(pt)
    assert back.data.ctypes.data == pt.data_ptr()


@pytest.mark.gpu
@pytest.mark.hardware("CuPy's DLPack exchange of device memory")
def test_cupy_and_a_cuda_tensor_share_device_memory():
    cp = pytest.importorskip("cupy")
    t = mt.tensor(np.arange(6, dtype=np.float32), device="cuda")
    c = cp.from_dlpack(t)
    assert c.data.ptr == t.data.data.ptr
    back = mt.from_dlpack(c)
    assert back.device == "cuda" and back.data.data.ptr == c.data.ptr
    with pytest.raises(TypeError, match=r"\.numpy\(\)"):
        np.asarray(t)
