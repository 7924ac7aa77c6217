"""The products' routes (minitensor/speed/products.py) compute what their ops compute: Matmul,
Linear (transposed or not, with or without a bias, under autocast) and Linears (some biases
absent, some outputs unused), values and gradients, on each device."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitensor as mt
import minitensor.functional as F
from minitensor import amp, routes
from minitensor.speed import fusions, products


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def both(fn, arrays, device, route=None):
    """[(outputs, input gradients)] of ``fn`` on tensors of ``arrays``, with the routes and
    without; the op's node is ``route`` with them (when given), the op itself without."""
    results = []
    for on in (True, False):
        ts = [mt.tensor(a, requires_grad=True, device=device) for a in arrays]
        with (_nothing() if on else routes.off()):
            ys = fn(*ts)
            ys = ys if isinstance(ys, tuple) else (ys,)
            if route is not None:
                y0 = next(y for y in ys if y is not None)
                node = y0._ctx.edges[0] if y0._ctx.fn.__name__ == "Output" else y0._ctx
                assert (node.fn is route) == on
            total = sum((y.astype(np.float64) * float(i + 1)).sum() for i, y in enumerate(ys) if y is not None)
            total.backward()
        results.append(([mt.backend.to_numpy(y.data).astype(np.float64) for y in ys if y is not None],
                        [None if t.grad is None else mt.backend.to_numpy(t.grad.data) for t in ts]))
    return results


def agree(results, rtol=1e-10, atol=1e-12):
    (y1, g1), (y0, g0) = results
    for a, b in zip(y1 + g1, y0 + g0):
        assert (a is None) == (b is None)
        if a is not None:
            assert a.dtype == b.dtype if hasattr(a, "dtype") else True
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


@given(seed=st.integers(0, 2**16), rows=st.integers(1, 6), n_in=st.integers(1, 5), n_out=st.integers(1, 5),
       transposed=st.booleans(), bias=st.booleans())
@settings(max_examples=20)
def test_linear_route_equals_the_reference(seed, rows, n_in, n_out, transposed, bias, device):
    rng = np.random.default_rng(seed)
    x, w = rng.standard_normal((2, rows, n_in)), rng.standard_normal((n_out, n_in) if transposed else (n_in, n_out))
    arrays = [x, w] + ([rng.standard_normal(n_out)] if bias else [])
    agree(both(lambda x, w, *b: F.linear(x, w, b[0] if b else None, transposed=transposed), arrays, device,
               products.Linear))


@given(seed=st.integers(0, 2**16), n=st.integers(1, 3), biases=st.lists(st.booleans(), min_size=3, max_size=3),
       unused=st.integers(-1, 2))
@settings(max_examples=20)
def test_linears_route_equals_the_reference_with_biases_absent_and_outputs_unused(seed, n, biases, unused, device):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((3, 4, 5))
    ws = [rng.standard_normal((5, 6)) for _ in range(n)]
    bs = [rng.standard_normal(6) if biases[i] else None for i in range(n)]
    given_bs = [b for b in bs if b is not None]

    def fn(x, *params):
        it = iter(params[n:])
        ys = fusions.linears(x, list(params[:n]), [next(it) if b is not None else None for b in bs])
        return tuple(None if i == unused and n > 1 else y for i, y in enumerate(ys))   # one output always used
    agree(both(fn, [x, *ws, *given_bs], device, products.Linears))


@pytest.mark.parametrize("shapes", [((3, 4), (4, 5)), ((2, 3, 4), (4, 2)), ((2, 1, 3, 4), (3, 4, 2))])
def test_matmul_and_attention_routes_equal_the_reference(shapes, device):
    rng = np.random.default_rng(7)
    a, b = (rng.standard_normal(s) for s in shapes)
    agree(both(lambda a, b: a @ b, [a, b], device, products.Matmul if device == "cuda" else None))
    q, k, v = (rng.standard_normal((2, 2, 5, 4)) for _ in range(3))
    with mt.cuda.use_kernels(False):     # the products' route of attention, not a kernel's
        agree(both(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), [q, k, v], device,
                   products.ScaledDotProductAttention if device == "cuda" else None))


def test_linear_under_autocast_keeps_16_bit_outputs_and_float32_gradients_with_the_routes_and_without(device):
    rng = np.random.default_rng(3)
    x, w, b = rng.standard_normal((4, 3)), rng.standard_normal((3, 2)), rng.standard_normal(2)
    for on in (True, False):
        ts = [mt.tensor(a.astype(np.float32), requires_grad=True, device=device) for a in (x, w, b)]
        with (_nothing() if on else routes.off()), amp.autocast("float16"):
            y = F.linear(*ts)
        assert y.dtype == np.float16
        y.astype(np.float32).sum().backward()
        assert ts[1].grad.dtype == np.float32 and ts[2].grad.dtype == np.float32
