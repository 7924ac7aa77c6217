"""The row passes give what their references give: ``rowwise`` runs a row-wise function block by
block on every core with the results of one call on the whole array (softmax's exp-normalise
step, and cross entropy, the op that goes through it), whatever the number of threads."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import minitensor as mt
import minitensor.functional as F
from minitensor import threads
from minitensor.speed import rows as fast
from minitensor.speed.cpu import exp_normalise
from minitensor.speed.rows import max_last, rowwise

# shapes whose arrays are cut into several blocks (at the small block size the tests set):
# long rows (a translation model's logits), middling (a model's width) and short ones
# (attention's keys)
BIG = [(3, 70, 600), (2, 210, 96), (5, 4, 30, 37)]


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    """Blocks of 16 KiB from 16k elements up: the tests' arrays stay small and still make many blocks."""
    monkeypatch.setattr(fast, "BLOCK_BYTES", 1 << 14)
    monkeypatch.setattr(fast, "ROWWISE_MIN", 1 << 14)


def whole(monkeypatch):
    """Make every rowwise call run its function on the whole array, in the calling thread."""
    monkeypatch.setattr(fast, "ROWWISE_MIN", 1 << 62)


def blocks_of(shape, itemsize=4):
    per = max(1, fast.BLOCK_BYTES // (shape[-1] * itemsize))
    return -(-int(np.prod(shape[:-1])) // per)


@pytest.mark.parametrize("shape", BIG)
def test_exp_normalise_by_blocks_equals_the_whole_array_pass(shape, monkeypatch):
    x = np.random.default_rng(0).standard_normal(shape, dtype=np.float32) * 5
    x[0, 0] = -np.inf  # a row with nothing allowed keeps e = 0, s = 0
    assert x.size >= fast.ROWWISE_MIN and blocks_of(shape) > 2
    e, s, m = rowwise(exp_normalise, np, x.copy(), axis=-1)
    e0, s0, m0 = exp_normalise(np, x.copy(), -1)
    np.testing.assert_array_equal(e, e0)
    np.testing.assert_array_equal(m, m0)
    np.testing.assert_allclose(s, s0, rtol=1e-6)
    assert e.shape == shape and s.shape == m.shape == shape[:-1] + (1,)
    y = x.copy()
    e2, _, _ = rowwise(exp_normalise, np, y, axis=-1, overwrite=True, into={0: y})
    assert np.shares_memory(e2, y) and np.array_equal(e2, e)   # ``into``: e written over x


@pytest.mark.parametrize("shape", BIG)
def test_cross_entropy_by_blocks_equals_its_whole_array_result_forward_and_backward(shape, monkeypatch):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape, dtype=np.float32)
    target = rng.integers(0, shape[-1], shape[:-1])

    def run():
        out = {}
        for eps in (0.0, 0.1):
            t = mt.tensor(x.copy(), requires_grad=True)
            loss = F.cross_entropy(t, mt.tensor(target), label_smoothing=eps, reduction="sum")
            loss.backward()
            out[f"cross_entropy, smoothing {eps}"] = (loss.numpy(), t.grad.numpy())
        return out

    blocked = run()
    whole(monkeypatch)
    reference = run()
    for name in reference:
        for a, r in zip(blocked[name], reference[name]):
            np.testing.assert_allclose(a, r, rtol=2e-5, atol=2e-6, err_msg=name)


def test_the_results_do_not_depend_on_the_number_of_threads(monkeypatch):
    x = np.random.default_rng(3).standard_normal((4, 90, 257), dtype=np.float32)
    monkeypatch.setenv("MINITENSOR_THREADS", "1")
    one = rowwise(exp_normalise, np, x.copy(), axis=-1)
    monkeypatch.setenv("MINITENSOR_THREADS", "3")
    three = rowwise(exp_normalise, np, x.copy(), axis=-1)
    for a, b in zip(one, three):
        np.testing.assert_array_equal(a, b)
    assert threads.count() == 3


def test_rowwise_cuts_the_positional_arrays_and_passes_the_keywords_whole():
    seen = []

    def fn(xp, x, y, scale):
        seen.append((x.shape[0], y.shape, scale.shape))
        return x * scale + y, (x + y).sum(-1, keepdims=True)

    x = np.ones((70, 300), np.float32)
    y = np.full((70, 1), 2.0, np.float32)
    scale = np.arange(300, dtype=np.float32)        # (300,) beside 300-wide rows: whole, never cut
    out, sums = rowwise(fn, np, x, y, scale=scale)
    assert len(seen) == blocks_of(x.shape) > 1 and sum(n for n, _, _ in seen) == 70
    assert all(s == (300,) for _, _, s in seen)
    np.testing.assert_array_equal(out, x * scale + y)
    np.testing.assert_array_equal(sums, np.full((70, 1), 900.0))
    with pytest.raises(ValueError, match="does not start with the rows"):
        rowwise(fn, np, x, np.ones((69, 1), np.float32), scale=scale)


def test_small_arrays_and_calls_from_inside_a_block_run_the_function_as_it_is():
    calls = []

    def inner(xp, x):
        calls.append(x.shape)
        return x + 1

    def outer(xp, x):
        return rowwise(inner, xp, x)  # nested: runs on the block it is given

    rowwise(inner, np, np.zeros((10, 10)))
    assert calls == [(10, 10)]
    calls.clear()
    rowwise(outer, np, np.zeros((100, 300), np.float32))
    assert len(calls) == blocks_of((100, 300)) and all(c[0] < 100 for c in calls)


def test_the_real_block_size_cuts_a_logits_sized_array_and_keeps_every_row_exact(monkeypatch):
    monkeypatch.undo()  # the library's own BLOCK_BYTES and ROWWISE_MIN
    x = np.random.default_rng(5).standard_normal((1100, 1000), dtype=np.float32)
    assert x.size >= fast.ROWWISE_MIN and blocks_of(x.shape) > 2
    e, s, m = rowwise(exp_normalise, np, x.copy(), axis=-1)
    e0, s0, m0 = exp_normalise(np, x.copy(), -1)
    np.testing.assert_array_equal(e, e0)
    np.testing.assert_allclose(s, s0, rtol=1e-6)


@given(n=st.integers(1, 3 * 64), rows=st.integers(1, 40), dtype=st.sampled_from([np.float32, np.float64]),
       specials=st.lists(st.sampled_from([np.inf, -np.inf, np.nan]), max_size=3), seed=st.integers(0, 2**16))
def test_max_last_is_numpys_max_for_short_and_long_rows_with_inf_and_nan(n, rows, dtype, specials, seed):
    """The column-folding max of short rows (and the plain max of long ones) gives exactly
    np.max over the last axis, NaN propagating and ±inf kept, on contiguous and strided rows."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((rows, 2, n)).astype(dtype)
    for s in specials:
        a.flat[rng.integers(a.size)] = s
    for view in (a, a[:, ::-1], a.transpose(1, 0, 2)):
        got, want = max_last(np, view), np.max(view, axis=-1, keepdims=True)
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
