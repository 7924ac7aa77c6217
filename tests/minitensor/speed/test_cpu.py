"""Every NumPy route (minitensor/speed/cpu.py) computes what its reference op computes: the same
values and the same gradients, on inputs drawn by hypothesis, with -inf, masked rows, ignored
targets and arrays large enough to be cut into blocks of rows."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitensor as mt
import minitensor.functional as F
from minitensor import routes, threads
from minitensor.speed import cpu
from minitensor.speed import rows as fast


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    """Row blocks of 16 KiB from 4k elements up, so that the drawn arrays are cut into blocks."""
    monkeypatch.setattr(fast, "BLOCK_BYTES", 1 << 14)
    monkeypatch.setattr(fast, "ROWWISE_MIN", 1 << 12)


def both(route, fn, *arrays, seed=0):
    """(outputs, input gradients) of ``fn`` on tensors of ``arrays``, with the routes and without;
    asserts that ``route`` ran with them and its op without."""
    results = []
    for on in (True, False):
        ts = [mt.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
        with (routes.off() if not on else _nothing()):
            y = fn(*ts)
            assert (y._ctx.fn is route) == on
            cot = np.random.default_rng(seed).standard_normal(y.shape).astype(y.dtype)
            y.backward(mt.tensor(cot))
        results.append((y.numpy(), [None if t.grad is None else t.grad.numpy() for t in ts]))
    return results


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def close(got, want, dtype):
    tol = dict(rtol=1e-10, atol=1e-12) if dtype == np.float64 else dict(rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(got, want, **tol)


def agree(results, dtype):
    (y1, g1), (y0, g0) = results
    close(y1, y0, dtype)
    for a, b in zip(g1, g0):
        assert (a is None) == (b is None)
        if a is not None:
            close(a, b, dtype)


def drawn(seed, shape, dtype, scale=3.0, minus_inf=0):
    rng = np.random.default_rng(seed)
    a = (scale * rng.standard_normal(shape)).astype(dtype)
    if minus_inf:
        a.flat[rng.integers(a.size, size=minus_inf)] = -np.inf
    return a


DTYPES = st.sampled_from([np.float32, np.float64])
SHAPES = st.sampled_from([(7,), (3, 5), (2, 3, 70), (4, 33, 40), (2, 1, 1)])


@given(seed=st.integers(0, 2**16), shape=SHAPES, dtype=DTYPES, data=st.data())
def test_softmax_and_log_softmax_routes_equal_the_reference(seed, shape, dtype, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = drawn(seed, shape, dtype)
    agree(both(cpu.Softmax, lambda t: F.softmax(t, axis), x, seed=seed), dtype)
    agree(both(cpu.LogSoftmax, lambda t: F.log_softmax(t, axis), x, seed=seed), dtype)


@given(seed=st.integers(0, 2**16), shape=SHAPES, dtype=DTYPES, keepdims=st.booleans(), data=st.data())
def test_logsumexp_route_equals_the_reference_over_one_axis_several_or_all(seed, shape, dtype, keepdims, data):
    axis = data.draw(st.sampled_from([None, -1, 0, tuple(range(len(shape)))]))
    x = drawn(seed, shape, dtype, minus_inf=1 if x_big(shape) else 0)
    agree(both(cpu.LogSumExp, lambda t: F.logsumexp(t, axis=axis, keepdims=keepdims), x, seed=seed), dtype)


def x_big(shape):
    return int(np.prod(shape)) > 100


@given(seed=st.integers(0, 2**16), dtype=DTYPES, tq=st.integers(1, 9), tk=st.integers(1, 70),
       masked=st.sampled_from(["none", "causal", "a row with no key"]))
def test_attention_route_equals_the_reference_with_masks(seed, dtype, tq, tk, masked):
    q, k, v = (drawn(seed + i, (2, 3, n, 8), dtype, scale=1.0) for i, n in enumerate((tq, tk, tk)))
    mask = None
    if masked != "none":
        mask = np.tril(np.ones((tq, tk), bool))
        if masked == "a row with no key":
            mask[0] = False
    agree(both(cpu.ScaledDotProductAttention,
               lambda a, b, c: F.scaled_dot_product_attention(a, b, c, None if mask is None else mt.tensor(mask)),
               q, k, v, seed=seed), dtype)


@given(seed=st.integers(0, 2**16), shape=SHAPES, dtype=DTYPES, affine=st.sampled_from(["both", "weight", "bias", "none"]))
def test_layer_norm_route_equals_the_reference_with_and_without_weight_and_bias(seed, shape, dtype, affine):
    x = drawn(seed, shape, dtype)
    d = shape[-1]
    w = drawn(seed + 1, (d,), dtype) if affine in ("both", "weight") else None
    b = drawn(seed + 2, (d,), dtype) if affine in ("both", "bias") else None
    given_arrays = [a for a in (x, w, b) if a is not None]

    def fn(*ts):
        it = iter(ts)
        xt = next(it)
        wt = next(it) if w is not None else None
        bt = next(it) if b is not None else None
        return F.layer_norm(xt, wt, bt)

    agree(both(cpu.LayerNorm, fn, *given_arrays, seed=seed), dtype)


@given(seed=st.integers(0, 2**16), dtype=DTYPES, shape=st.sampled_from([(3, 5), (2, 40, 120), (130, 64)]),
       smoothing=st.sampled_from([0.0, 0.1, 1.0]), reduction=st.sampled_from(["mean", "sum", "none"]),
       ignore=st.booleans(), overwrite=st.booleans())
def test_cross_entropy_route_equals_the_reference_by_blocks(seed, dtype, shape, smoothing, reduction, ignore, overwrite):
    rng = np.random.default_rng(seed)
    logits = drawn(seed, shape, dtype, scale=4.0)
    target = rng.integers(0, shape[-1], shape[:-1])
    if ignore:
        target.flat[rng.integers(target.size, size=max(1, target.size // 3))] = 0
    agree(both(cpu.CrossEntropy,
               lambda x, t: F.cross_entropy(x * 1.0 if overwrite else x, t, ignore_index=0 if ignore else None,
                                            label_smoothing=smoothing, reduction=reduction, overwrite=overwrite),
               logits, target, seed=seed), dtype)


@settings(deadline=None, max_examples=25)
@given(shapes=st.lists(st.tuples(st.integers(1, 9), st.integers(1, 9)), min_size=1, max_size=4),
       piece=st.integers(1, 20), workers=st.integers(1, 3), wd=st.sampled_from([0.0, 0.01]),
       scale=st.sampled_from([1.0, 0.3]), transposed=st.booleans())
def test_adam_route_in_pieces_on_worker_threads_equals_the_reference_bit_for_bit(shapes, piece, workers, wd, scale,
                                                                                 transposed, monkeypatch):
    """The route cuts parameters into pieces and shares them among threads; each piece takes the
    reference's arithmetic in its order, so weights and moments match the reference's a parameter
    at a time bit for bit (whatever the piece size, thread count, grad_scale, and a parameter that
    is not contiguous)."""
    monkeypatch.setattr(threads, "PIECE", piece)
    monkeypatch.setenv("MINITENSOR_THREADS", str(workers))
    rng = np.random.default_rng(len(shapes) * 100 + piece)
    start = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    if transposed:
        start[0] = start[0].T  # a view laid out column by column: updated whole
    results, pieces = [], []
    monkeypatch.setattr(cpu, "adam_in_place", lambda *a: pieces.append(a[1].size) or ADAM_IN_PLACE(*a))
    for on in (True, False):
        params = [mt.tensor(a.copy() if not (transposed and i == 0) else a.T.copy().T, requires_grad=True)
                  for i, a in enumerate(start)]
        opt = mt.optim.Adam(params, lr=0.01, betas=(0.9, 0.98), eps=1e-9, weight_decay=wd)
        with (routes.off() if not on else _nothing()):
            for step in range(3):
                for p in params:
                    p.grad = mt.tensor(np.sin(p.numpy() * 3 + step).astype(np.float32))
                opt.step(scale)
        results.append([p.numpy() for p in params] + [s[k] for s in opt.state for k in "mv"])
        if on:  # the route ran, and only with the routes on: every contiguous element once a step
            contiguous = 3 * sum(p.data.size for p in params if p.data.flags.c_contiguous)
            assert sum(pieces) == contiguous
    assert sum(pieces) == contiguous
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


ADAM_IN_PLACE = cpu.adam_in_place

TESTS = {  # each NumPy route and the test above that compares it with its op
    cpu.Softmax: test_softmax_and_log_softmax_routes_equal_the_reference,
    cpu.LogSoftmax: test_softmax_and_log_softmax_routes_equal_the_reference,
    cpu.LogSumExp: test_logsumexp_route_equals_the_reference_over_one_axis_several_or_all,
    cpu.ScaledDotProductAttention: test_attention_route_equals_the_reference_with_masks,
    cpu.LayerNorm: test_layer_norm_route_equals_the_reference_with_and_without_weight_and_bias,
    cpu.CrossEntropy: test_cross_entropy_route_equals_the_reference_by_blocks,
    cpu.Adam: test_adam_route_in_pieces_on_worker_threads_equals_the_reference_bit_for_bit,
}


def test_every_numpy_route_has_its_test_here():
    assert {r.implementation for r in cpu.ROUTES} == set(TESTS)
