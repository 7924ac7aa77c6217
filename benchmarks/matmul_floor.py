"""How fast could a training update be with the BLAS NumPy runs on? The floor the matrix
products set, measured.

On the CPU most of a Transformer update is the matrix products of its Linear layers, and no
rearrangement of the rest makes those cheaper: the same math needs the same products. This
script runs real updates inside ``minitensor.profile()``, which counts every linear op's
products (the FLOPs of its forward product and of each backward product it computes), then times float32 products alone on the shapes the
updates used and takes the fastest rate seen. Dividing the update's product FLOPs by that
rate gives a time no update can beat with these kernels, even if everything else (softmax,
LayerNorm, dropout, Adam, the engine) took no time at all. Against a step time to compare
with (``--compare-ms``: PyTorch's step, or an older commit's update) it prints the largest
speed-up the products allow.

Setups:
  base          the Transformer-base step of base_step_vs_torch.py (16 x 32 tokens, V 37000)
  multi30k-cpu  real updates of ``python -m transformer train --preset multi30k-cpu``

    python benchmarks/matmul_floor.py base --compare-ms 1300
    python benchmarks/matmul_floor.py multi30k-cpu --data-dir ../shared/data/multi30k --compare-ms 350
    env -u OPENBLAS_CORETYPE python benchmarks/matmul_floor.py base     # the other kernels (minitensor/blas.py)

The attention's small batched products and every other op are left out of the count, so the
floor is a lower bound, never an estimate of the time itself.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # this checkout's minitensor and transformer

from harness import environment, product_timer, write_results  # noqa: E402

import minitensor as mt  # noqa: E402
from minitensor.profiler import Row  # noqa: E402


LINEAR_OPS = ("Linear", "Linears")   # one linear layer; several of one input (Q, K, V) in one product


class ProductCounter:
    """Per update, the FLOPs of the linear layers' products, their (m, k, n) shapes, and the
    time spent inside them (the ops LINEAR_OPS), read from a ``minitensor.profile()`` open
    while it is."""

    def __init__(self):
        self.updates: list[dict] = []
        self.profile = mt.profile()
        self._done = (0.0, 0.0)  # the linear ops' FLOPs and seconds at the previous update's end

    def _linear(self) -> Row:
        """LINEAR_OPS' rows as one."""
        total = Row()
        for name in LINEAR_OPS:
            row = self.profile.rows.get(name) or Row()
            total.forward_s += row.forward_s
            total.backward_s += row.backward_s
            total.products.update(row.products)
        return total

    def shapes(self) -> list[tuple[float, tuple[int, int, int]]]:
        """(FLOPs, (m, k, n)) of every distinct linear product counted (Linear.products: y = x W
        is (rows, in) x (in, out), dx = G Wᵀ is (rows, out) x (out, in), dW = xᵀ G is
        (in, rows) x (rows, out), or Gᵀ x, (out, rows) x (rows, in), for a weight stored
        (out, in); Linears' forward is a batch of n such products); most FLOPs first."""
        return sorted(((2.0 * b * m * k * n * c, (m, k, n)) for (b, m, k, n, _), c in self._linear().products.items()),
                      reverse=True)

    def __enter__(self):
        self.profile.__enter__()
        return self

    def __exit__(self, *exc):
        return self.profile.__exit__(*exc)

    def update_done(self, seconds: float) -> None:
        row = self._linear()
        flops, spent = row.flops or 0.0, row.forward_s + row.backward_s
        self.updates.append({"seconds": seconds, "product_flops": flops - self._done[0],
                             "linear_seconds": spent - self._done[1]})
        self._done = (flops, spent)

    def discard(self) -> None:
        """Forget what was counted so far (the warm-up updates)."""
        self.updates.clear()
        self.profile.rows.clear()
        self._done = (0.0, 0.0)


def base_updates(counter: ProductCounter, steps: int, warmup: int) -> None:
    """The base step exactly as base_step_vs_torch.py takes it."""
    import base_step_vs_torch as bs  # noqa: PLC0415

    args = argparse.Namespace(device="cpu", vocab=37000, batch=16, length=32)
    rng = np.random.default_rng(0)
    data = [bs.batch(rng, args.batch, args.length, args.vocab) for _ in range(2)]
    step, _ = bs.minitensor_step(args, data, "fp32")
    for i in range(warmup + steps):
        if i == warmup:
            counter.discard()
        t = time.perf_counter()
        step(i)
        counter.update_done(time.perf_counter() - t)


def multi30k_updates(counter: ProductCounter, steps: int, warmup: int, data_dir: str) -> None:
    """Real updates of the multi30k-cpu preset: the command line's own training loop, each
    Trainer.update timed."""
    from transformer import cli  # noqa: PLC0415
    from transformer.train import Trainer  # noqa: PLC0415

    plain = Trainer.update
    seen = [0]

    def update(self, *a, **k):
        if seen[0] == warmup:
            counter.discard()
        seen[0] += 1
        t = time.perf_counter()
        out = plain(self, *a, **k)
        counter.update_done(time.perf_counter() - t)
        return out

    Trainer.update = update
    try:
        with tempfile.TemporaryDirectory() as run_dir:
            cli.main(["train", "--preset", "multi30k-cpu", "--run-dir", run_dir, "--data-dir", data_dir,
                      "--max-steps", str(warmup + steps), "--save-every", str(10**9), "--no-progress"])
    finally:
        Trainer.update = plain


def best_rate(shapes: list, top: int, repeats: int) -> dict:
    """The ``top`` shapes that carry the most FLOPs timed alone (harness.product_timer):
    the fastest rate seen (GFLOP/s), its shape, every rate, and the seconds the products would
    take at their own shape's rate (the best rate for the shapes not timed)."""
    rates = product_timer([s for _, s in shapes[:top]])(repeats)
    shape = max(rates, key=rates.get)
    alone = sum(f / (rates.get("x".join(map(str, s)), rates[shape]) * 1e9) for f, s in shapes)
    return {"gflop_per_s": rates[shape], "shape": shape, "all": rates, "products_alone_seconds": alone}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("setup", choices=["base", "multi30k-cpu"])
    p.add_argument("--data-dir", help="Multi30k files (multi30k-cpu)")
    p.add_argument("--steps", type=int, default=None, help="updates counted (default: 5 base, 30 multi30k-cpu)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--top", type=int, default=8, help="product shapes timed alone")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--compare-ms", type=float, help="a step time (ms) to hold the floor against")
    p.add_argument("--out", help="also write the JSON here")
    a = p.parse_args()
    mt.allocator.from_environment()  # as the programs that train do: freed arrays are reused
    if a.setup == "multi30k-cpu" and not a.data_dir:
        p.error("multi30k-cpu needs --data-dir")
    steps = a.steps or (5 if a.setup == "base" else 30)
    with ProductCounter() as counter:
        if a.setup == "base":
            base_updates(counter, steps, a.warmup)
        else:
            multi30k_updates(counter, steps, a.warmup, str(Path(a.data_dir).resolve()))
    ups = counter.updates
    gflop = float(np.mean([u["product_flops"] for u in ups])) / 1e9
    rate = best_rate(counter.shapes(), a.top, a.repeats)
    floor_ms = gflop / rate["gflop_per_s"] * 1e3
    update_ms = float(np.median([u["seconds"] for u in ups])) * 1e3
    linear_ms = float(np.median([u["linear_seconds"] for u in ups])) * 1e3
    out = {
        "benchmark": "the matrix products' floor under one update",
        "setup": a.setup, "environment": environment("cpu"), "updates_counted": len(ups),
        "linear_gflop_per_update": round(gflop, 2),
        "best_product_rate": rate,
        "floor_ms_per_update": round(floor_ms, 1),
        "products_alone_ms_per_update": round(rate.pop("products_alone_seconds") / len(ups) * 1e3, 1),
        "measured_ms_per_update": round(update_ms, 1),
        "measured_linear_ms_per_update": round(linear_ms, 1),
        "linear_gflop_per_s_in_place": round(gflop / linear_ms * 1e3, 1),
        "everything_else_ms": round(update_ms - linear_ms, 1),
    }
    lines = [f"{a.setup}: {gflop:.1f} GFLOP of Linear products per update; the fastest product alone ran at "
             f"{rate['gflop_per_s']} GFLOP/s ({rate['shape']}), so the products need at least {floor_ms:.0f} ms "
             f"({out['products_alone_ms_per_update']:.0f} ms at each shape's own rate alone).",
             f"Measured: {update_ms:.0f} ms per update, {linear_ms:.0f} of them in Linear "
             f"({out['linear_gflop_per_s_in_place']} GFLOP/s), {update_ms - linear_ms:.0f} in everything else."]
    if a.compare_ms:
        out["compare_ms"] = a.compare_ms
        out["largest_speedup_over_compare"] = round(a.compare_ms / floor_ms, 3)
        out["speedup_over_compare_now"] = round(a.compare_ms / update_ms, 3)
        lines.append(f"Against {a.compare_ms:.0f} ms: {a.compare_ms / update_ms:.2f}x now; at most "
                     f"{a.compare_ms / floor_ms:.2f}x if nothing but the products took time.")
    write_results(out, a.out)
    print("\n".join(lines), file=sys.stderr)


if __name__ == "__main__":
    main()
