"""Neural-network ops: matmul, linear, softmax family, layer_norm, dropout, embedding,
cross_entropy and scaled dot-product attention — forward against NumPy, gradcheck on
hypothesis-drawn shapes."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import minitensor as mt
import minitensor.functional as F
from minitensor.errors import ShapeError
from minitensor.testing import arrays, matmul_pairs, shapes

from ..helpers import close, leaf


def np_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@given(pair=matmul_pairs())
def test_matmul_broadcasts_batches_like_numpy_and_gradcheck(pair, device):
    a, b = pair
    ta, tb = leaf(a, device), leaf(b, device)
    close(ta @ tb, a @ b)
    assert mt.gradcheck(F.matmul, [ta, tb])


@pytest.mark.parametrize("sa,sb", [((3,), (3,)), ((3,), (3, 2)), ((2, 4, 3), (3,)), ((3,), (5, 3, 2))])
def test_matmul_with_vectors_drops_the_vector_axis(sa, sb, device):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(sa), rng.standard_normal(sb)
    ta, tb = leaf(a, device), leaf(b, device)
    close(F.matmul(ta, tb), np.matmul(a, b))
    assert mt.gradcheck(F.matmul, [ta, tb])


@pytest.mark.parametrize("transposed", [False, True], ids=["weight_in_by_out", "weight_out_by_in"])
@given(data=st.data())
def test_linear_is_x_w_plus_b_and_gradcheck(transposed, data, device):
    """x W + b for W (in, out), and x Wᵀ + b for W stored (out, in) with ``transposed``."""
    lead = data.draw(shapes(min_dims=0, max_dims=2, max_side=3))
    n_in, n_out = data.draw(st.integers(1, 5)), data.draw(st.integers(1, 5))
    w_shape = (n_out, n_in) if transposed else (n_in, n_out)
    x, w, b = (data.draw(arrays(s)) for s in (lead + (n_in,), w_shape, (n_out,)))
    tx, tw, tb = leaf(x, device), leaf(w, device), leaf(b, device)
    close(F.linear(tx, tw, tb, transposed=transposed), x @ (w.T if transposed else w) + b)
    assert mt.gradcheck(lambda u, v, c: F.linear(u, v, c, transposed=transposed), [tx, tw, tb])
    assert mt.gradcheck(lambda u, v: F.linear(u, v, transposed=transposed), [tx, tw])


@given(data=st.data())
def test_linears_are_each_x_w_plus_b_from_one_product_and_gradcheck_through_any_of_their_outputs(data, device):
    """F.linears(x, [W_1 … W_n], [b_1 … b_n]) gives x W_i + b_i for each i (W_i all one shape, some
    biases None), and its gradients are right whether every output is used, one alone (the
    others' gradients are None), or one twice (its two gradients summed in its own slot)."""
    lead = data.draw(shapes(min_dims=0, max_dims=2, max_side=3))
    n_in, n_out, n = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4)), data.draw(st.integers(1, 3))
    widths = [n_out] * n
    with_bias = data.draw(st.lists(st.booleans(), min_size=len(widths), max_size=len(widths)))
    x = data.draw(arrays(lead + (n_in,)))
    ws = [data.draw(arrays((n_in, n))) for n in widths]
    bs = [data.draw(arrays((n,))) if keep else None for n, keep in zip(widths, with_bias)]
    tx, tws = leaf(x, device), [leaf(w, device) for w in ws]
    tbs = [None if b is None else leaf(b, device) for b in bs]
    outs = F.linears(tx, tws, tbs)
    assert len(outs) == len(widths)
    for out, w, b in zip(outs, ws, bs):
        close(out, x @ w + (0 if b is None else b))
    n, biases = len(ws), [b for b in tbs if b is not None]

    def call(u, *p):
        it = iter(p[n:])
        return F.linears(u, p[:n], [None if b is None else next(it) for b in tbs])

    assert mt.gradcheck(lambda u, *p: F.concat(list(call(u, *p)), axis=-1), [tx, *tws, *biases])
    assert mt.gradcheck(lambda u, *p: call(u, *p)[-1] * call(u, *p)[-1][..., :1] + call(u, *p)[-1],
                        [tx, *tws, *biases])
    y = call(tx, *tws, *biases)[0]
    assert mt.gradcheck(lambda u, *p: y.detach() + call(u, *p)[0] * 2, [tx, *tws, *biases])


def test_an_output_of_an_op_with_several_used_twice_sums_its_gradients_and_backward_starts_at_any_output():
    """The engine hands an op with several outputs one gradient per output: the sum of what
    reached that output (here used twice), None where nothing did; backward may start at one
    output."""
    x = mt.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    w1, w2 = mt.tensor(np.ones((3, 2)), requires_grad=True), mt.tensor(np.full((3, 2), 2.0), requires_grad=True)
    a, b = F.linears(x, [w1, w2])
    (a * 3 + a).sum().backward(retain_graph=True)          # a read twice; b never
    close(x.grad, np.full((2, 3), 8.0))                    # d/dx Σ 4 x W1 = 4 · (row sums of W1)
    close(w1.grad, 4 * x.numpy().sum(axis=0)[:, None] * np.ones((3, 2)))
    assert w2.grad is None
    x.grad = w1.grad = None
    b.sum().backward()                                     # from the other output alone
    close(x.grad, np.full((2, 3), 4.0))                    # the row sums of W2: 2 + 2
    close(w2.grad, x.numpy().sum(axis=0)[:, None] * np.ones((3, 2)))
    assert w1.grad is None


def test_a_tied_output_layers_weight_gradient_arrives_contiguous_and_equals_the_transposed_views():
    """h Eᵀ with E stored (V, d): the same gradient as through the view E.T, made in E's layout
    (so the engine keeps it instead of copying a strided array)."""
    rng = np.random.default_rng(0)
    h, e = rng.standard_normal((6, 4)), rng.standard_normal((9, 4))
    grads = []
    for transposed in (False, True):
        th, te = leaf(h, "cpu"), leaf(e, "cpu")
        y = F.linear(th, te, transposed=True) if transposed else F.linear(th, te.T)
        (y * y).sum().backward()
        grads.append(te.grad.numpy())
        made = te.grad.data
    close(grads[1], grads[0])
    assert made.flags.c_contiguous and made.base is None
    with pytest.raises(ShapeError, match=r"\(out_features, in_features\) with transposed=True"):
        F.linear(mt.ones(2, 4), mt.ones(4, 9), transposed=True)
    for transposed in (False, True):  # a weight that is not a matrix is named as such, in either layout
        with pytest.raises(ShapeError, match=r"does not fit weight of shape \(\)"):
            F.linear(mt.ones(2, 4), mt.tensor(1.0), transposed=transposed)


@pytest.mark.parametrize("fn,ref", [
    (F.softmax, np_softmax),
    (F.log_softmax, lambda x, axis: np.log(np_softmax(x, axis))),
], ids=["softmax", "log_softmax"])
@given(data=st.data())
def test_softmax_family_matches_numpy_and_gradcheck(fn, ref, data, device):
    x = data.draw(arrays(shapes(min_dims=1, max_dims=3), -3, 3))
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    t = leaf(x, device)
    close(fn(t, axis=axis), ref(x, axis))
    assert mt.gradcheck(lambda u: fn(u, axis=axis), [t])


def test_softmax_is_stable_for_huge_logits_and_rows_sum_to_one():
    y = F.softmax(mt.tensor([[1000.0, 1000.0], [-1000.0, 0.0]]))
    close(y, [[0.5, 0.5], [0.0, 1.0]], atol=1e-7)
    close(y.sum(axis=-1), [1.0, 1.0], atol=1e-6)


def np_layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    return y * (1 if w is None else w) + (0 if b is None else b)


@given(data=st.data(), affine=st.booleans())
def test_layer_norm_matches_numpy_and_gradcheck(data, affine, device):
    x = data.draw(arrays(shapes(min_dims=1, max_dims=3, min_side=2)))
    d = x.shape[-1]
    w = data.draw(arrays((d,), 0.5, 1.5)) if affine else None
    b = data.draw(arrays((d,))) if affine else None
    tx = leaf(x, device)
    tw, tb = (leaf(w, device), leaf(b, device)) if affine else (None, None)
    close(F.layer_norm(tx, tw, tb, eps=1e-5), np_layer_norm(x, w, b, 1e-5), atol=1e-9)
    inputs = [tx, tw, tb] if affine else [tx]
    assert mt.gradcheck(lambda *u: F.layer_norm(*u, eps=1e-5), inputs, atol=1e-5)


def test_dropout_zeroes_or_scales_and_backward_uses_the_same_mask(device):
    mt.manual_seed(3)
    x = leaf(np.ones((200, 50)), device)
    y = F.dropout(x, 0.3, training=True)
    vals = np.unique(np.round(y.numpy(), 6))
    assert set(vals) <= {0.0, round(1 / 0.7, 6)}
    assert abs((y.numpy() == 0).mean() - 0.3) < 0.02          # about p of the entries dropped
    assert abs(y.numpy().mean() - 1.0) < 0.03                 # expectation preserved
    y.sum().backward()
    close(x.grad, y.numpy())                                  # dy/dx is the mask itself
    assert F.dropout(x, 0.3, training=False) is x             # identity in eval mode


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


def test_dropout_gradcheck_with_a_fixed_seed(device):
    x = leaf(np.random.default_rng(0).standard_normal((4, 5)), device)

    def f(u):
        mt.manual_seed(11)  # the same mask on every call
        return F.dropout(u, 0.4, training=True)

    assert mt.gradcheck(f, [x])


@given(data=st.data())
def test_embedding_picks_rows_and_gradcheck_with_repeated_ids(data, device):
    V, D = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 4))
    ids_shape = data.draw(shapes(min_dims=1, max_dims=2, max_side=4))
    ids = np.random.default_rng(data.draw(st.integers(0, 99))).integers(0, V, ids_shape)
    w = data.draw(arrays((V, D)))
    tw = leaf(w, device)
    tid = mt.tensor(ids, device=device)
    close(F.embedding(tid, tw), w[ids])
    assert mt.gradcheck(lambda u: F.embedding(tid, u), [tw])


def np_cross_entropy(logits, target, ignore_index, eps, reduction):
    V = logits.shape[-1]
    logp = np.log(np_softmax(logits))
    valid = target != ignore_index if ignore_index is not None else np.ones(target.shape, bool)
    t = np.where(valid, target, 0)
    q = (1 - eps) * np.eye(V)[t] + eps / V     # PyTorch's smoothed target
    loss = -(q * logp).sum(-1) * valid
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / valid.sum()


@given(data=st.data(), eps=st.sampled_from([0.0, 0.1, 0.3]), reduction=st.sampled_from(["mean", "sum", "none"]),
       ignore=st.booleans())
def test_cross_entropy_matches_smoothed_formula_and_gradcheck(data, eps, reduction, ignore, device):
    lead = data.draw(shapes(min_dims=1, max_dims=2, max_side=4))
    V = data.draw(st.integers(2, 6))
    logits = data.draw(arrays(lead + (V,), -3, 3))
    target = np.random.default_rng(data.draw(st.integers(0, 99))).integers(0, V, lead)
    ignore_index = 0 if ignore else None
    if ignore:
        target.flat[0] = 1 % V if V > 1 else 0  # keep at least one target counted
    tl = leaf(logits, device)
    tt = mt.tensor(target, device=device)
    kw = dict(ignore_index=ignore_index, label_smoothing=eps, reduction=reduction)
    close(F.cross_entropy(tl, tt, **kw), np_cross_entropy(logits, target, ignore_index, eps, reduction))
    assert mt.gradcheck(lambda u: F.cross_entropy(u, tt, **kw), [tl])


@given(data=st.data(), eps=st.sampled_from([0.0, 0.1]), reduction=st.sampled_from(["mean", "sum", "none"]))
def test_cross_entropy_over_its_logits_gives_the_same_loss_and_gradient_in_their_memory(data, eps, reduction, device):
    """overwrite=True: the loss and the gradient are those of the plain op, the gradient is
    computed in the logits' own array, and a second backward is refused, not wrong."""
    lead = data.draw(shapes(min_dims=1, max_dims=2, max_side=4))
    V = data.draw(st.integers(2, 6))
    logits = data.draw(arrays(lead + (V,), -3, 3))
    target = mt.tensor(np.random.default_rng(data.draw(st.integers(0, 99))).integers(0, V, lead), device=device)
    kw = dict(label_smoothing=eps, reduction=reduction)
    cot = np.random.default_rng(0).standard_normal(lead) if reduction == "none" else None
    plain, reused = leaf(logits, device), leaf(logits, device)
    through_plain, through_reused = plain * 1.0, reused * 1.0   # the logits an op made: a temporary
    want = F.cross_entropy(through_plain, target, **kw)
    got = F.cross_entropy(through_reused, target, overwrite=True, **kw)
    close(got, want.numpy())
    want.backward(cot, retain_graph=True)
    got.backward(cot, retain_graph=True)
    close(reused.grad, plain.grad.numpy())
    close(through_reused, plain.grad.numpy())  # its memory now holds the gradient (x·1.0: the same)
    with pytest.raises(mt.GraphError, match="only once"):
        got.backward(cot)


def test_cross_entropy_mean_counts_only_non_ignored_targets():
    logits = leaf(np.zeros((1, 4, 5)))
    target = mt.tensor(np.array([[2, 0, 0, 3]]))
    loss = F.cross_entropy(logits, target, ignore_index=0)
    close(loss, np.log(5.0))  # two counted targets, each log 5; the mean is over 2, not 4
    loss.backward()
    close(logits.grad[0, 1], np.zeros(5))


def mask_for(kind, B, H, Tq, Tk, rng):
    if kind == "none":
        return None
    if kind == "causal":
        return np.tril(np.ones((Tq, Tk), bool), k=Tk - Tq)
    if kind == "padding":  # (B, 1, 1, Tk): every batch item has its own length >= 1
        lengths = rng.integers(1, Tk + 1, size=B)
        return (np.arange(Tk)[None, :] < lengths[:, None])[:, None, None, :]
    return rng.random((B, H, Tq, Tk)) < 0.7  # "full": any pattern, rows may be fully masked


def np_attention(q, k, v, mask):
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    m = s.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    e = np.exp(s - m)
    den = e.sum(-1, keepdims=True)
    p = e / np.where(den == 0, 1, den)
    return p @ v, p


@pytest.mark.parametrize("kind", ["none", "causal", "padding", "full"])
@given(data=st.data())
def test_attention_matches_numpy_and_gradcheck_for_each_mask(kind, data, device):
    B, H = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2))
    Tq, Tk, d, dv = (data.draw(st.integers(1, 4)) for _ in range(4))
    if kind == "causal":
        Tq = Tk
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    q, k, v = rng.standard_normal((B, H, Tq, d)), rng.standard_normal((B, H, Tk, d)), rng.standard_normal((B, H, Tk, dv))
    mask = mask_for(kind, B, H, Tq, Tk, rng)
    tq, tk, tv = leaf(q, device), leaf(k, device), leaf(v, device)
    tm = None if mask is None else mt.tensor(mask, device=device)
    out, w = F.scaled_dot_product_attention(tq, tk, tv, mask=tm, return_weights=True)
    ref_out, ref_w = np_attention(q, k, v, mask)
    close(out, ref_out)
    close(w, ref_w)
    assert mt.gradcheck(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, mask=tm), [tq, tk, tv])


def test_attention_fully_masked_row_gives_zeros_not_nan():
    q = leaf(np.ones((2, 3)))
    mask = mt.tensor(np.array([[True, False], [False, False]]))  # query 1 may attend to nothing
    out, w = F.scaled_dot_product_attention(q, q, q, mask=mask, return_weights=True)
    assert np.all(np.isfinite(out.numpy()))
    close(w[1], np.zeros(2))
    close(out[1], np.zeros(3))
    out.sum().backward()
    assert np.all(np.isfinite(q.grad.numpy()))


def test_attention_dropout_gradcheck_with_fixed_seed(device):
    rng = np.random.default_rng(0)
    q, k, v = (leaf(rng.standard_normal((2, 3, 4)), device) for _ in range(3))

    def f(a, b, c):
        mt.manual_seed(5)
        return F.scaled_dot_product_attention(a, b, c, dropout_p=0.3, training=True)

    assert mt.gradcheck(f, [q, k, v])
