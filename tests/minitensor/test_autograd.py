"""The autograd engine: graph shapes, accumulation, freeing, no_grad, detach, devices."""
import sys

import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F
from minitensor.speed import fusions

from ..helpers import close, leaf


def test_diamond_graph_sums_both_paths():
    # y = a*b + a*c uses `a` twice: dy/da = b + c
    a, b, c = leaf([2.0]), leaf([3.0]), leaf([5.0])
    (a * b + a * c).backward(mt.tensor(np.ones(1)))
    close(a.grad, [8.0])
    close(b.grad, [2.0])
    close(c.grad, [2.0])


def test_value_reused_in_one_op_gets_double_gradient():
    x = leaf([3.0])
    (x * x).sum().backward()
    close(x.grad, [6.0])


def test_intermediate_used_by_two_branches_accumulates_before_propagating():
    x = leaf([1.5])
    h = x.exp()                 # h feeds two consumers
    y = h * 2 + h.log()         # dy/dx = 2e^x + 1
    y.sum().backward()
    close(x.grad, [2 * np.exp(1.5) + 1])


def test_ten_thousand_deep_chain_has_no_recursion_error():
    limit = sys.getrecursionlimit()
    x = leaf([1.0])
    y = x
    for _ in range(10_000):
        y = y * 1.0001
    assert 10_000 > limit  # deeper than Python's recursion limit
    y.sum().backward()
    close(x.grad, [1.0001**10_000], rtol=1e-9)


def test_second_backward_through_freed_graph_raises_clear_error():
    x = leaf([2.0])
    y = (x * x).sum()
    y.backward()
    with pytest.raises(mt.GraphError, match="retain_graph=True"):
        y.backward()


def test_retain_graph_allows_repeated_backward_and_gradients_add():
    x = leaf([2.0])
    y = (x * x * x).sum()
    y.backward(retain_graph=True)
    close(x.grad, [12.0])
    y.backward()
    close(x.grad, [24.0])


def test_reusing_part_of_a_freed_graph_raises():
    x = leaf([2.0])
    h = x.exp()
    (h * 3).sum().backward()
    with pytest.raises(mt.GraphError):
        (h * 4).sum().backward()


def test_grads_accumulate_across_backward_calls_until_zero_grad():
    lin = mt.nn.Linear(3, 2)
    x = mt.tensor(np.ones((4, 3), np.float32))
    lin(x).sum().backward()
    g1 = lin.weight.grad.numpy().copy()
    lin(x).sum().backward()
    close(lin.weight.grad, 2 * g1, atol=1e-6)
    lin.zero_grad()
    assert lin.weight.grad is None
    lin(x).sum().backward()
    close(lin.weight.grad, g1, atol=1e-6)


def test_no_grad_records_nothing():
    x = leaf([1.0, 2.0])
    with mt.no_grad():
        y = (x * 2).exp().sum()
    assert y.requires_grad is False and y._ctx is None
    with pytest.raises(mt.GraphError):
        y.backward()

    @mt.no_grad()
    def f(t):
        return t * 3

    assert f(x)._ctx is None
    assert (x * 3)._ctx is not None  # recording is back on afterwards


def test_no_grad_is_thread_local():
    import threading

    seen = []
    with mt.no_grad():
        th = threading.Thread(target=lambda: seen.append(mt.is_grad_enabled()))
        th.start()
        th.join()
    assert seen == [True]


def test_detach_shares_data_and_stops_gradient():
    x = leaf([1.0, 2.0])
    d = (x * 2).detach()
    assert d.requires_grad is False and d._ctx is None
    y = (x * d).sum()
    y.backward()
    close(x.grad, [2.0, 4.0])  # d is a constant: no second term


def test_from_array_wraps_the_array_itself_and_refuses_other_data():
    """mt.from_array shares the array (a write shows through), keeps its dtype and records no
    history; data that is not an array goes to mt.tensor instead."""
    a = np.arange(4, dtype=np.float16)
    t = mt.from_array(a)
    a[0] = 7
    assert t.data is a and t.numpy()[0] == 7 and t.dtype == np.float16
    assert not t.requires_grad and t.is_leaf
    with pytest.raises(TypeError, match="minitensor.tensor"):
        mt.from_array([1.0, 2.0])


def test_leaf_grad_is_a_private_copy_not_an_alias():
    # y = a + b hands the same gradient array to both; scaling one must not touch the other
    a, b = leaf([1.0]), leaf([2.0])
    (a + b).backward(mt.tensor(np.ones(1)))
    a.grad.data *= 10
    close(b.grad, [1.0])


def test_only_inputs_that_require_grad_get_gradients():
    a, b = leaf([1.0]), leaf([2.0], grad=False)
    (a * b).sum().backward()
    close(a.grad, [2.0])
    assert b.grad is None


def test_backward_of_non_scalar_needs_explicit_grad():
    x = leaf([1.0, 2.0])
    with pytest.raises(mt.GraphError, match="single-element"):
        (x * 2).backward()
    with pytest.raises(mt.GraphError, match="shape"):
        (x * 2).backward(mt.tensor(np.ones(3)))


def test_backward_on_tensor_without_grad_raises():
    with pytest.raises(mt.GraphError, match="does not require grad"):
        mt.tensor([1.0]).backward()


def test_integer_tensor_cannot_require_grad():
    with pytest.raises(TypeError, match="floating-point"):
        mt.tensor([1, 2, 3], requires_grad=True)
    t = mt.tensor([1, 2])
    with pytest.raises(TypeError, match="floating-point"):
        t.requires_grad = True


def test_dtype_policy():
    assert mt.tensor(1.5).dtype == np.float32
    assert mt.tensor([1.0, 2.0]).dtype == np.float32
    assert mt.tensor([1, 2]).dtype == np.int64
    assert mt.tensor([True, False]).dtype == np.bool_
    assert mt.tensor(np.zeros(2, np.float64)).dtype == np.float64  # arrays keep their dtype
    assert mt.tensor([1, 2], dtype=np.float32).dtype == np.float32
    assert mt.zeros(2, 3).shape == (2, 3) and mt.ones((2,)).dtype == np.float32
    assert mt.arange(4).dtype == np.int64 and mt.arange(0.0, 1.0, 0.25).shape == (4,)


def test_manual_seed_makes_randn_reproducible():
    mt.manual_seed(7)
    a = mt.randn(3, 4).numpy()
    mt.manual_seed(7)
    close(mt.randn(3, 4), a)
    state = mt.get_rng_state()
    b = mt.rand(5).numpy()
    mt.set_rng_state(state)
    close(mt.rand(5), b)


def test_tensor_basics():
    t = mt.tensor(np.arange(6.0).reshape(2, 3))
    assert t.shape == (2, 3) and t.ndim == 2 and t.device == "cpu" and len(t) == 2
    assert mt.tensor([[4.0]]).item() == 4.0
    assert "tensor(" in repr(t)
    assert (t > 2).dtype == np.bool_
    with pytest.raises(ValueError, match="one element"):
        t.item()


def test_unknown_device_is_rejected():
    with pytest.raises(mt.DeviceError, match="unknown device"):
        mt.tensor([1.0], device="tpu")


@pytest.mark.skipif(mt.cuda.is_available(), reason="a GPU is present")
def test_cuda_without_gpu_or_cupy_says_how_to_get_it():
    with pytest.raises(mt.DeviceError, match="cuda"):
        mt.tensor([1.0], device="cuda")
    with pytest.raises(mt.DeviceError):
        mt.tensor([1.0]).to("cuda")
    assert mt.cuda.is_available() is False


@pytest.mark.gpu
def test_mixing_devices_in_one_op_raises():
    a = mt.tensor([1.0])
    b = mt.tensor([1.0], device="cuda")
    with pytest.raises(mt.DeviceError, match="different devices"):
        F.add(a, b)


@pytest.mark.gpu
def test_to_device_is_differentiable():
    x = leaf([1.0, 2.0])
    y = (x.to("cuda") * 3).sum()
    y.backward()
    assert x.grad.device == "cpu"
    close(x.grad, [3.0, 3.0])


def test_to_device_on_the_same_device_keeps_values_and_gradients():
    x = leaf([1.0, 2.0])
    y = F.to_device(x, "cpu")
    close(y, [1.0, 2.0])
    (y * 2).sum().backward()
    close(x.grad, [2.0, 2.0])
    assert x.to("cpu") is x  # Tensor.to is a no-op when already there


def test_a_weight_used_twice_gets_the_sum_of_both_gradients_without_disturbing_pending_ones():
    """The second gradient of a leaf is added in place into the array the first one left, but
    not when that array is still waiting to flow into another node. In L + (exp(M) + L·d) both
    Adds hand one array G to each side: L keeps G, exp(M)'s node is still to receive G when
    L·d's gradient reaches L, and adding that into G would change what exp(M) gets."""
    rng = np.random.default_rng(0)
    L, M = leaf(rng.standard_normal((2, 3))), leaf(rng.standard_normal((2, 3)))
    c, d = rng.standard_normal((2, 3)), rng.standard_normal((2, 3))
    for build in (lambda: ((L + (M.exp() + L * mt.tensor(d))) * mt.tensor(c)).sum(),
                  lambda: ((L + (L * mt.tensor(d) + M.exp())) * mt.tensor(c)).sum(),
                  lambda: ((L + M.exp()) * mt.tensor(c) + L * mt.tensor(c * d)).sum()):
        L.grad = M.grad = None
        build().backward()
        close(L.grad, c + c * d)
        close(M.grad, c * np.exp(M.numpy()))


def test_tied_weight_gradient_is_the_sum_and_is_stored_in_the_weights_layout():
    """h Eᵀ and E[ids] share E (the tied embedding): E's gradient is Gᵀh plus the scattered
    rows, in either order of the two uses; and what is stored is laid out like E (row-major),
    not the projection's transposed view, so later adds and the optimizer's passes are contiguous."""
    rng = np.random.default_rng(1)
    E = leaf(rng.standard_normal((7, 4)))
    h = leaf(rng.standard_normal((5, 4)))
    ids = np.array([1, 3, 1, 6])
    G, R = rng.standard_normal((5, 7)), rng.standard_normal((4, 4))
    expected = G.T @ h.numpy()
    np.add.at(expected, ids, R)
    projection = lambda: (F.linear(h, E.T) * mt.tensor(G)).sum()  # noqa: E731
    lookup = lambda: (F.embedding(mt.tensor(ids), E) * mt.tensor(R)).sum()  # noqa: E731
    for first, second in ((projection, lookup), (lookup, projection)):
        E.grad = h.grad = None
        (first() + second()).backward()
        close(E.grad, expected)
        close(h.grad, G @ E.numpy())
    E.grad = None
    projection().backward()
    close(E.grad, G.T @ h.numpy())
    assert E.grad.data.flags.c_contiguous


def test_a_gradient_from_an_earlier_backward_is_not_written_into():
    """Micro-batches: the second backward adds into a new array, so an array the caller took
    from .grad after the first backward keeps its values."""
    w = leaf([[1.0, 2.0], [3.0, 4.0]])
    (w * w).sum().backward()
    first = w.grad.data
    kept = first.copy()
    (w * 3).sum().backward()
    np.testing.assert_array_equal(first, kept)
    close(w.grad, 2 * w.numpy() + 3)


def test_a_zero_dimensional_leaf_used_three_times_gets_all_three_gradients():
    """0-d arrays multiply into NumPy scalars, which have no in-place add: the third gradient
    of a scalar leaf must still be counted (lesson 1's scalar graphs)."""
    x = mt.tensor(2.0, dtype=np.float64, requires_grad=True)
    (x * x + x * 3.0 + (x * -1.0).tanh()).backward()
    close(x.grad, 2 * 2.0 + 3.0 - (1 - np.tanh(-2.0) ** 2))


def test_a_gradient_made_for_one_leaf_alone_is_kept_without_a_copy_and_shared_ones_are_copied():
    """What an op's backward makes for one leaf only (a fresh, C-contiguous array of the leaf's
    dtype) becomes that leaf's .grad as it is; the gradient it was handed, one array returned
    for two leaves, a view, and anything a retained graph still holds are copied first."""
    from minitensor.autograd import Function

    made, handed = [], []

    class Scale(Function):  # y = x * w for a vector x and a scalar-per-entry weight w
        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(x, w)
            return x * w

        @staticmethod
        def backward(ctx, grad):
            x, w = ctx.saved
            gw = grad * x
            made.append(gw)
            handed.append(grad)
            return grad, gw  # x gets the very array it was handed; w a fresh one

    x, w = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    Scale.apply(x, w).backward(mt.tensor(np.ones(2)))
    assert w.grad.data is made[-1]                        # kept as made
    assert not np.shares_memory(x.grad.data, handed[-1])  # handed on: a copy
    close(x.grad, [1.0, 1.0])
    close(w.grad, [1.0, 2.0])

    x.grad = w.grad = None
    Scale.apply(x, w).backward(mt.tensor(np.ones(2)), retain_graph=True)
    assert w.grad.data is not made[-1]                    # a retained graph may still hold it
    close(w.grad, [1.0, 2.0])

    class Both(Function):  # y = a + b with one fresh array handed to both
        @staticmethod
        def forward(ctx, a, b):
            return a + b

        @staticmethod
        def backward(ctx, grad):
            g = grad * 1.0
            return g, g

    a, b = leaf([1.0]), leaf([2.0])
    Both.apply(a, b).backward(mt.tensor(np.ones(1)))
    a.grad.data *= 10
    close(b.grad, [1.0])


def test_backward_twice_with_retain_graph_gives_the_same_gradients_where_ops_reuse_saved_arrays(device):
    # cross entropy, dropout and layer norm overwrite a saved array on its last use only
    rng = np.random.default_rng(0)
    x = leaf(rng.standard_normal((6, 5)), device)
    w, b = leaf(rng.standard_normal(5), device), leaf(rng.standard_normal(5), device)
    target = mt.tensor(np.array([0, 4, 1, 1, 3, 0]), device=device)
    mt.manual_seed(2)
    h = F.layer_norm(F.dropout(x, 0.3, training=True), w, b)
    loss = F.cross_entropy(h * 3.0, target, label_smoothing=0.1)
    loss.backward(retain_graph=True)
    first = x.grad.numpy().copy()
    loss.backward()
    close(x.grad, 2 * first)
    assert np.abs(first).sum() > 0


def test_an_output_of_an_op_with_several_used_twice_sums_its_gradients_and_backward_starts_at_any_output():
    """The engine hands an op with several outputs one gradient per output: the sum of what
    reached that output (here used twice), None where nothing did; backward may start at one
    output."""
    x = mt.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    w1, w2 = mt.tensor(np.ones((3, 2)), requires_grad=True), mt.tensor(np.full((3, 2), 2.0), requires_grad=True)
    a, b = fusions.linears(x, [w1, w2])  # (an op with two outputs: the speed layer's Q, K, V in one product)
    (a * 3 + a).sum().backward(retain_graph=True)          # a read twice; b never
    close(x.grad, np.full((2, 3), 8.0))                    # d/dx Σ 4 x W1 = 4 · (row sums of W1)
    close(w1.grad, 4 * x.numpy().sum(axis=0)[:, None] * np.ones((3, 2)))
    assert w2.grad is None
    x.grad = w1.grad = None
    b.sum().backward()                                     # from the other output alone
    close(x.grad, np.full((2, 3), 4.0))                    # the row sums of W2: 2 + 2
    close(w2.grad, x.numpy().sum(axis=0)[:, None] * np.ones((3, 2)))
    assert w1.grad is None


