"""minitensor.profile: every op's forward and backward counted and timed (exclusively), the
products' FLOPs read from the ops' formulas, rows that add up to the wall time, and nothing
recorded or changed when no profile is open."""
import json
import time

import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F
from minitensor import profiler
from minitensor.autograd import Function
from transformer import Transformer, TransformerConfig, label_smoothed_loss, paper_adam

from ..helpers import leaf


def test_counts_every_forward_and_backward_and_records_nothing_when_closed():
    x, y = leaf(np.ones((2, 3))), leaf(np.full((2, 3), 2.0))
    with mt.profile() as prof:
        (x * y + x).sum().backward()
    rows = prof.rows
    assert (rows["Mul"].calls, rows["Mul"].backward_calls) == (1, 1)
    assert (rows["Add"].calls, rows["Add"].backward_calls) == (1, 1)
    assert (rows["Sum"].calls, rows["Sum"].backward_calls) == (1, 1)
    assert rows["(autograd engine)"].calls == 1
    assert profiler.active is None
    (x * y).sum().backward()  # after the with: nothing more is recorded
    assert rows["Mul"].calls == 1 and prof.opened == 1


def test_the_gradients_are_the_same_with_and_without_a_profile():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((4, 5)), rng.standard_normal((5, 3))
    plain = [leaf(a), leaf(b)]
    F.linear(*plain).tanh().sum().backward()
    profiled = [leaf(a), leaf(b)]
    with mt.profile():
        F.linear(*profiled).tanh().sum().backward()
    for p, q in zip(plain, profiled):
        assert np.array_equal(p.grad.numpy(), q.grad.numpy())


class Inner(Function):
    @staticmethod
    def forward(ctx, x):
        time.sleep(0.05)
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


class Outer(Function):
    """Its forward calls another op: the outer row must not count the inner one's time."""

    @staticmethod
    def forward(ctx, x):
        return Inner.apply(mt.tensor(x)).data + 1

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


def test_times_are_exclusive_and_the_rows_add_up_to_the_wall_time():
    with mt.profile() as prof:
        Outer.apply(mt.tensor(np.ones(3)))
    assert prof.rows["Inner"].forward_s >= 0.05
    assert prof.rows["Outer"].forward_s < 0.05  # inclusive, it would hold Inner's sleep too
    rows = prof.summary(blas=False)
    assert rows[-1]["op"] == profiler.BETWEEN
    total_ms = sum(r["forward_ms"] + r["backward_ms"] for r in rows)
    assert total_ms == pytest.approx(prof.wall_s * 1e3)
    assert prof.recorded_s() <= prof.wall_s


def test_product_flops_follow_the_ops_formulas():
    """Linear (3·5 rows, 4 -> 6): y = xW, dx = G Wᵀ, dW = xᵀ G: 3 products of 2·15·4·6 FLOPs;
    with only x needing a gradient, 2. Attention (B·H = 6, Tq 5, Tk 7, d 4, dv 3): QKᵀ and AV
    forward, dV, dA, dQ, dK backward."""
    rng = np.random.default_rng(0)
    x, w = leaf(rng.standard_normal((3, 5, 4))), leaf(rng.standard_normal((4, 6)))
    with mt.profile() as prof:
        F.linear(x, w).sum().backward()
    assert prof.rows["Linear"].flops == 3 * 2 * 15 * 4 * 6
    frozen = mt.tensor(rng.standard_normal((4, 6)))
    with mt.profile() as prof:
        F.linear(x, frozen).sum().backward()
    assert prof.rows["Linear"].flops == 2 * 2 * 15 * 4 * 6
    q, k, v = (leaf(rng.standard_normal(s)) for s in ((2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 3)))
    with mt.profile() as prof:
        F.scaled_dot_product_attention(q, k, v).sum().backward()
    per = 2 * 6 * 5 * 7
    assert prof.rows["ScaledDotProductAttention"].flops == per * (4 + 3) + per * (3 + 3 + 4 + 4)


def test_a_transformer_update_is_accounted_for_and_the_table_and_json_report_it(tmp_path):
    """One update of a small Transformer: the ops and regions hold most of the wall time (the
    rest, Python between the ops, is a minor row), the products' rate and the BLAS's own rate
    on the same shapes are reported, and save() writes the same rows as JSON."""
    cfg = TransformerConfig(vocab_size=50, d_model=32, n_heads=2, d_ff=64, n_encoder_layers=1, n_decoder_layers=1)
    model = Transformer(cfg)
    opt = paper_adam(model.parameters())
    rng = np.random.default_rng(0)
    src, tgt = rng.integers(3, 50, (8, 9)), rng.integers(3, 50, (8, 10))

    def update():
        loss = label_smoothed_loss(model(mt.tensor(src), mt.tensor(tgt[:, :-1])), mt.tensor(tgt[:, 1:]), 0, 0.1)
        opt.zero_grad()
        loss.backward()
        opt.step()

    update()
    prof = mt.profile()
    for _ in range(3):
        with prof:
            update()
    assert prof.opened == 3
    for name in ("Linear", "ScaledDotProductAttention", "LayerNorm", "CrossEntropy", "Adam.step", "(autograd engine)"):
        assert name in prof.rows, name
    assert prof.recorded_s() <= prof.wall_s
    rows = {r["op"]: r for r in prof.summary()}
    assert rows[profiler.BETWEEN]["share"] < 0.5, rows[profiler.BETWEEN]
    assert rows["Linear"]["gflop_per_s"] > 0 and rows["Linear"]["blas_gflop_per_s"] > 0
    assert rows["LayerNorm"]["gflop"] is None
    text = prof.table()
    assert "Linear" in text and "(between ops)" in text and "per update (3 profiled)" in text
    # an op's time is split into its passes; a region's (the optimizer, the graph walk) is not
    assert not rows["Linear"]["region"] and rows["Adam.step"]["region"] and rows["(autograd engine)"]["region"]
    lines = {line.split("  ")[0].strip(): line.split()[1:] for line in text.splitlines()[3:]}
    ms, fwd, bwd = (float(x) for x in lines["Linear"][1:4])
    assert abs(ms - fwd - bwd) <= 0.011 and fwd > 0 and bwd > 0
    assert float(lines["Adam.step"][1]) > 0 and lines["Adam.step"][2].endswith("%"), lines["Adam.step"]  # ms, then share
    prof.save(tmp_path / "p.json")
    saved = json.loads((tmp_path / "p.json").read_text())
    assert saved["opened"] == 3 and [r["op"] for r in saved["rows"]] == [r["op"] for r in prof.summary()]


def test_profiles_do_not_nest():
    with mt.profile():
        with pytest.raises(RuntimeError, match="do not nest"):
            with mt.profile():
                pass
    assert profiler.active is None
