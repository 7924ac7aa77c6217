"""Where the time goes: every op's forward and backward, timed while a profile is open.

    with minitensor.profile() as prof:
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    print(prof.table())
    prof.save("profile.json")

Inside ``with``, the profile takes the engine's calls (``minitensor.autograd.calls``): it
times each op's forward and backward, and the engine's own work (the graph walk, summing
gradients) as a region of its own; the optimizer's step is a region too. Every time is
*exclusive*: a region's row holds its time less that of the ops timed inside it. What is left
of the wall time inside ``with`` (Python between the ops: modules, tensors, the loss's
``item()``, and the profiler's own bookkeeping) is the row ``(between ops)``, so the rows add
up to the wall time. The table gives each row's time in ``ms``, and splits an op's into its
forward and backward; a region's has no such split.

The products of the ops that multiply matrices (the (batch, m, k, n) of each forward and
backward product, read from the ops' formulas) are in one table, :mod:`minitensor.flops`, so the table shows their
FLOPs, the rate they achieved, and the rate the BLAS reaches on the same shapes timed alone
(measured when the table is made: :meth:`Profile.blas_rates`).

On a GPU each timed call waits for the device before its clock stops (the op's time, not its
launch's), so a profiled update runs slower than a plain one. Off, it costs nothing: the
engine calls the ops plainly.
"""
from __future__ import annotations

import json
import os
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import autograd, flops

active: "Profile | None" = None  # the open profile

BETWEEN = "(between ops)"


@dataclass
class Row:
    """One op's or region's totals."""

    calls: int = 0
    forward_s: float = 0.0
    backward_s: float = 0.0
    backward_calls: int = 0
    products: Counter = field(default_factory=Counter)  # (batch, m, k, n, (dtype, xp)) -> times computed
    region: bool = False  # a timed block that is not an op (the optimizer's step, the graph walk): no fwd/bwd split

    @property
    def flops(self) -> float | None:
        if not self.products:
            return None
        return sum(2.0 * b * m * k * n * c for (b, m, k, n, _), c in self.products.items())


class Profile:
    """Times recorded while open (it may be opened again: the times add up)."""

    def __init__(self):
        self.rows: dict[str, Row] = {}
        self.wall_s = 0.0
        self.opened = 0
        self._stack: list[float] = []  # per open timed call: the time of the calls inside it
        self._start = None
        self._rates: dict | None = None

    # ------------------------------------------------------------------ opening and closing
    def __enter__(self) -> "Profile":
        global active
        if active is not None:
            raise RuntimeError("a profile is already open; profiles do not nest")
        active = autograd.calls = self  # the engine's forward, backward, walk and step go through this profile
        self.opened += 1
        self._rates = None
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc) -> bool:
        global active
        self.wall_s += time.perf_counter() - self._start
        active, autograd.calls = None, autograd.Calls
        return False

    # ------------------------------------------------------------------ recording (the engine's calls, and optim's region)
    def _begin(self) -> float:
        self._stack.append(0.0)  # the time of the timed calls inside this one
        return time.perf_counter()

    def _end(self, start: float, xp) -> float:
        """The exclusive seconds of the timed call that began at ``start``."""
        if xp is not None and xp is not np:
            xp.cuda.get_current_stream().synchronize()  # why: the op's time, not its launch's
        total = time.perf_counter() - start
        inner = self._stack.pop()
        if self._stack:
            self._stack[-1] += total
        return total - inner

    def forward(self, fn, ctx, arrays, params):
        """Run and time ``fn.forward``; note the products it and its backward compute."""
        start = self._begin()
        try:
            out = fn.forward(ctx, *arrays, **params)
        finally:
            seconds = self._end(start, ctx.xp)
        row = self.rows.setdefault(fn.__name__, Row())
        row.calls += 1
        row.forward_s += seconds
        shapes = [None if a is None else tuple(a.shape) for a in arrays]
        found = flops.products(fn, ctx, shapes, params)
        if found is not None:
            kind = (str(next(a.dtype for a in arrays if a is not None)), ctx.xp)
            forward, backward = found
            row.products.update((*p, kind) for p in forward)
            ctx.__dict__["_profiled_products"] = [(*p, kind) for p in backward]
        return out

    def backward(self, node, grad):
        """Run and time ``node.fn.backward``."""
        products = node.__dict__.get("_profiled_products")
        start = self._begin()
        try:
            out = node.fn.backward(node, grad)
        finally:
            seconds = self._end(start, node.xp)
        row = self.rows.setdefault(node.fn.__name__, Row())
        row.backward_calls += 1
        row.backward_s += seconds
        if products:
            row.products.update(products)
        return out

    def walk(self, root, grad, retain_graph: bool) -> None:
        """Run the engine's backward walk, its own work timed as the row "(autograd engine)"."""
        with self._region("(autograd engine)"):
            autograd._walk(root, grad, retain_graph)

    def step(self, optimizer, update) -> None:
        """Run an optimizer's update, timed as the row "<its class>.step"."""
        with self._region(f"{type(optimizer).__name__}.step", optimizer.params[0].xp):
            update()

    @contextmanager
    def _region(self, name: str, xp=None):
        start = self._begin()
        try:
            yield
        finally:
            seconds = self._end(start, xp)
            row = self.rows.setdefault(name, Row(region=True))
            row.calls += 1
            row.forward_s += seconds  # (a region's time, kept where an op keeps its forward's)

    # ------------------------------------------------------------------ reading
    def recorded_s(self) -> float:
        """The seconds the rows hold (without ``(between ops)``)."""
        return sum(r.forward_s + r.backward_s for r in self.rows.values())

    def blas_rates(self, top: int = 6, repeats: int = 3) -> dict:
        """{op: GFLOP/s} that the array library's own matrix product reaches on the op's
        product shapes timed alone (its ``top`` shapes with the most FLOPs, each the best of
        ``repeats`` calls), weighted by how often each ran. Measured once per closing."""
        if self._rates is None:
            self._rates = {}
            for name, row in self.rows.items():
                shapes = sorted(row.products.items(), key=lambda kv: -2.0 * np.prod(kv[0][:4]) * kv[1])[:top]
                if shapes:
                    flops = sum(2.0 * b * m * k * n * c for (b, m, k, n, _), c in shapes)
                    alone = sum(_product_seconds(b, m, k, n, kind, repeats) * c for (b, m, k, n, kind), c in shapes)
                    self._rates[name] = flops / alone / 1e9
        return self._rates

    def summary(self, blas: bool = True) -> list[dict]:
        """One dict per row, most time first, ``(between ops)`` last."""
        rates = self.blas_rates() if blas else {}
        out = []
        for name, r in sorted(self.rows.items(), key=lambda kv: -(kv[1].forward_s + kv[1].backward_s)):
            seconds = r.forward_s + r.backward_s
            flops = r.flops
            out.append({"op": name, "region": r.region, "calls": r.calls, "backward_calls": r.backward_calls,
                        "ms": seconds * 1e3, "forward_ms": r.forward_s * 1e3, "backward_ms": r.backward_s * 1e3,
                        "share": seconds / self.wall_s if self.wall_s else 0.0, "gflop": None if flops is None else flops / 1e9,
                        "gflop_per_s": None if flops is None or seconds == 0 else flops / seconds / 1e9,
                        "blas_gflop_per_s": rates.get(name)})
        rest = max(self.wall_s - self.recorded_s(), 0.0)
        out.append({"op": BETWEEN, "region": True, "calls": None, "backward_calls": None, "ms": rest * 1e3,
                    "forward_ms": rest * 1e3, "backward_ms": 0.0,
                    "share": rest / self.wall_s if self.wall_s else 0.0, "gflop": None, "gflop_per_s": None,
                    "blas_gflop_per_s": None})
        return out

    def table(self, per: int | None = None, blas: bool = True) -> str:
        """The summary as a text table; times divided by ``per`` (e.g. the number of updates
        profiled: default, the number of times the profile was opened)."""
        per = per or max(self.opened, 1)
        head = (f"{'op':<28} {'calls':>7} {'ms':>9} {'fwd ms':>9} {'bwd ms':>9} {'share':>6} {'GFLOP':>8} {'GFLOP/s':>8} "
                f"{'BLAS alone':>10}")
        lines = [f"wall time {self.wall_s * 1e3 / per:.1f} ms per {'update' if per > 1 or self.opened else 'run'}"
                 f" ({per} profiled)", head, "-" * len(head)]

        def num(v, fmt):  # blank where there is no figure
            return " " * int(fmt.split(".")[0]) if v is None else format(v, fmt)

        for r in self.summary(blas):
            calls = None if r["calls"] is None else r["calls"] / per
            split = (None, None) if r["region"] else (r["forward_ms"] / per, r["backward_ms"] / per)  # an op's passes
            lines.append(f"{r['op'][:28]:<28} {num(calls, '7.0f')} {r['ms'] / per:9.2f} {num(split[0], '9.2f')} "
                         f"{num(split[1], '9.2f')} "
                         f"{r['share']:6.1%} {num(None if r['gflop'] is None else r['gflop'] / per, '8.3f')} "
                         f"{num(r['gflop_per_s'], '8.1f')} {num(r['blas_gflop_per_s'], '10.1f')}")
        return "\n".join(lines)

    def save(self, path: str | Path, blas: bool = True) -> None:
        """The summary as JSON: {"wall_ms", "opened", "rows": [...]} (times in total, not per update)."""
        text = json.dumps({"wall_ms": self.wall_s * 1e3, "opened": self.opened, "rows": self.summary(blas)}, indent=2)
        path = Path(path)
        tmp = path.with_name(f".{path.name}.partial")  # renamed when whole: a crash never leaves half a file
        tmp.write_text(text + "\n")
        os.replace(tmp, path)


def profile() -> Profile:
    """A new :class:`Profile`, to open with ``with``."""
    return Profile()


def _product_seconds(batch: int, m: int, k: int, n: int, kind: tuple, repeats: int) -> float:
    """The best time of ``repeats`` products (batch, m, k) x (batch, k, n) of ``kind`` = (dtype, xp),
    made as the ops make them (``speed.products.product``)."""
    from .speed.products import product  # noqa: PLC0415 (ops import this module)

    dtype, xp = kind
    rng = np.random.default_rng(0)
    a = xp.asarray(rng.standard_normal((batch, m, k)).astype(dtype))
    b = xp.asarray(rng.standard_normal((batch, k, n)).astype(dtype))
    if batch == 1:
        a, b = a[0], b[0]
    best = np.inf
    for i in range(repeats + 1):  # the first is a warm-up: threads started, pages touched
        start = time.perf_counter()
        product(a, b)  # as the ops make them: cuBLAS directly on CuPy (speed.products.product)
        if xp is not np:
            xp.cuda.get_current_stream().synchronize()
        if i:
            best = min(best, time.perf_counter() - start)
    return best
