"""What minitensor.profile() costs: nothing measurable when off, and how much when on.

Off, the engine calls every op through ``autograd.calls`` (``Calls``: the plain forward, a
frame of its own, which an open profile replaces); this times that frame against the cheapest
op call there is (an Add of two one-element arrays). On, it times the
same training update with and without a profile open, alternating run by run, and reports the
ratio of the medians, and the share of the profiled update the profile left unaccounted for
(the ``(between ops)`` row, which holds the profiler's own bookkeeping).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/profiler_overhead.py \\
        --out benchmarks/results/profiler_overhead_<date>.json
"""
from __future__ import annotations

import argparse
import sys
import time
import timeit
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import minitensor as mt  # noqa: E402
from minitensor import autograd, profiler  # noqa: E402
from minitensor.ops.elementwise import Add  # noqa: E402
from transformer import Transformer, TransformerConfig, fuse, label_smoothed_loss, paper_adam  # noqa: E402

from harness import environment, write_results  # noqa: E402

SETUPS = {  # name: (model, batch, length)
    "copy task (d_model 64, 2+2 layers, 128 x 11)": (dict(vocab_size=13, d_model=64, n_heads=4, d_ff=128,
                                                          n_encoder_layers=2, n_decoder_layers=2, dropout=0.0), 128, 11),
    "multi30k-cpu shape (d_model 256, 3+3 layers, 64 x 30, V 8000)": (dict(vocab_size=8000, d_model=256, n_heads=4,
                                                                          d_ff=512, n_encoder_layers=3,
                                                                          n_decoder_layers=3), 64, 30),
}


def update_fn(model_kw: dict, batch: int, length: int):
    mt.manual_seed(0)
    cfg = TransformerConfig(**model_kw)
    model = fuse(Transformer(cfg))
    opt = paper_adam(model.parameters())
    rng = np.random.default_rng(0)
    src = rng.integers(3, cfg.vocab_size, (batch, length))
    tgt = rng.integers(3, cfg.vocab_size, (batch, length + 1))

    def update():
        loss = label_smoothed_loss(model(mt.tensor(src), mt.tensor(tgt[:, :-1])), mt.tensor(tgt[:, 1:]), 0, 0.1)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return update


def off_cost(calls: int = 200_000) -> dict:
    """ns that the engine's plain call (``Calls.forward``) adds to a forward, and µs per call
    of the cheapest op."""
    a, b = mt.tensor(np.ones(1)), mt.tensor(np.ones(1))
    ctx, arrays = autograd.Context(Add, np, None), (a.data, b.data)
    best = lambda fn: min(timeit.repeat(fn, number=calls, repeat=5)) / calls  # noqa: E731
    params = {}
    frame = (best(lambda: autograd.calls.forward(Add, ctx, arrays, params))
             - best(lambda: Add.forward(ctx, *arrays, **params)))  # the call as the engine made it before
    op = min(timeit.repeat(lambda: Add.apply(a, b), number=calls // 10, repeat=5)) / (calls // 10)
    return {"frame_ns": round(frame * 1e9, 1), "cheapest_op_us": round(op * 1e6, 2), "share": round(frame / op, 4)}


def on_cost(update, rounds: int) -> dict:
    update()
    update()  # warm-up: the allocator's arrays, the BLAS threads
    plain, profiled, between = [], [], []
    for _ in range(rounds):
        t = time.perf_counter()
        update()
        plain.append(time.perf_counter() - t)
        prof = mt.profile()
        t = time.perf_counter()
        with prof:
            update()
        profiled.append(time.perf_counter() - t)
        between.append(next(r["share"] for r in prof.summary(blas=False) if r["op"] == profiler.BETWEEN))
    p, q = float(np.median(plain)), float(np.median(profiled))
    return {"plain_ms": round(p * 1e3, 2), "profiled_ms": round(q * 1e3, 2), "ratio": round(q / p, 3),
            "plain_runs_ms": [round(x * 1e3, 2) for x in plain], "profiled_runs_ms": [round(x * 1e3, 2) for x in profiled],
            "between_ops_share_median": round(float(np.median(between)), 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=15, help="updates each way, alternating (default 15)")
    ap.add_argument("--out", help="also write the JSON here")
    a = ap.parse_args()
    mt.allocator.from_environment()  # as the programs that train do: freed arrays are reused
    out = {"benchmark": "the profiler's cost, off and on", "environment": environment("cpu"), "off": off_cost(), "on": {}}
    for name, (model_kw, batch, length) in SETUPS.items():
        out["on"][name] = on_cost(update_fn(model_kw, batch, length), a.rounds)
    off = out["off"]
    print(f"off: {off['frame_ns']} ns per op call (the engine's plain call), against {off['cheapest_op_us']} µs for the cheapest op ({off['share']:.2%})",
          file=sys.stderr)
    for name, r in out["on"].items():
        print(f"on, {name}: {r['plain_ms']} -> {r['profiled_ms']} ms per update ({r['ratio']}x); "
              f"unaccounted {r['between_ops_share_median']:.1%}", file=sys.stderr)
    write_results(out, a.out)


if __name__ == "__main__":
    main()
