"""The exercise track: 25 exercises, one per lesson, in which the learner builds an engine of
their own (``lessons/exercises/exNN_*.py``, each importing the earlier ones) and, at the end,
trains the copy task on it (``lessonkit.capstone``). This module says, exercise by exercise,
what is graded, on which cases, against which minitensor or transformer call, and which
mistakes the grader recognises; ``lessonkit.grader`` runs the cases and writes the report.

Expected values come from minitensor in float64: the engine's outputs against the same op's
(``F.cross_entropy``, ``F.layer_norm``, ``F.scaled_dot_product_attention``, ...), and its
gradients against minitensor's backward of the same computation with the same output
gradient. Modules (a Linear, an attention, a layer, the whole model) are graded with
minitensor's module of the same structure holding the same weights: the grader draws the
weights, loads them into both by name, and compares outputs and every parameter's gradient.
A few exercises are judged against what the answer must equal, computed another way (the
cached decoder step against the whole sequence's forward; the gradient check against
Functions whose backward the grader has broken on purpose).

Every exercise has at least two known mistakes; ``tests/lessons/test_exercises.py`` plants
each one in the reference solution and checks that the grader names it. All but two (17 and
25) also have a hypothesis strategy (``_drawn_NN``, at the end) that makes more cases of the
same kinds at drawn sizes and values, tried once the fixed cases pass.
"""
from __future__ import annotations

import dataclasses
import math
import time
import types

import numpy as np

import minitensor as mt
import minitensor.functional as F
import transformer
from minitensor.gradcheck import numerical_gradient as _package_numerical_gradient
from transformer import masks as _masks
from transformer.embedding import sinusoidal_table as _package_table

from . import track
from .grader import Case, Exercise, Expect, Malformed, Missing, Mistake, Using, _r


# ---------------------------------------------------------------- helpers: the learner's engine beside minitensor's
def engine(ns, number="01"):
    """The learner's module of exercise ``number`` (their Tensor is ``engine(ns).Tensor``)."""
    return ns.__track__[number]


def _theirs(arrays: dict, grads: tuple, fn, cotangent_seed: int):
    """minitensor's output of ``fn(**tensors)`` and the gradients of ``grads`` for the output
    gradient drawn from ``cotangent_seed``: (output, cotangent, [gradients])."""
    ts = {k: mt.tensor(np.array(v, dtype=np.float64), requires_grad=k in grads) for k, v in arrays.items()}
    out = fn(**ts)
    w = _r(np.random.default_rng(cotangent_seed), out.shape)
    (out * mt.tensor(w)).sum().backward()
    return out.numpy(), w, [ts[k].grad.numpy() for k in grads]


def _grads_of(tensors: dict, names) -> list:
    out = []
    for k in names:
        g = tensors[k].grad
        out.append(Missing(f"{k}.grad is None: no gradient reached {k}") if g is None else g)
    return out


def op_case(title: str, call: str, arrays: dict, mine, theirs, grads=None, shown=None, seed=0,
            atol=1e-9, rtol=1e-7, start=True, twice=False, dtype="float64") -> Case:
    """A case for an operation of the learner's engine: ``mine(ns, **tensors)`` (the learner's
    Tensors, float64) against ``theirs(**tensors)`` (minitensor's): the output, then the
    gradient of each name in ``grads`` (default: every array) after a backward that starts from
    a fixed output gradient (``start=False``: from ``backward()`` with no argument, the output
    being one number; ``twice``: two backward passes, whose gradients add up). With ``dtype``
    "float32" the learner's Tensors are float32, and the output and gradients must be too
    (compared with minitensor's float64 result from the same numbers)."""
    grads = tuple(arrays) if grads is None else tuple(grads)
    exact = None if dtype == "float64" else dtype
    if exact:       # the numbers the learner's float32 Tensors hold, for minitensor's float64 result
        arrays = {k: np.asarray(v, dtype).astype(np.float64) for k, v in arrays.items()}
    out, w, want = _theirs(arrays, grads, theirs, seed)
    if twice:
        want = [2 * g for g in want]
    if not start:
        out_w = None
        ts = {k: mt.tensor(np.array(v, dtype=np.float64), requires_grad=k in grads) for k, v in arrays.items()}
        theirs(**ts).backward()
        want = [ts[k].grad.numpy() for k in grads]

    def run(ns):
        Tensor = engine(ns).Tensor
        ts = {k: Tensor(np.array(v, dtype=dtype), requires_grad=k in grads) for k, v in arrays.items()}
        y = mine(ns, **ts)
        yield y
        if not hasattr(y, "backward"):
            raise Malformed(f"got a {type(y).__name__}, not a Tensor: use the engine's operations")
        for _ in range(2 if twice else 1):
            y.backward(w.copy()) if start else y.backward()
        yield from _grads_of(ts, grads)
        yield np.bool_(all(np.array_equal(t.data, np.asarray(arrays[k], dtype)) for k, t in ts.items()))

    inputs = {**arrays, **(shown or {})}
    if start:
        inputs["output gradient"] = w
    else:
        out_w = "backward() with no argument: the output is one number, its gradient 1"
        inputs["backward"] = out_w
    if exact:
        inputs["dtypes"] = f"every input {dtype}"
    return Case(title, call, inputs, run, [Expect("the output", out, atol=atol, rtol=rtol, dtype=exact)]
                + [Expect(f"the gradient of {k}", g, atol=atol, rtol=rtol, dtype=exact) for k, g in zip(grads, want)]
                + [Expect("every input's array unchanged (an op makes new arrays; it never writes into its inputs)",
                          np.bool_(True), kind="b")])


def _seeded_weights(module: mt.nn.Module, seed: int, scale=0.5) -> dict:
    """Give minitensor's ``module`` seeded float64 weights (rounded to print); its state by name."""
    rng = np.random.default_rng(seed)
    module.astype(np.float64)
    for _, p in module.named_parameters():
        p.data[...] = np.round(rng.normal(0, scale, p.shape), 2)
    return {k: v.numpy() if hasattr(v, "numpy") else np.asarray(v) for k, v in module.state_dict().items()}


def module_case(title: str, call: str, build_mine, reference: mt.nn.Module, inputs: dict, run_mine, run_theirs,
                seed: int, shown=None, atol=1e-9, rtol=1e-7) -> Case:
    """A case for a module of the learner's: ``build_mine(ns)`` makes it; the grader loads the
    weights it gave ``reference`` (minitensor's module of the same structure and names) with the
    learner's ``load_state_dict``; ``run_mine(ns, module, **inputs)`` and
    ``run_theirs(reference, **inputs)`` give the outputs; then every parameter's gradient is
    compared, by name, after a backward from a fixed output gradient."""
    state = _seeded_weights(reference, seed)
    out = run_theirs(reference, **inputs)
    w = _r(np.random.default_rng(seed + 1), out.shape)
    (out * mt.tensor(w)).sum().backward()
    named = sorted(reference.named_parameters(), key=lambda kv: (kv[1].size, kv[0]))   # the smallest first
    want = [(k, p.grad.numpy()) for k, p in named]

    def run(ns):
        module = build_mine(ns)
        module.load_state_dict({k: v.copy() for k, v in state.items()})
        y = run_mine(ns, module, **inputs)
        yield y
        y.backward(w.copy())
        params = dict(module.named_parameters())
        for k, _ in want:
            g = params[k].grad
            yield Missing(f"the parameter {k} got no gradient: its module was not used in the computation "
                          "(or its result did not reach the output)") if g is None else g

    shown = {**(shown or inputs), "weights": f"the grader's, loaded by name ({len(state)} arrays)",
             "output gradient": w}
    return Case(title, call, shown, run, [Expect("the output", out.numpy(), atol=atol, rtol=rtol)]
                + [Expect(f"the gradient of {k} {tuple(g.shape)}", g, atol=atol, rtol=rtol) for k, g in want])


# ---------------------------------------------------------------- 01: Tensor and Function
def _cases_01():
    rng = np.random.default_rng(1)
    n = lambda shape=(): _r(rng, shape)   # noqa: E731
    specs = [
        ("x · y, one number each", "x * y", dict(x=n(), y=n()), lambda x, y: x * y),
        ("x + y, one number each", "x + y", dict(x=n(), y=n()), lambda x, y: x + y),
        ("arrays of three entries", "x * y", dict(x=n(3), y=n(3)), lambda x, y: x * y),
        ("one tensor used twice", "x * x", dict(x=n(2)), lambda x: x * x),
        ("x reaches the output along two paths", "(x + y) * x", dict(x=n(3), y=n(3)), lambda x, y: (x + y) * x),
        ("a diamond", "u = x * y; (u + x) * u", dict(x=n(2), y=n(2)),
         lambda x, y: (lambda u: (u + x) * u)(x * y)),
        ("u is used at two depths of the graph", "u = x * y; (u * u + x) * u", dict(x=n(2), y=n(2)),
         lambda x, y: (lambda u: (u * u + x) * u)(x * y)),
        ("three inputs, (2, 2) arrays", "x * y + y * z + z * x", dict(x=n((2, 2)), y=n((2, 2)), z=n((2, 2))),
         lambda x, y, z: x * y + y * z + z * x),
    ]
    cases = [op_case(title, f"out = {formula}; out.backward(output gradient)", arrays,
                     lambda ns, f=f, **t: f(**t), lambda f=f, **t: f(**t), seed=10 + i)
             for i, (title, formula, arrays, f) in enumerate(specs)]
    cases.insert(1, op_case("backward() with no gradient starts from 1", "out = x * y; out.backward()",
                            dict(x=n(), y=n()), lambda ns, x, y: x * y, lambda x, y: x * y, start=False))
    cases.append(op_case("a second backward adds to .grad", "out = x * y; out.backward(output gradient); "
                         "out.backward(output gradient)", dict(x=n(2), y=n(2)), lambda ns, x, y: x * y,
                         lambda x, y: x * y, seed=19, twice=True))
    x, y = n(2), n(2)
    cases.append(_twice_through_add(x, y, _r(rng, 2)))
    cases.append(_add_then_add(n(2), n(2), _r(rng, 2)))
    cases.append(_float32_case(n(2), n(2), _r(rng, 2)))
    cases.append(_float32_case(n(2), n(2), None))
    cases.append(_only_through_stop(n(2), n(2)))
    cases.append(_constant_case(n(2), n(2)))
    cases.append(_ones_of_its_shape(n(2)))
    x, y = n(2), n(2)
    cases.append(op_case("a Function whose backward gives an input None (the grader's Stop)",
                         "u = x * y; out = Stop(u) + u + Stop(x * x); out.backward(output gradient)",
                         dict(x=x, y=y), lambda ns, x, y: _stopped(ns, x, y),
                         lambda x, y: (lambda u: u.detach() + u + (x * x).detach())(x * y), seed=20,
                         shown={"Stop": "the grader's Function: forward passes x on, backward gives (None,)"}))
    cases.append(_counted_case(n(2), n(2)))
    cases.append(op_case("30 doublings: u = u + u, 2^30 paths from x to the output", "u = x; 30 times: u = u + u; "
                         "u.backward(output gradient)", dict(x=n(2)), lambda ns, x: _doubled(x, 30),
                         lambda x: _doubled(x, 30), seed=22))
    cases.append(_deep_chain_case(n(2)))
    cases.append(_leaf_backward_case(n(2)))
    cases.append(_held_grad_case(n(2)))
    cases.append(_own_grad_case(n(2), n(2)))
    cases.append(_one_array_two_leaves_case(n(2)))
    return cases


def _own_grad_case(x, g) -> Case:
    """x + y hands one array to both inputs: each leaf's .grad must still be an array of its own,
    sharing memory neither with the other's nor with the caller's output gradient."""
    def run(ns):
        Tensor = engine(ns).Tensor
        tx, ty = Tensor(x.copy(), requires_grad=True), Tensor(x.copy(), requires_grad=True)
        given = g.copy()
        (tx + ty).backward(given)
        yield from _grads_of({"x": tx, "y": ty}, "xy")
        arrays = [a for a in (tx.grad, ty.grad) if isinstance(a, np.ndarray)]
        yield np.bool_(len(arrays) == 2 and not np.shares_memory(arrays[0], arrays[1])
                       and not any(np.shares_memory(a, given) for a in arrays))
    return Case("x + y: each leaf's .grad an array of its own (not the other's, not the output gradient given)",
                "out = x + y; out.backward(output gradient)", {"x": x, "y": x, "output gradient": g}, run,
                [Expect("the gradient of x", g), Expect("the gradient of y", g),
                 Expect("x.grad, y.grad and the output gradient three separate arrays", np.bool_(True), kind="b")])


def _held_grad_case(x) -> Case:
    """A second backward adds to .grad with a new array: the array a caller took from .grad after
    the first keeps its numbers ("never change an array in place that someone else holds")."""
    def run(ns):
        tx = engine(ns).Tensor(x.copy(), requires_grad=True)
        (tx * tx).backward(np.ones(2))
        first = tx.grad
        kept = None if first is None else np.array(first, copy=True)
        (tx * tx).backward(np.ones(2))
        yield tx.grad if tx.grad is not None else Missing("x.grad is None: no gradient reached x")
        yield Missing("x.grad is None after the first backward") if first is None else np.bool_(
            np.array_equal(first, kept))
    return Case("a second backward adds up, leaving the array taken from .grad after the first as it was",
                "(x * x).backward(ones); first = x.grad; (x * x).backward(ones)", {"x": x}, run,
                [Expect("the gradient of x", 4 * x), Expect("first unchanged", np.bool_(True), kind="b")])


def _leaf_backward_case(x) -> Case:
    """backward on a leaf itself adds its seed to .grad like any other gradient: after
    (x · x).backward(), x.backward() adds 1 to 2x."""
    def run(ns):
        tx = engine(ns).Tensor(x.copy(), requires_grad=True)
        (tx * tx).backward(np.ones(2))
        tx.backward(np.ones(2))
        yield tx.grad if tx.grad is not None else Missing("x.grad is None: no gradient reached x")
    return Case("backward on a leaf: its gradient (ones) adds to what .grad holds", "(x * x).backward(ones); "
                "x.backward(ones)", {"x": x}, run, [Expect("the gradient of x", 2 * x + 1)])


def _one_array_two_leaves_case(a) -> Case:
    """Two leaves made over one array are two tensors: the walk tells tensors apart, not arrays."""
    def run(ns):
        Tensor = engine(ns).Tensor
        shared = a.copy()
        tx, ty = Tensor(shared, requires_grad=True), Tensor(shared, requires_grad=True)
        (tx * ty).backward(np.ones(2))
        yield from _grads_of({"x": tx, "y": ty}, "xy")
    return Case("two leaves over one array: x = Tensor(a), y = Tensor(a)", "x, y = Tensor(a, requires_grad=True), "
                "Tensor(a, requires_grad=True); (x * y).backward(ones)", {"a": a}, run,
                [Expect("the gradient of x", a), Expect("the gradient of y", a)])


def _deep_chain_case(x, depth=5000) -> Case:
    """A chain five times deeper than Python's recursion limit (1,000 calls), as lesson 1 builds:
    a walk of the graph that calls itself for each input fails with a RecursionError."""
    def run(ns):
        tx = engine(ns).Tensor(x.copy(), requires_grad=True)
        u = tx
        for _ in range(depth):
            u = u * 1.0001
        u.backward(np.ones(x.shape))
        yield tx.grad if tx.grad is not None else Missing("x.grad is None: no gradient reached x")
    return Case(f"a chain {depth:,} operations deep, beyond Python's recursion limit (1,000 calls)",
                f"u = x; {depth} times: u = u * 1.0001; u.backward(ones)", {"x": x}, run,
                [Expect("the gradient of x (1.0001^5000 in each entry)", np.full(x.shape, 1.0001 ** depth), rtol=1e-9)])


def _doubled(u, times):
    for _ in range(times):
        u = u + u
    return u


def _graders_functions(ns):
    """Two Functions of the grader's, made from the learner's Function: ``Product`` (x · y; it
    counts how often its backward runs) and ``Stop`` (passes x on; its backward gives x None)."""
    Function = engine(ns).Function

    class Product(Function):
        calls = 0

        def forward(self, x, y):
            self.x, self.y = x, y
            return x * y

        def backward(self, grad):
            type(self).calls += 1
            return grad * self.y, grad * self.x

    class Stop(Function):
        def forward(self, x):
            return x.copy()

        def backward(self, grad):
            return (None,)
    return Product, Stop


def _stopped(ns, x, y):
    _, Stop = _graders_functions(ns)
    u = x * y
    return Stop.apply(u) + u + Stop.apply(x * x)


def _twice_through_add(x, y, g) -> Case:
    """x + y gives both inputs the one array it was given: a learner who keeps it as .grad and
    adds in place changes the caller's gradient and the other input's .grad."""
    def run(ns):
        Tensor = engine(ns).Tensor
        tx, ty = Tensor(x.copy(), requires_grad=True), Tensor(y.copy(), requires_grad=True)
        mine = g.copy()
        out = tx + ty
        out.backward(mine)
        out.backward(mine)
        yield from _grads_of({"x": tx, "y": ty}, "xy")
        yield mine
    return Case("two backward passes through x + y, with one gradient array", "g = output gradient; out = x + y; "
                "out.backward(g); out.backward(g)", {"x": x, "y": y, "output gradient": g}, run,
                [Expect("the gradient of x", 2 * g), Expect("the gradient of y", 2 * g),
                 Expect("g after the two calls (the caller's array: yours must not change it)", g, atol=0, rtol=0)])


def _add_then_add(x, y, g) -> Case:
    """(x + y) + x: the outer Add hands one array to x + y and to x, and the inner one hands it on to
    x and y; a learner who adds the gradients reaching x in place changes y's and the caller's."""
    def run(ns):
        Tensor = engine(ns).Tensor
        tx, ty = Tensor(x.copy(), requires_grad=True), Tensor(y.copy(), requires_grad=True)
        mine = g.copy()
        ((tx + ty) + tx).backward(mine)
        yield from _grads_of({"x": tx, "y": ty}, "xy")
        yield mine
    return Case("one gradient array handed on along two paths", "g = output gradient; out = (x + y) + x; "
                "out.backward(g)", {"x": x, "y": y, "output gradient": g}, run,
                [Expect("the gradient of x", 2 * g), Expect("the gradient of y", g),
                 Expect("g after the call (the caller's array: yours must not change it)", g, atol=0, rtol=0)])


def _float32_case(x, y, g) -> Case:
    """float32 tensors with a float64 output gradient, or with none (``g`` None: the seed of ones
    is made in the output's dtype)."""
    x, y = x.astype(np.float32), y.astype(np.float32)
    seed = np.ones(2) if g is None else g

    def run(ns):
        Tensor = engine(ns).Tensor
        tx, ty = Tensor(x.copy(), requires_grad=True), Tensor(y.copy(), requires_grad=True)
        (tx * ty).backward() if g is None else (tx * ty).backward(g.copy())
        yield from _grads_of({"x": tx, "y": ty}, "xy")
    if g is None:
        title, call, shown = ("float32 tensors, backward() with no gradient: the seed of ones is float32",
                              "out = x * y; out.backward()",
                              {"x": x, "y": y, "dtypes": "x and y float32"})
    else:
        title, call, shown = ("float32 tensors, a float64 output gradient", "out = x * y; out.backward(output gradient)",
                              {"x": x, "y": y, "output gradient": g, "dtypes": "x and y float32, the output gradient "
                                                                               "float64"})
    return Case(title, call, shown, run,
                [Expect("the gradient of x (float32, x's dtype)", (seed * y).astype(np.float32), atol=1e-6,
                        rtol=1e-6, dtype="float32"),
                 Expect("the gradient of y (float32, y's dtype)", (seed * x).astype(np.float32), atol=1e-6,
                        rtol=1e-6, dtype="float32")])


def _ones_of_its_shape(x) -> Case:
    """backward() on an output of two entries starts from ones of that shape (not one number,
    which broadcasting would carry through x · y but not through x + x)."""
    def run(ns):
        tx = engine(ns).Tensor(x.copy(), requires_grad=True)
        (tx + tx).backward()
        yield tx.grad if tx.grad is not None else Missing("x.grad is None: no gradient reached x")
    return Case("backward() with no gradient on an output of two entries: the seed is ones of its shape",
                "out = x + x; out.backward()", {"x": x}, run, [Expect("the gradient of x", np.full(2, 2.0))])


def _constant_case(x, c) -> Case:
    """A Tensor made without requires_grad is a constant: it gets no .grad, whatever it meets."""
    def run(ns):
        Tensor = engine(ns).Tensor
        tx, tc = Tensor(x.copy(), requires_grad=True), Tensor(c.copy())
        (tx * tc).backward(np.ones(2))
        yield tx.grad if tx.grad is not None else Missing("x.grad is None: no gradient reached x")
        yield np.bool_(tc.grad is None)
    return Case("a constant (a Tensor without requires_grad) gets no .grad", "c = Tensor(c); out = x * c; "
                "out.backward(ones)", {"x": x, "c": c}, run,
                [Expect("the gradient of x", c), Expect("c.grad is None", np.bool_(True), kind="b")])


def _only_through_stop(x, y) -> Case:
    """w reaches the output only through Stop, whose backward gives None: w gets no gradient at all."""
    def run(ns):
        Tensor = engine(ns).Tensor
        _, Stop = _graders_functions(ns)
        tx, tw = Tensor(x.copy(), requires_grad=True), Tensor(y.copy(), requires_grad=True)
        (Stop.apply(tw * tx) + tx * tx).backward(np.ones(2))
        yield tx.grad if tx.grad is not None else Missing("x.grad is None: no gradient reached x")
        yield np.bool_(tw.grad is None)
    return Case("a leaf reached only through a None edge keeps .grad None", "out = Stop(w * x) + x * x; "
                "out.backward(ones)", {"x": x, "w": y, "Stop": "the grader's Function: forward passes x on, "
                                                            "backward gives (None,)"}, run,
                [Expect("the gradient of x", 2 * x), Expect("w.grad is None (not zeros)", np.bool_(True), kind="b")])


def _counted_case(x, y) -> Case:
    """Each Function's backward runs once per backward pass: a walk that reaches u along each of
    its paths and passes u's gradient on from each runs u's Product again."""
    f = lambda x, y: (lambda u: (u * u + u) * u)(x * y)   # noqa: E731
    out, w, want = _theirs(dict(x=x, y=y), ("x", "y"), f, 21)

    def run(ns):
        Tensor = engine(ns).Tensor
        Product, _ = _graders_functions(ns)
        tx, ty = Tensor(x.copy(), requires_grad=True), Tensor(y.copy(), requires_grad=True)
        u = Product.apply(tx, ty)
        out = Product.apply(Product.apply(u, u) + u, u)
        out.backward(w.copy())
        yield from _grads_of({"x": tx, "y": ty}, "xy")
        yield Product.calls
    return Case("each Function's backward runs once per pass (the grader's Product counts)",
                "u = Product(x, y); out = Product(Product(u, u) + u, u); out.backward(output gradient)",
                {"x": x, "y": y, "Product": "the grader's Function x · y, counting its backward's runs",
                 "output gradient": w}, run,
                [Expect("the gradient of x", want[0]), Expect("the gradient of y", want[1]),
                 Expect("how often a Product's backward ran (3 Products, once each)", 3, kind="i")])


def _backward_with(order="topological", accumulate=True, start="given", leaves="add", none="skip"):
    """Tensor.backward with one thing wrong (the known mistakes of exercise 01)."""
    def backward(self, grad=None):
        order_, seen, stack = [], set(), [self]
        while stack:                  # breadth first: a tensor may come before all its users
            t = stack.pop(0)
            if id(t) in seen:
                continue
            seen.add(id(t))
            order_.append(t)
            if t.creator is not None:
                stack.extend(t.creator.inputs)
        if order == "topological":
            order_ = _topological(self)
        first = np.ones_like(self.data) if grad is None or start == "ones" else np.asarray(grad)
        first = first if start == "uncast" else first.astype(self.data.dtype, copy=False)
        if order == "every path":     # each gradient passed on at once, along every path
            return _push(self, first)
        grads = {id(self): first}
        for t in order_:
            g = grads.pop(id(t), None)
            if g is None and none == "skip":
                continue
            if t.creator is None:
                if t.requires_grad:
                    if leaves == "in place" and t.grad is not None:
                        t.grad += g
                    elif leaves == "in place":
                        t.grad = g
                    else:
                        t.grad = g if t.grad is None or leaves == "assign" else t.grad + g
                continue
            for x, gx in zip(t.creator.inputs, t.creator.backward(g)):
                if (gx is not None or none == "keep") and x.requires_grad:
                    grads[id(x)] = grads[id(x)] + gx if accumulate and id(x) in grads else gx
    return backward


def _push(t, g) -> None:
    """Backward by recursion: each tensor passes every gradient it receives straight on."""
    if t.creator is None:
        if t.requires_grad:
            t.grad = g if t.grad is None else t.grad + g
        return
    for x, gx in zip(t.creator.inputs, t.creator.backward(g)):
        if gx is not None and x.requires_grad:
            _push(x, gx)


def _topological(root) -> list:
    order, seen = [], set()

    def visit(t):
        if id(t) in seen:
            return
        seen.add(id(t))
        if t.creator is not None:
            for x in t.creator.inputs:
                visit(x)
        order.append(t)
    visit(root)
    return order[::-1]


MISTAKES_01 = (
    Mistake("a tensor reached along two paths keeps only the last path's gradient: add the gradients that reach "
            "it", {"Tensor.backward": _backward_with(accumulate=False)}),
    Mistake("the graph is walked breadth first, so a tensor passes its gradient on before every tensor that used "
            "it has added to it: walk it in reverse topological order",
            {"Tensor.backward": _backward_with(order="breadth first")}),
    Mistake("a second backward replaced .grad: add the new gradient to what .grad already holds",
            {"Tensor.backward": _backward_with(leaves="assign")}),
    Mistake("the gradient you are given is ignored: start from it (from ones only when it is None)",
            {"Tensor.backward": _backward_with(start="ones")}),
    Mistake("the output gradient you were given, or one array two tensors share, was changed in place: .grad held "
            "the very array backward was given (x + y hands both inputs that one array), and += on it changed them "
            "all; store a copy, or add with t.grad = t.grad + g", {"Tensor.backward": _backward_with(leaves="in place")}),
    Mistake("the gradient you were given was used as it came: start from np.asarray(grad, dtype=self.data.dtype), "
            "so that float32 tensors get float32 gradients", {"Tensor.backward": _backward_with(start="uncast")}),
    Mistake("a Function's backward gave None for an input, and None was passed on: skip an input whose gradient is "
            "None, and a tensor that received no gradient", {"Tensor.backward": _backward_with(none="keep")}),
    Mistake("a Function's backward ran more than once in one pass: the walk reached a tensor along each path to it "
            "and passed its gradient on from each; visit each tensor once, after every tensor that used it",
            {"Tensor.backward": _backward_with(order="every path")}),
    Mistake("each input's gradient is the output's gradient times the *other* input: ∂(x·y)/∂x = y",
            {"Mul.backward": lambda self, grad: (grad * self.x, grad * self.y)}),
    Mistake("y gets no gradient from x + y: both inputs get the output's gradient unchanged",
            {"Add.backward": lambda self, grad: (grad, None)}),
)


# ---------------------------------------------------------------- 02: sum_to and the matrix product
def _cases_02():
    rng = np.random.default_rng(2)
    cases = []
    for g_shape, shape, title in [((3,), (3,), "nothing to sum: the shapes agree"),
                                  ((2, 3), (3,), "an axis broadcasting added in front"),
                                  ((2, 3), (1, 3), "a size-1 axis"), ((2, 3), (2, 1), "a size-1 axis last"),
                                  ((2, 3, 4), (3, 1), "both: a new axis in front and a size-1 axis"),
                                  ((2, 3), (), "down to one number"), ((2, 1, 4), (1, 1, 4), "a size-1 axis of grad"),
                                  ((2, 3, 4), (3, 1), "a float32 grad: the sum is float32 too"),
                                  ((1, 2, 3), (2, 1), "a new axis of size 1 in front, and a size-1 axis"),
                                  ((2, 3, 4, 5), (5,), "three new axes in front"),
                                  ((0, 3), (1, 3), "an axis of size 0 broadcast from 1: its sum is 0")]:
        g = _r(rng, g_shape).astype(np.float32 if "float32" in title else np.float64)
        want = g.sum(axis=tuple(range(len(g_shape) - len(shape))))
        want = want.sum(axis=tuple(i for i, k in enumerate(shape) if k == 1), keepdims=True) if shape else want

        def run(ns, g=g, shape=shape):
            yield ns.sum_to(g.copy(), shape)
        cases.append(Case(title, "sum_to(grad, shape)", {"grad": g, "shape": shape}, run,
                          [Expect("", want, atol=1e-6 if g.dtype == np.float32 else 1e-9, dtype=str(g.dtype))]))
    mm = [("two matrices", (2, 3), (3, 2)), ("a row times a matrix", (1, 3), (3, 4)),
          ("a stack of matrices times one matrix", (2, 2, 3), (3, 2)),
          ("two stacks", (2, 2, 3), (2, 3, 2)), ("stacks that broadcast", (2, 1, 2, 3), (3, 3, 2)),
          ("a stack of 3 times a stack of 1: y's gradient summed back to one", (3, 2, 3), (1, 3, 2))]
    for i, (title, a, b) in enumerate(mm):
        cases.append(op_case(f"x @ y: {title}", "out = x @ y; out.backward(output gradient)",
                             dict(x=_r(rng, a), y=_r(rng, b)), lambda ns, x, y: x @ y, lambda x, y: x @ y, seed=20 + i))
    cases.append(op_case("x + y and x · y broadcast", "out = (x + y) * y; out.backward(output gradient)",
                         dict(x=_r(rng, (2, 3)), y=_r(rng, (3,))), lambda ns, x, y: (x + y) * y,
                         lambda x, y: (x + y) * y, seed=30))
    cases.append(op_case("x @ y, backward twice: the gradients add up (backward keeps what it reads)",
                         "out = x @ y; out.backward(output gradient); out.backward(output gradient)",
                         dict(x=_r(rng, (2, 3)), y=_r(rng, (3, 2))), lambda ns, x, y: x @ y, lambda x, y: x @ y,
                         seed=31, twice=True))
    return cases


def _sum_leading(grad, shape):
    extra = grad.ndim - len(shape)
    return grad.sum(axis=tuple(range(extra))) if extra > 0 else grad


def _sum_without_keepdims(grad, shape):
    grad = _sum_leading(grad, shape)
    axes = tuple(i for i, k in enumerate(shape) if k == 1 and grad.shape[i] != 1)
    return grad.sum(axis=axes) if axes else grad


def _matmul_backward(transposed=True, reduce=True):
    def make(mod):
        def backward(self, grad):
            t = (lambda a: np.swapaxes(a, -1, -2)) if transposed is True else (lambda a: a.T) if transposed == "T" \
                else (lambda a: a)
            gx, gy = grad @ t(self.y), t(self.x) @ grad
            return (mod.sum_to(gx, self.x.shape), mod.sum_to(gy, self.y.shape)) if reduce else (gx, gy)
        return backward
    return Using(make)


MISTAKES_02 = (
    Mistake("only the axes broadcasting added in front are summed: also sum, keeping them, the axes where shape "
            "has a 1", {"sum_to": _sum_leading}),
    Mistake("the size-1 axes are summed away: keep them (keepdims=True), so that the result has the shape asked for",
            {"sum_to": _sum_without_keepdims}),
    Mistake("the gradients need the other matrix transposed: grad @ yᵀ for x and xᵀ @ grad for y",
            {"MatMul.backward": _matmul_backward(transposed=False)}),
    Mistake(".T reverses every axis of a stack of matrices: swap only the last two (np.swapaxes(a, -1, -2))",
            {"MatMul.backward": _matmul_backward(transposed="T")}),
    Mistake("the gradient of a broadcast stack is not brought back to its input's shape: sum_to(..., x.shape)",
            {"MatMul.backward": _matmul_backward(reduce=False)}),
)


# ---------------------------------------------------------------- 03: the gradient check
def _cases_03():
    rng = np.random.default_rng(3)
    specs = [((1,), 1e-4, "one entry", "cubes"), ((2,), 1e-4, "two entries", "cubes"),
             ((3,), 1e-4, "three entries", "cubes"), ((2, 3), 1e-4, "a (2, 3) array", "cubes"),
             ((1, 4, 1), 1e-4, "size-1 axes", "cubes"),
             ((2, 2), 1e-2, "a larger eps: the result must use the eps it is given", "cubes"),
             ((3,), 1e-4, "the product of the entries: each partial depends on the others", "product"),
             ((2, 2), 1e-3, "the product of a (2, 2) array's entries", "product")]
    cases = [_numerical_case(title, _r(rng, shape), _r(rng, shape), eps, form) for shape, eps, title, form in specs]
    transposed = np.random.default_rng(31)
    cases.append(_numerical_case("a transposed (3, 2) array, not contiguous: x.reshape(-1) is a copy of it, not a "
                                 "view", _r(transposed, (3, 2)), _r(transposed, (3, 2)), 1e-4, "cubes", transposed=True))
    checks = [("the engine's own x · y: right", 1.0, 1.0, (3,), True, {}),
              ("a backward that doubles x's gradient: wrong", 2.0, 1.0, (3,), False, {}),
              ("a backward wrong in its second input only: wrong", 1.0, -1.0, (2, 2), False, {}),
              ("a backward 1% off in x: wrong", 1.01, 1.0, (2, 3), False, {}),
              ("a backward wrong in one entry of x only: wrong", "one entry", 1.0, (2, 3), False, {}),
              ("a backward that gives x no gradient (None): wrong", None, 1.0, (2,), False, {}),
              ("a backward right only when every output's gradient is 1: wrong", "mean", 1.0, (2, 2), False, {}),
              ("a right backward on (3, 2) arrays: right", 1.0, 1.0, (3, 2), True, {}),
              ("a backward that halves x's gradient, every entry positive: wrong", 0.5, 1.0, (3,), False,
               dict(positive=True)),
              ("a backward 1% off, on small numbers (0.01): wrong", 1.01, 1.0, (3,), False, dict(scale=0.01)),
              ("a right backward on large numbers (about 3000): the relative tolerance matters", 1.0, 1.0, (3,), True,
               dict(scale=3000.0)),
              ("a right backward, a tiny gradient among large numbers: the absolute tolerance matters", 1.0, 1.0,
               (3,), True, dict(tiny=True)),
              ("fn does not use x (x's .grad stays None; its gradient is 0): right", "unused", 1.0, (2,), True, {}),
              ("fn calls a Tensor's method on its input (x.relu(), x > 0): right", "relu", 1.0, (2,), True,
               dict(positive=True)),
              ("the arrays hold integers (np.arange): right", 1.0, 1.0, (3,), True, dict(integers=True)),
              ("one number out, a backward that ignores the output's gradient: wrong (the weight of a single "
               "output matters too)", "scalar", 1.0, (3,), False, {}),
              ("a backward that gives NaN: wrong (NaN agrees with nothing)", float("nan"), 1.0, (2,), False, {})]
    for title, sx, sy, shape, right, how in checks:
        x, y = _r(rng, shape), _r(rng, shape)
        if how.get("positive"):
            x, y = np.abs(x) + 0.5, np.abs(y) + 0.5
        if "scale" in how:
            x, y = np.round(x * how["scale"], 2), np.round(y * how["scale"], 2)
        while how.get("tiny"):   # x's gradient w·y at entry 1 is 1e-4; its central difference is off by round-off
            x, y = np.round(rng.uniform(20, 40, shape), 1), np.round(rng.uniform(20, 40, shape), 1)
            y[1] = 1e-4
            w = np.random.default_rng(1234).uniform(0.5, 1.5, size=shape)   # the exercise's weights(shape)
            numeric = _package_numerical_gradient(lambda a: float((a * y * w).sum()), x.copy(), 1e-6)
            off = np.abs(w * y - numeric)
            if np.all(off <= 1e-5 + 1e-4 * np.abs(numeric)) and not np.all(off <= 1e-4 * np.abs(numeric)):
                break
        if how.get("integers"):
            x, y = np.arange(1, 4), np.arange(2, 5)
        cases.append(_gradcheck_case(title, x, y, sx, sy, right))
    cases.append(_exact_gradcheck_case())
    x, y = np.abs(_r(rng, (3,))) + 0.5, np.abs(_r(rng, (3,))) + 0.5
    cases.append(_gradcheck_case("a backward 1.8 times too large, atol = 0, rtol = 0.5: wrong (the tolerance is "
                                 "relative to the numerical gradient)", x, y, 1.8, 1.0, False, atol=0.0, rtol=0.5))
    cases.append(_gradcheck_case("a gradient of shape (1,) for inputs of shape (3,), right once broadcast: wrong (a "
                                 "gradient has its input's shape)", np.array([0.5, 0.7, 0.9]), np.array([0.1, 0.2, 0.3]),
                                 "one row", 1.0, False))
    cases.append(_gradcheck_case("one small entry wrong among large ones: each entry against its own tolerance",
                                 np.array([0.5, 0.7]), np.array([0.001, 100.0]), "one entry", 1.0, False))
    cases.append(_gradcheck_case("a backward 0.001% off, with atol = 0 and rtol = 1e-7: wrong (the tolerances "
                                 "given, not the defaults)", x, y, 1.00001, 1.0, False, atol=0.0, rtol=1e-7))
    cases.append(_gradcheck_case("a backward 0.1% off, with rtol = 0.01: right (the tolerances given, not the "
                                 "defaults)", x, y, 1.001, 1.0, True, rtol=0.01))
    cases.append(_gradcheck_case("a backward 5e-5 off where the gradient is 0: wrong (the default atol is 1e-5, "
                                 "not 1e-4)", np.array([0.5, -0.7, 0.9]), np.zeros(3), "offset", 1.0, False))
    cases.append(_gradcheck_case("a backward 0.005% off on gradients near 1000: right (the default rtol is 1e-4, "
                                 "not 1e-5)", np.array([0.5, -0.7, 0.9]), np.array([1000.0, 1200.0, 900.0]), 1.00005,
                                 1.0, True))
    return cases


def _numerical_case(title, x, c, eps, form, transposed=False) -> Case:
    """numerical_gradient on sum(c·x³) (each partial depends on its own entry alone) or on the
    product of x's entries (each depends on all the others: differencing at a point left moved
    shows). The tolerance is eps/1000: well below the O(eps) error of a wrong point, well above
    round-off. ``transposed``: the learner's x is the transpose of a C-contiguous array, a view
    whose entries a reshape copies instead of reaching."""
    if transposed:
        x, c = x.T, c.T
    f = (lambda c: lambda a: float((c * a**3).sum()))(c) if form == "cubes" else (lambda a: float(np.prod(a)))
    if form == "product":
        x = np.round(np.abs(x) + 0.5, 1)

    def run(ns):
        mine = x.T.copy().T if transposed else x.copy()
        yield ns.numerical_gradient(f, mine, eps)
        yield mine

    shown = {"f(x)": "sum(c * x**3)", "c": c} if form == "cubes" else {"f(x)": "the product of x's entries"}
    return Case(f"numerical_gradient: {title}", "numerical_gradient(f, x, eps)", {**shown, "x": x, "eps": eps}, run,
                [Expect("the result", _package_numerical_gradient(f, x.copy(), eps), atol=eps / 1000, rtol=1e-7),
                 Expect("x after the call (every entry put back exactly as it was)", x, atol=0, rtol=0)])


def _gradcheck_case(title, x, y, sx, sy, right, **options) -> Case:
    def run(ns):
        yield ns.gradcheck(_product(ns, sx, sy), [x.copy(), y.copy()], **options)
    special = {"unused": "a Function y · y whose backward returns (None, 2y) times the output's gradient: x is "
                         "not used",
               "relu": "Product(x.relu(), y), Product a Function x · y whose backward returns (y, x) times the "
                       "output's gradient",
               "sum": "a Function x + y whose backward returns the output's gradient to both",
               "scalar": "a Function sum(x · y), one number, whose backward returns (y, x), whatever the output's "
                         "gradient",
               "one entry": "a Function x · y whose backward returns (y, x) times the output's gradient, its first "
                            "entry of x's doubled",
               "one row": "a Function sum(x + y), one number, whose backward returns the output's gradient as an "
                          "array of shape (1,) to each input",
               "offset": "a Function x · y whose backward returns (y times the output's gradient + 5e-5, x times "
                         "the output's gradient)"}
    fn = special[sx] if sx in special else \
        f"a Function x · y whose backward returns ({_scale_text(sx, 'y')}, {_scale_text(sy, 'x')})" + \
        ("" if sx == "mean" else " times the output's gradient")
    shown = {"fn": fn, "x": x, "y": y, **options}
    call = "gradcheck(fn, [x, y]" + "".join(f", {k}={v}" for k, v in options.items()) + ")"
    return Case(f"gradcheck: {title}", call, shown, run, [Expect("", np.bool_(right), kind="b")])


def _exact_gradcheck_case() -> Case:
    """x + y, whose central differences are exact at any step: for inputs where they are exact
    in floating point too, a gradient within a tolerance of 0 agrees ("within" includes equal)."""
    rng = np.random.default_rng(33)
    w = np.random.default_rng(1234).uniform(0.5, 1.5, size=(2,))   # the exercise's weights((2,))
    while True:
        x, y = _r(rng, 2), _r(rng, 2)
        f = lambda a, b: float(((a + b) * w).sum())   # noqa: E731
        if np.array_equal(_package_numerical_gradient(lambda a: f(a, y), x.copy(), 1.0), w) and \
                np.array_equal(_package_numerical_gradient(lambda b: f(x, b), y.copy(), 1.0), w):
            break
    return _gradcheck_case("x + y, whose differences are exact, with atol = rtol = 0: right", x, y, "sum", 1.0, True,
                           eps=1.0, atol=0.0, rtol=0.0)


def _scale_text(s, other):
    if s == "mean":
        return f"the mean of the output's gradient times {other}"
    return "None" if s is None else other if s == 1.0 else f"−{other}" if s == -1.0 else f"{s:g}·{other}"


def _product(ns, sx, sy):
    """x · y as a Function of the learner's engine whose backward is scaled by (sx, sy) (None: no
    gradient); "unused": y · y, giving x None; "relu": x.relu() · y; "sum": x + y; "scalar":
    sum(x · y), whose backward ignores the output's gradient."""
    class Product(engine(ns).Function):
        def forward(self, x, y):
            self.x, self.y = x, y
            if sx == "one row":
                return (x + y).sum()
            return x + y if sx == "sum" else y * y if sx == "unused" else (x * y).sum() if sx == "scalar" else x * y

        def backward(self, grad):
            if sx == "sum":
                return grad, grad
            if sx == "scalar":
                return self.y, self.x
            if sx == "one row":
                return grad.reshape(1), grad.reshape(1)
            if sx == "one entry":
                gx = grad * self.y
                gx.flat[0] *= 2
                return gx, grad * self.x
            if sx == "unused":
                return None, 2 * grad * self.y
            if sx == "mean":     # each entry's own output gradient replaced by their mean: right for ones only
                return grad.mean() * self.y, grad * self.x * sy
            if sx == "offset":   # 5e-5 too much in every entry of x's gradient
                return grad * self.y + 5e-5, grad * self.x * sy
            return (None if sx is None else grad * self.y * (1.0 if sx == "relu" else sx)), grad * self.x * sy
    if sx == "relu":
        return lambda x, y: Product.apply(x.relu(), y)
    return lambda x, y: Product.apply(x, y)


def _one_sided(f, x, eps, sign=1):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[i] = sign * eps
        g[i] = (f(x + step) - f(x)) / (sign * eps)
    return g


def _central(f, x, eps, denominator=2):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[i] = eps
        g[i] = (f(x + step) - f(x - step)) / (denominator * eps)
    return g


def _not_restored(f, x, eps):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        x[i] += eps
        plus = f(x)
        x[i] -= 2 * eps
        g[i] = (plus - f(x)) / (2 * eps)    # x[i] stays eps below where it was
    return g


def _copied_not_restored(f, x, eps):
    x = x.copy()                            # the caller's x is safe, but the point moves
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        x[i] += eps
        plus = f(x)
        x[i] -= 2 * eps
        g[i] = (plus - f(x)) / (2 * eps)    # x[i] stays eps below where it was for the entries after it
    return g


def _gradcheck_inputs(mod, which, weighted=True, every=np.all):
    """gradcheck comparing only the inputs ``which`` picks (a list of indices); without
    ``weighted``, the outputs summed with equal weights; ``every`` np.any: one entry that agrees
    is enough."""
    Tensor = mod.__track__["01"].Tensor

    def gradcheck(fn, arrays, eps=1e-6, atol=1e-5, rtol=1e-4):
        arrays = [np.array(a, dtype=np.float64) for a in arrays]
        inputs = [Tensor(a.copy(), requires_grad=True) for a in arrays]
        out = fn(*inputs)
        w = mod.weights(out.shape) if weighted else np.ones(out.shape)
        (out * Tensor(w)).sum().backward()
        for k in which(len(arrays)):
            def loss(a, k=k):
                return float((fn(*[Tensor(a if j == k else b) for j, b in enumerate(arrays)]).data * w).sum())
            numeric = mod.numerical_gradient(loss, arrays[k].copy(), eps)
            analytic = np.zeros_like(numeric) if inputs[k].grad is None else inputs[k].grad
            if not every(np.abs(analytic - numeric) <= atol + rtol * np.abs(numeric)):
                return False
        return True
    return gradcheck


MISTAKES_03 = (
    Mistake("this is the one-sided difference (f(x + eps·e_i) − f(x)) / eps: its error is O(eps), the central "
            "one's O(eps²)", dict(numerical_gradient=_one_sided)),
    Mistake("this is the one-sided difference (f(x) − f(x − eps·e_i)) / eps: its error is O(eps), the central "
            "one's O(eps²)", dict(numerical_gradient=lambda f, x, eps: _one_sided(f, x, eps, -1))),
    Mistake("twice the gradient: the two points x ± eps·e_i are 2·eps apart",
            dict(numerical_gradient=lambda f, x, eps: _central(f, x, eps, 1))),
    Mistake("every entry is the same number: you moved all of x at once; move one entry at a time",
            dict(numerical_gradient=lambda f, x, eps: np.full_like(x, (f(x + eps) - f(x - eps)) / (2 * eps)))),
    Mistake("your result does not change with eps: use the eps you are given",
            dict(numerical_gradient=lambda f, x, eps: _central(f, x, 1e-6))),
    Mistake("x is left changed after each entry: put every entry back before moving the next one",
            dict(numerical_gradient=_not_restored)),
    Mistake("each entry was differenced at a point where the entries before it were still moved (by −eps): working "
            "on a copy keeps the caller's x, but put every entry back before moving the next one",
            dict(numerical_gradient=_copied_not_restored)),
    Mistake("only the first input's gradient is checked: check every input",
            dict(gradcheck=Using(lambda mod: _gradcheck_inputs(mod, lambda n: range(1))))),
    Mistake("no input's gradient is compared: return False as soon as one entry of one input disagrees",
            dict(gradcheck=Using(lambda mod: _gradcheck_inputs(mod, lambda n: range(0))))),
    Mistake("the outputs were summed with equal weights: a backward that is right only for an output gradient of "
            "ones then passes; weigh them with weights(out.shape)",
            dict(gradcheck=Using(lambda mod: _gradcheck_inputs(mod, range, weighted=False)))),
    Mistake("one entry that agrees was enough: every entry of every input must agree (np.all), a single one off "
            "fails the check", dict(gradcheck=Using(lambda mod: _gradcheck_inputs(mod, range, every=np.any)))),
)


# ---------------------------------------------------------------- 04: log-softmax and the smoothed loss
def _cases_04():
    rng = np.random.default_rng(4)
    cases = [op_case(f"log_softmax: {title}", "out = log_softmax(x); out.backward(output gradient)",
                     dict(x=_r(rng, shape) + shift), lambda ns, x: ns.log_softmax(x),
                     lambda x: F.log_softmax(x, axis=-1), seed=40 + i)
             for i, (shape, shift, title) in enumerate([((2,), 0.0, "two entries"), ((2, 3), 0.0, "two rows"),
                                                        ((2, 2, 4), 0.0, "three axes: over the last"),
                                                        ((2, 3), 1000.0, "entries near 1000: exp overflows unless "
                                                                         "the row's largest entry is subtracted"),
                                                        ((2, 3), np.array([[1000.0], [0.0]]),
                                                         "one row near 1000, one near 0: each row's own largest "
                                                         "entry"),
                                                        ((1, 3), np.array([[-400.0, 400.0, 0.0]]),
                                                         "a row spanning 800: subtract its largest entry, not its "
                                                         "smallest")])]
    cases.append(op_case("log_softmax, backward twice: the gradients add up (backward keeps what it reads)",
                         "out = log_softmax(x); out.backward(output gradient); out.backward(output gradient)",
                         dict(x=_r(rng, (2, 3))), lambda ns, x: ns.log_softmax(x), lambda x: F.log_softmax(x, axis=-1),
                         seed=47, twice=True))
    specs = [((1, 2), 0.0, None, "no smoothing (ε = 0): plain cross-entropy"), ((1, 3), 0.1, None, "three classes"),
             ((2, 4), 0.1, None, "two positions"), ((3, 5), 1.0, None, "ε = 1: the target is uniform"),
             ((2, 3, 5), 0.1, None, "a batch of sequences (B, T, V)"),
             ((2, 4, 5), 0.1, 0, "pad positions count for nothing, in the sum or in the count"),
             ((2, 3), 0.1, None, "logits near 1000"),
             ((2, 3), 0.1, "all", "every position is pad: the sum, 0, divided by 1")]
    for i, (shape, eps, pad, title) in enumerate(specs):
        logits = _r(rng, shape) + (1000.0 if "1000" in title else 0.0)
        target = rng.integers(1, shape[-1], shape[:-1])
        if pad == "all":
            target[...] = 0
        elif pad is not None:
            target[0, -2:] = pad
            target[1, -1] = pad
        pad_id = 0 if pad is not None else -1

        def mine(ns, logits, target=target, eps=eps, pad_id=pad_id):
            return ns.cross_entropy(logits, target.copy(), eps, pad_id)

        def theirs(logits, target=target, eps=eps, pad_id=pad_id):
            n = int((target != pad_id).sum())    # divided by 1 when every position is pad
            return transformer.label_smoothed_loss(logits, mt.tensor(target), pad_id, eps, reduction="sum") / max(1, n)
        cases.append(op_case(f"cross_entropy: {title}", "loss = cross_entropy(logits, target, smoothing, pad); "
                             "loss.backward()", dict(logits=logits), mine, theirs,
                             shown={"target": target, "smoothing": eps, "pad": pad_id}, start=False))
    cases.append(_float32_loss_case(_r(rng, (2, 4)), rng.integers(1, 4, 2)))
    cases.append(op_case("log_softmax: float32 entries give a float32 output and a float32 gradient",
                         "out = log_softmax(x); out.backward(output gradient)", dict(x=_r(rng, (2, 3))),
                         lambda ns, x: ns.log_softmax(x), lambda x: F.log_softmax(x, axis=-1), seed=48,
                         atol=1e-5, rtol=1e-5, dtype="float32"))
    target = rng.integers(1, 4, 2)
    cases.append(op_case("cross_entropy: float32 logits give a float32 loss and a float32 gradient",
                         "loss = cross_entropy(logits, target, smoothing, pad); loss.backward()",
                         dict(logits=_r(rng, (2, 4))), lambda ns, logits: ns.cross_entropy(logits, target.copy(), 0.1, 0),
                         lambda logits: transformer.label_smoothed_loss(logits, mt.tensor(target), 0, 0.1),
                         shown={"target": target, "smoothing": 0.1, "pad": 0}, start=False, atol=1e-5, rtol=1e-5,
                         dtype="float32"))
    cases.append(_negative_pad_case())
    cases.append(_negative_pad_case(pad=4))
    return cases


def _negative_pad_case(pad=-1) -> Case:
    """A pad id that is no class, present in the targets (−1, or V): a pad position is found by its
    id before any use of the targets as class indices (clipped, or read as one, it would be a class)."""
    rng = np.random.default_rng(41)
    logits, target = _r(rng, (2, 3, 4)), rng.integers(0, 4, (2, 3))
    target[0, -1] = target[1, 0] = pad
    n = int((target != pad).sum())
    safe = np.where(target == pad, 0, target)
    weights = mt.tensor((target != pad).astype(np.float64))
    what = "a negative id" if pad < 0 else "one past the last class"
    return op_case(f"cross_entropy: pad = {pad} in the targets, {what}", "loss = cross_entropy(logits, target, "
                   "smoothing, pad); loss.backward()", dict(logits=logits),
                   lambda ns, logits: ns.cross_entropy(logits, target.copy(), 0.1, pad),
                   lambda logits: (F.cross_entropy(logits, mt.tensor(safe), label_smoothing=0.1, reduction="none")
                                   * weights).sum() / n,
                   shown={"target": target, "smoothing": 0.1, "pad": pad}, start=False)


def _float32_loss_case(logits, target) -> Case:
    """The loss of float32 logits is float32: q is made in the logits' dtype."""
    logits = logits.astype(np.float32)
    want = transformer.label_smoothed_loss(mt.tensor(logits.astype(np.float64)), mt.tensor(target), 0, 0.1).numpy()

    def run(ns):
        yield ns.cross_entropy(engine(ns).Tensor(logits.copy(), requires_grad=True), target.copy(), 0.1, 0).data
    return Case("cross_entropy: float32 logits give a float32 loss", "cross_entropy(logits, target, smoothing, pad)",
                {"logits": logits, "dtype": "float32", "target": target, "smoothing": 0.1, "pad": 0}, run,
                [Expect("the loss (float32)", want, atol=1e-5, rtol=1e-5, dtype="float32")])


def _log_softmax_unshifted(self, x):
    self.out = x - np.log(np.exp(x).sum(axis=-1, keepdims=True))
    return self.out


def _cross_entropy(mod, smoothing_over="V", count="real", divide=True):
    Tensor = mod.__track__["01"].Tensor

    def cross_entropy(logits, target, smoothing, pad):
        V = logits.shape[-1]
        target = np.asarray(target)
        real = target != pad
        spread = smoothing / (V - 1 if smoothing_over == "V-1" else V)
        on = 1 - smoothing + (0 if smoothing_over == "V-1" else spread)
        q = np.full(logits.shape, spread)
        np.put_along_axis(q, target[..., None], on, axis=-1)
        q *= real[..., None]
        n = real.sum() if count == "real" else real.size
        loss = -(mod.log_softmax(logits) * Tensor(q)).sum()
        return loss / max(1, int(n)) if divide else loss
    return cross_entropy


MISTAKES_04 = (
    Mistake("exp overflowed: subtract each row's largest entry before exp (log softmax does not change)",
            {"LogSoftmax.forward": _log_softmax_unshifted}),
    Mistake("the backward of log softmax is grad − softmax(x)·Σgrad: the softmax term is missing",
            {"LogSoftmax.backward": lambda self, grad: (grad,)}),
    Mistake("the smoothing mass is spread over the V − 1 other tokens: label smoothing as Szegedy et al. define it "
            "(the paper's reference for it) and PyTorch computes it puts ε/V on every token, the true one included",
            dict(cross_entropy=Using(lambda m: _cross_entropy(m, "V-1")))),
    Mistake("divided by every position, pad included: divide by the number of non-pad positions",
            dict(cross_entropy=Using(lambda m: _cross_entropy(m, count="all")))),
    Mistake("the sum is not divided: the loss is per non-pad position",
            dict(cross_entropy=Using(lambda m: _cross_entropy(m, divide=False)))),
)


# ---------------------------------------------------------------- 05: Module, Linear, Adam
def _modules_05(ns):
    """The grader's small modules, built from the learner's Module, Parameter and Linear."""
    Module, P, Linear = ns.Module, ns.Parameter, ns.Linear
    rng = np.random.default_rng(0)

    class One(Module):
        def __init__(self):
            self.weight = P(np.ones(2))

    class Two(Module):
        def __init__(self):
            self.a, self.scale, self.b = Linear(2, 3, rng), P(np.ones(1)), Linear(3, 1, rng)

    class Stack(Module):
        def __init__(self):
            self.layers = [Two(), Two()]
            self.out = Linear(1, 1, rng)

    class Shared(Module):
        def __init__(self):
            self.first = Linear(1, 2, rng)
            self.again = self.first.weight
            self.note = "not a parameter"

    class Constant(Module):
        def __init__(self):
            self.table = ns.Tensor(np.ones(3))     # a constant: no gradient wanted
            self.weight = P(np.ones(2))

    class Listed(Module):
        def __init__(self):
            self.ps = [P(np.ones(2)), P(np.ones(1))]
            self.out = Linear(1, 1, rng)

    class Private(Module):
        def __init__(self):
            self.lin = Linear(1, 1, rng)
            self._scale = P(np.ones(1))
    return {"One": One, "Two": Two, "Stack": Stack, "Shared": Shared, "Constant": Constant, "Listed": Listed,
            "Private": Private}


_NAMES_05 = {
    "One": ("a parameter attribute", ["weight"]),
    "Two": ("modules inside: their names get the attribute's name in front",
            ["a.weight", "a.bias", "scale", "b.weight", "b.bias"]),
    "Stack": ("a list of modules: layers.0, layers.1, ...",
              [f"layers.{i}.{n}" for i in range(2) for n in ("a.weight", "a.bias", "scale", "b.weight", "b.bias")]
              + ["out.weight", "out.bias"]),
    "Shared": ("one parameter held by two attributes: named once, by the first", ["first.weight", "first.bias"]),
    "Constant": ("a Tensor that needs no gradient is not a parameter", ["weight"]),
    "Listed": ("a list of parameters: ps.0, ps.1", ["ps.0", "ps.1", "out.weight", "out.bias"]),
    "Private": ("an attribute whose name starts with _ holds a parameter too", ["lin.weight", "lin.bias", "_scale"]),
}


def _adam_reference(params: list, grads: list, lr, betas, eps, lrs=None) -> list:
    """minitensor's Adam on ``params``: the parameters after each step (grads[t] is step t's; None
    where a parameter has no gradient at that step; ``lrs[t]``, when given, step t's lr)."""
    ps = [mt.tensor(np.array(p, dtype=np.float64), requires_grad=True) for p in params]
    opt = mt.optim.Adam(ps, lr=lr, betas=betas, eps=eps)
    out = []
    for t, step in enumerate(grads):
        if lrs is not None:
            opt.lr = lrs[t]
        for p, g in zip(ps, step):
            p.grad = None if g is None else mt.tensor(np.array(g, dtype=np.float64))
        opt.step()
        out.append([p.numpy().copy() for p in ps])
    return out


def _cases_05():
    rng = np.random.default_rng(5)
    cases = []
    for cls, (title, names) in _NAMES_05.items():
        def run(ns, cls=cls):
            named = _modules_05(ns)[cls]().named_parameters()
            if not isinstance(named, list):
                raise Malformed(f"named_parameters must return a list of (name, Tensor) pairs; it returned a "
                                f"{type(named).__name__}")
            yield [name for name, _ in named]
        cases.append(Case(f"named_parameters: {title}", f"{cls}().named_parameters()",
                          {"the module": _MODULE_TEXT_05[cls]}, run, [Expect("the names, in order", names, kind="s")]))
    for i, (n_in, n_out, lead) in enumerate([(1, 1, (1,)), (3, 2, (2,)), (2, 3, (2, 2)), (2, 2, (3,))]):
        x = _r(rng, lead + (n_in,))
        cases.append(module_case(f"Linear({n_in}, {n_out}) on x of shape {x.shape}", "out = Linear(...)(x)",
                                 lambda ns, a=n_in, b=n_out: ns.Linear(a, b, np.random.default_rng(0)),
                                 mt.nn.Linear(n_in, n_out), {"x": x},
                                 lambda ns, m, x: m(engine(ns).Tensor(x)), lambda m, x: m(mt.tensor(x)), seed=50 + i))
    # (title, shapes, steps, hyper-parameters, the (step, parameter) pairs without a gradient)
    for title, shapes, steps, hyper, gaps in [
            ("one step of one parameter", [(1,)], 1, (0.01, (0.9, 0.98), 1e-9), ()),
            ("three steps of two parameters", [(2,), (2, 3)], 3, (0.01, (0.9, 0.98), 1e-9), ()),
            ("other settings of lr, betas and eps", [(3,)], 3, (0.1, (0.5, 0.8), 1e-3), ()),
            ("a parameter without a gradient is left alone", [(2,), (2,)], 2, (0.01, (0.9, 0.98), 1e-9),
             ((0, 1), (1, 1))),
            ("a gradient at step 1 and none at step 2: the parameter stays where step 1 left it", [(2,), (2,)], 2,
             (0.01, (0.9, 0.98), 1e-9), ((1, 1),)),
            ("a first step without any gradient still counts: t is 2 at the second", [(2,)], 2,
             (0.01, (0.9, 0.98), 1e-9), ((0, 0),)),
            ("opt.lr changed between steps, as exercise 16's schedule does: each step uses the lr of its time",
             [(2,)], 3, (0.01, (0.9, 0.98), 1e-9), ())]:
        params = [_r(rng, s) for s in shapes]
        grads = [[None if (t, k) in gaps else _r(rng, s) for k, s in enumerate(shapes)] for t in range(steps)]
        lrs = [0.01, 0.5, 0.02] if "changed" in title else None
        want = _adam_reference(params, grads, *hyper, lrs=lrs)

        def run(ns, params=params, grads=grads, hyper=hyper, lrs=lrs):
            ps = [ns.Parameter(p.copy()) for p in params]
            opt = ns.Adam(ps, lr=hyper[0], betas=hyper[1], eps=hyper[2])
            for t, step in enumerate(grads):
                if lrs is not None:
                    opt.lr = lrs[t]
                opt.zero_grad()
                for p, g in zip(ps, step):
                    p.grad = None if g is None else g.copy()
                opt.step()
                yield from (p.data.copy() for p in ps)
                yield np.bool_(all(p.grad is None if g is None else np.array_equal(p.grad, g) for p, g in zip(ps, step)))
        lr, betas, eps = hyper
        shown = {"params": params, "grads (one list per step)": grads, "lr": lr, "betas": betas, "eps": eps}
        if lrs is not None:
            shown["opt.lr before each step"] = lrs
        cases.append(Case(f"Adam: {title}", "Adam(params, lr, betas, eps); then, for each step: set .grad; step()",
                          shown, run,
                          [e for t, step in enumerate(want) for e in
                           [Expect(f"after step {t + 1}: parameter {k}", w, atol=1e-12, rtol=1e-8)
                            for k, w in enumerate(step)]
                           + [Expect(f"after step {t + 1}: every .grad as it was set (step() only reads them)",
                                     np.bool_(True), kind="b")]]))
    cases.append(_adam_in_place_case())
    return cases


def _adam_in_place_case() -> Case:
    """step() changes each parameter's array itself: an array held before the step (a view of the
    weights, a tied embedding) holds the new values after it."""
    rng = np.random.default_rng(55)
    p0, g0 = _r(rng, (3,)), _r(rng, (3,))
    want = _adam_reference([p0], [[g0]], 0.01, (0.9, 0.98), 1e-9)[0][0]

    def run(ns):
        p = ns.Parameter(p0.copy())
        held = p.data
        opt = ns.Adam([p], lr=0.01, betas=(0.9, 0.98), eps=1e-9)
        p.grad = g0.copy()
        opt.step()
        yield held
    return Case("Adam: the step changes the parameter's array in place", "held = p.data; set p.grad; step(); held",
                {"p": p0, "grad": g0, "lr": 0.01, "betas": (0.9, 0.98), "eps": 1e-9}, run,
                [Expect("the array held before the step, after it (p.data -= ...: the same array)", want,
                        atol=1e-12, rtol=1e-8)])


_MODULE_TEXT_05 = {
    "One": "weight = Parameter(ones(2))",
    "Two": "a = Linear(2, 3); scale = Parameter(ones(1)); b = Linear(3, 1)",
    "Stack": "layers = [Two(), Two()]; out = Linear(1, 1)",
    "Shared": "first = Linear(1, 2); again = first.weight; note = 'not a parameter'",
    "Constant": "table = Tensor(ones(3)); weight = Parameter(ones(2))",
    "Listed": "ps = [Parameter(ones(2)), Parameter(ones(1))]; out = Linear(1, 1)",
    "Private": "lin = Linear(1, 1); _scale = Parameter(ones(1))",
}


def _named_parameters(prefixes=True, lists=True, once=True, every_tensor=False):
    def named_parameters(self):
        seen, out = set(), []

        def walk(module, prefix):
            for name, value in vars(module).items():
                if isinstance(value, list):
                    items = [(f"{name}.{i}", v) for i, v in enumerate(value)] if lists else []
                else:
                    items = [(name, value)]
                for key, item in items:
                    if hasattr(item, "requires_grad") and (item.requires_grad or every_tensor):
                        if once and id(item) in seen:
                            continue
                        seen.add(id(item))
                        out.append(((prefix if prefixes else "") + key, item))
                    elif hasattr(item, "named_parameters"):
                        walk(item, prefix + key + ".")
        walk(self, "")
        return out
    return named_parameters


def _adam_step(correct=True, eps_inside=False, kept="m and v", t_per="step"):
    def step(self):
        if t_per == "step":
            self.t += 1
        b1, b2 = self.betas
        for p, m, v in zip(self.params, self.m, self.v):
            if p.grad is None:
                continue
            if t_per == "parameter":
                self.t += 1
            if "m" in kept:
                m *= b1
                m += (1 - b1) * p.grad
            else:        # a new array, bound to the loop's name only: self.m stays zero
                m = b1 * m + (1 - b1) * p.grad
            if "v" in kept:
                v *= b2
                v += (1 - b2) * p.grad**2
            else:
                v = b2 * v + (1 - b2) * p.grad**2
            mh, vh = (m / (1 - b1**self.t), v / (1 - b2**self.t)) if correct else (m, v)
            p.data -= self.lr * mh / (np.sqrt(vh + self.eps) if eps_inside else np.sqrt(vh) + self.eps)
    return step


MISTAKES_05 = (
    Mistake("a parameter inside a module needs the module's attribute name in front: 'a.weight', not 'weight'",
            {"Module.named_parameters": _named_parameters(prefixes=False)}),
    Mistake("the modules in a list attribute are missed: name them layers.0, layers.1, ...",
            {"Module.named_parameters": _named_parameters(lists=False)}),
    Mistake("a parameter held by two attributes is listed twice: list each parameter once",
            {"Module.named_parameters": _named_parameters(once=False)}),
    Mistake("a Tensor that needs no gradient (requires_grad False) is a constant, not a parameter",
            {"Module.named_parameters": _named_parameters(every_tensor=True)}),
    Mistake("the bias b is not added", {"Linear.forward": lambda self, x: x @ self.weight}),
    Mistake("the bias corrections are missing: divide m by 1 − β1ᵗ and v by 1 − β2ᵗ",
            {"Adam.step": _adam_step(correct=False)}),
    Mistake("ε goes outside the square root: √v̂ + ε", {"Adam.step": _adam_step(eps_inside=True)}),
    Mistake("the running averages did not carry over to the next step: m = β1·m + ... makes a new array that "
            "self.m never sees; update the stored arrays in place (m *= β1; m += ...) or store the new ones back",
            {"Adam.step": _adam_step(kept="")}),
    Mistake("the average of the gradients did not carry over to the next step: m = β1·m + ... makes a new array "
            "that self.m never sees; update it in place (m *= β1; m += ...) or store the new one back",
            {"Adam.step": _adam_step(kept="v")}),
    Mistake("the average of the squared gradients did not carry over to the next step: v = β2·v + ... makes a new "
            "array that self.v never sees; update it in place or store the new one back",
            {"Adam.step": _adam_step(kept="m")}),
    Mistake("t was advanced once per parameter: it counts steps, once per call of step()",
            {"Adam.step": _adam_step(t_per="parameter")}),
)


# ---------------------------------------------------------------- 06: Xavier initialisation and dropout
def _cases_06():
    from minitensor.ops.dropout import dropped
    rng = np.random.default_rng(6)
    cases = []
    for fan_in, fan_out, seed in [(1, 1, 0), (2, 3, 1), (3, 2, 2), (4, 4, 3)]:
        a = math.sqrt(6.0 / (fan_in + fan_out))    # as mt.nn.init.xavier_uniform_
        want = np.random.default_rng(seed).uniform(-a, a, size=(fan_in, fan_out))

        def run(ns, fan_in=fan_in, fan_out=fan_out, seed=seed):
            yield ns.xavier_uniform(fan_in, fan_out, np.random.default_rng(seed))
        cases.append(Case(f"xavier_uniform: {fan_in} × {fan_out}", "xavier_uniform(fan_in, fan_out, rng)",
                          {"fan_in": fan_in, "fan_out": fan_out, "rng": f"np.random.default_rng({seed})",
                           "the bound a": round(a, 6)}, run, [Expect("", want, atol=1e-12)]))
    for i, (shape, p, training, title) in enumerate([((4,), 0.5, True, "p = 0.5"), ((2, 3), 0.1, True, "p = 0.1"),
                                                     ((2, 3), 0.3, False, "not training: x itself"),
                                                     ((3,), 0.0, True, "p = 0: x itself"),
                                                     ((2, 2, 3), 0.25, True, "three axes"),
                                                     ((2, 3), 0.5, True, "a float32 x: the output and its gradient "
                                                                         "stay float32")]):
        dtype = np.float32 if "float32" in title else np.float64
        x, seed = _r(rng, shape).astype(dtype), 60 + i
        keep = np.random.default_rng(seed).random(shape) >= p
        out = dropped(x, keep, p) if training and p > 0 else x
        w = _r(np.random.default_rng(seed + 100), shape)
        gx = dropped(w.astype(dtype), keep, p) if training and p > 0 else w.astype(dtype)
        itself = not (training and p > 0)
        tol = 1e-6 if dtype == np.float32 else 1e-12

        def run(ns, x=x, p=p, training=training, seed=seed, w=w, itself=itself):
            t = engine(ns).Tensor(x.copy(), requires_grad=True)
            drawn = np.random.default_rng(seed)
            y = ns.dropout(t, p, drawn, training=training)
            yield y
            if itself:   # x itself: the same Tensor, and nothing drawn from rng
                yield np.bool_(y is t and drawn.random() == np.random.default_rng(seed).random())
            else:
                yield np.bool_(np.array_equal(t.data, x))
            y.backward(w.copy())
            yield Missing("x.grad is None") if t.grad is None else t.grad
        cases.append(Case(f"dropout: {title}", "out = dropout(x, p, rng, training=training); "
                          "out.backward(output gradient)",
                          {"x": x, "p": p, "training": training, "rng": f"np.random.default_rng({seed})",
                           "output gradient": w}, run,
                          [Expect("the output", out, atol=tol, dtype=np.dtype(dtype).name)]
                          + [Expect("out is x itself, and rng was not drawn from", np.bool_(True), kind="b") if itself
                             else Expect("x's array unchanged (the output is a new array)", np.bool_(True), kind="b")]
                          + [Expect("the gradient of x", gx, atol=tol, dtype=np.dtype(dtype).name)]))
    cases.append(_two_dropouts_case(_r(rng, (6,))))
    return cases


def _two_dropouts_case(x, p=0.5, seed=70) -> Case:
    """dropout(dropout(x)): each Dropout's backward drops with its own mask, the one its forward
    drew (a mask kept anywhere but on the Function itself is the second call's in both)."""
    from minitensor.ops.dropout import dropped  # noqa: PLC0415
    drawn = np.random.default_rng(seed)
    first, second = drawn.random(x.shape) >= p, drawn.random(x.shape) >= p
    w = _r(np.random.default_rng(seed + 100), x.shape)
    out = dropped(dropped(x, first, p), second, p)
    gx = dropped(dropped(w, second, p), first, p)

    def run(ns):
        t = engine(ns).Tensor(x.copy(), requires_grad=True)
        rng = np.random.default_rng(seed)
        y = ns.dropout(ns.dropout(t, p, rng, training=True), p, rng, training=True)
        yield y
        y.backward(w.copy())
        yield Missing("x.grad is None") if t.grad is None else t.grad
    return Case("dropout twice: dropout(dropout(x)), each backward with its own mask",
                "out = dropout(dropout(x, p, rng, training=True), p, rng, training=True); out.backward(output gradient)",
                {"x": x, "p": p, "rng": f"np.random.default_rng({seed}), drawn from by both calls in turn",
                 "output gradient": w}, run,
                [Expect("the output", out, atol=1e-12), Expect("the gradient of x", gx, atol=1e-12)])


def _dropout_forward(keep_below=False, scale="divide"):
    def forward(self, x, p, rng):
        draw = rng.random(x.shape)
        keep = draw < p if keep_below else draw >= p
        self.scale = keep / (1.0 - p) if scale == "divide" else keep * (1.0 - p) if scale == "multiply" else keep * 1.0
        return x * self.scale
    return forward


MISTAKES_06 = (
    Mistake("a = √(2 / (fan_in + fan_out)) is the standard deviation of Xavier's normal version; the uniform "
            "one's bound is √(6 / (fan_in + fan_out))",
            dict(xavier_uniform=lambda i, o, rng: rng.uniform(-math.sqrt(2 / (i + o)), math.sqrt(2 / (i + o)),
                                                              size=(i, o)))),
    Mistake("the bound uses fan_in alone: Xavier's is √(6 / (fan_in + fan_out))",
            dict(xavier_uniform=lambda i, o, rng: rng.uniform(-math.sqrt(6 / i), math.sqrt(6 / i), size=(i, o)))),
    Mistake("the entries drawn below p are the ones dropped: keep = rng.random(shape) >= p",
            {"Dropout.forward": _dropout_forward(keep_below=True)}),
    Mistake("the kept entries are multiplied by 1 − p: divide by it, so that the expected output is x",
            {"Dropout.forward": _dropout_forward(scale="multiply")}),
    Mistake("the kept entries are not scaled: divide them by 1 − p, so that the expected output is x",
            {"Dropout.forward": _dropout_forward(scale="none")}),
    Mistake("the backward lets the gradient through every entry: only the kept ones, scaled by 1/(1 − p)",
            {"Dropout.backward": lambda self, grad: (grad,)}),
    Mistake("dropout also runs when not training: at evaluation it is the identity",
            dict(dropout=Using(lambda m: lambda x, p, rng, training:
                               m.Dropout.apply(x, p=p, rng=rng) if p > 0 else x))),
)


# ---------------------------------------------------------------- 07: LayerNorm
def _cases_07():
    rng = np.random.default_rng(7)
    cases = []
    for i, (shape, eps, title) in enumerate([((1, 2), 1e-5, "one vector of two entries"),
                                             ((2, 3), 1e-5, "two vectors"), ((2, 4), 0.1, "a large eps"),
                                             ((2, 2, 3), 1e-5, "three axes: normalise over the last"),
                                             ((3, 5), 1e-5, "five entries each"),
                                             ((2, 3), 1e-5, "entries near a million: the variance from (x − μ)², "
                                                            "not E[x²] − μ²")]):
        arrays = dict(x=_r(rng, shape) + (1e6 if "million" in title else 0.0), gamma=_r(rng, shape[-1:]) + 1.0,
                      beta=_r(rng, shape[-1:]))
        cases.append(op_case(f"LayerNormFunction: {title}",
                             "out = LayerNormFunction.apply(x, gamma, beta, eps=eps); out.backward(output gradient)",
                             arrays, lambda ns, x, gamma, beta, eps=eps: ns.LayerNormFunction.apply(x, gamma, beta,
                                                                                                     eps=eps),
                             lambda x, gamma, beta, eps=eps: F.layer_norm(x, gamma, beta, eps), shown={"eps": eps},
                             seed=70 + i))
    arrays = dict(x=_r(rng, (2, 3)), gamma=_r(rng, (3,)) + 1.0, beta=_r(rng, (3,)))
    cases.append(op_case("LayerNormFunction, backward twice: the gradients add up (backward keeps what it reads)",
                         "out = LayerNormFunction.apply(x, gamma, beta, eps=eps); out.backward(output gradient) twice",
                         arrays, lambda ns, x, gamma, beta: ns.LayerNormFunction.apply(x, gamma, beta, eps=1e-5),
                         lambda x, gamma, beta: F.layer_norm(x, gamma, beta, 1e-5), shown={"eps": 1e-5}, seed=77,
                         twice=True))
    cases.append(op_case("LayerNormFunction: float32 in, float32 out (the output and every gradient)",
                         "out = LayerNormFunction.apply(x, gamma, beta, eps=eps); out.backward(output gradient)",
                         arrays, lambda ns, x, gamma, beta: ns.LayerNormFunction.apply(x, gamma, beta, eps=1e-5),
                         lambda x, gamma, beta: F.layer_norm(x, gamma, beta, 1e-5), shown={"eps": 1e-5}, seed=76,
                         atol=1e-5, rtol=1e-4, dtype="float32"))
    four = np.random.default_rng(78)
    arrays = dict(x=_r(four, (2, 2, 2, 3)), gamma=_r(four, (3,)) + 1.0, beta=_r(four, (3,)))
    cases.append(op_case("LayerNormFunction: four axes: γ's and β's gradients sum over all three leading ones",
                         "out = LayerNormFunction.apply(x, gamma, beta, eps=eps); out.backward(output gradient)",
                         arrays, lambda ns, x, gamma, beta: ns.LayerNormFunction.apply(x, gamma, beta, eps=1e-5),
                         lambda x, gamma, beta: F.layer_norm(x, gamma, beta, 1e-5), shown={"eps": 1e-5}, seed=78))
    return cases


def _ln_forward(ddof=0, eps_outside=False):
    def forward(self, x, gamma, beta, eps):
        mu = x.mean(axis=-1, keepdims=True)
        var = ((x - mu) ** 2).sum(axis=-1, keepdims=True) / (x.shape[-1] - ddof)
        self.rstd = 1.0 / (np.sqrt(var) + eps) if eps_outside else 1.0 / np.sqrt(var + eps)
        self.xhat, self.gamma = (x - mu) * self.rstd, gamma
        return self.xhat * gamma + beta
    return forward


def _ln_backward(mean_term=True, xhat_term=True, param_axes="all", gamma=True):
    def backward(self, grad):
        g = grad * self.gamma if gamma else grad
        dx = g - (g.mean(axis=-1, keepdims=True) if mean_term else 0) \
            - (self.xhat * (g * self.xhat).mean(axis=-1, keepdims=True) if xhat_term else 0)
        axes = tuple(range(grad.ndim - 1)) if param_axes == "all" else 0
        return dx * self.rstd, (grad * self.xhat).sum(axis=axes), grad.sum(axis=axes)
    return backward


MISTAKES_07 = (
    Mistake("the variance is divided by n − 1: LayerNorm's is the biased one, divided by n",
            {"LayerNormFunction.forward": _ln_forward(ddof=1)}),
    Mistake("eps goes inside the square root: √(σ² + eps)",
            {"LayerNormFunction.forward": _ln_forward(eps_outside=True)}),
    Mistake("dx misses − mean(g): every entry of x moves μ, so each gets a share of the others' gradient",
            {"LayerNormFunction.backward": _ln_backward(mean_term=False)}),
    Mistake("dx misses − x̂ · mean(g · x̂): every entry of x moves σ too",
            {"LayerNormFunction.backward": _ln_backward(xhat_term=False)}),
    Mistake("dγ and dβ are summed over the first axis only: sum over every axis but the last",
            {"LayerNormFunction.backward": _ln_backward(param_axes="first")}),
    Mistake("γ is left out of dx: the output is x̂ · γ + β, so the gradient reaching x̂ is g = grad · γ",
            {"LayerNormFunction.backward": _ln_backward(gamma=False)}),
)


# ---------------------------------------------------------------- 08: attention with masks
def _cases_08():
    rng = np.random.default_rng(8)
    cases = [op_case(f"softmax: {title}", "out = softmax(x); out.backward(output gradient)",
                     dict(x=_r(rng, shape) + shift), lambda ns, x: ns.softmax(x), lambda x: F.softmax(x, axis=-1),
                     seed=80 + i)
             for i, (shape, shift, title) in enumerate([((3,), 0.0, "three entries"),
                                                        ((2, 3), 0.0, "over the last axis"),
                                                        ((2, 3), 1000.0, "entries near 1000"),
                                                        ((2, 3), np.array([[1000.0], [0.0]]),
                                                         "one row near 1000, one near 0: each row's own largest "
                                                         "entry")])]
    for T in (1, 2, 4, 0):
        def run(ns, T=T):
            yield ns.causal_mask(T)
        cases.append(Case(f"causal_mask({T})", "causal_mask(T)", {"T": T}, run,
                          [Expect("", np.asarray(_masks.causal_mask(T).numpy(), bool), kind="b")]))
    specs = [("one query, one key", (1, 1, 2), (1, 1, 2), None),
             ("two queries, three keys", (1, 2, 2), (1, 3, 2), None),
             ("d_k = 4: the scores are divided by √4", (1, 2, 4), (1, 2, 4), None),
             ("a causal mask", (1, 3, 2), (1, 3, 2), "causal"),
             ("a padding mask: the last key of the second sequence is padding", (2, 2, 2), (2, 3, 2), "padding"),
             ("heads: (B, h, T, d_k) with a causal mask", (1, 2, 3, 2), (1, 2, 3, 2), "causal")]
    for i, (title, qs, ks, kind) in enumerate(specs):
        arrays = dict(q=_r(rng, qs), k=_r(rng, ks), v=_r(rng, ks[:-1] + (4,)))   # d_v = 4: never Tk
        if kind == "causal":
            mask = np.tril(np.ones((qs[-2], ks[-2]), bool))
        elif kind == "padding":
            mask = np.ones((ks[0], 1, ks[-2]), bool)
            mask[1, 0, -1] = False
        else:
            mask = None
        cases.append(op_case(f"attention: {title}", "out = attention(q, k, v, mask); out.backward(output gradient)",
                             arrays, lambda ns, q, k, v, mask=mask: ns.attention(q, k, v, mask),
                             lambda q, k, v, mask=mask: F.scaled_dot_product_attention(
                                 q, k, v, None if mask is None else mt.tensor(mask)),
                             shown={"mask": "None" if mask is None else mask}, seed=85 + i))
    # the docstring's −1e9, where minitensor's own attention differs (it gives a query with no key
    # to attend to zeros): a query whose keys are all masked, and scores below −10⁴
    by_the_docstring = lambda q, k, v, mask: F.softmax(F.masked_fill(   # noqa: E731
        (q @ k.transpose(-1, -2)) / float(np.sqrt(q.shape[-1])), mt.tensor(~mask), -1e9), axis=-1) @ v
    for i, (title, arrays, mask) in enumerate([
            ("a query whose every key is masked: all scores −1e9, so equal weights (the mean of v)",
             dict(q=_r(rng, (1, 2, 2)), k=_r(rng, (1, 2, 2)), v=_r(rng, (1, 2, 3))), np.array([[True, False],
                                                                                             [False, False]])),
            ("scores below −10⁴: the masked ones, at −1e9, are lower still",
             dict(q=np.array([[[100.0]]]), k=np.array([[[-200.0], [0.1]]]), v=_r(rng, (1, 2, 2))),
             np.array([[True, False]])),
            ("a mask False everywhere: every query gets equal weights",
             dict(q=_r(rng, (1, 2, 2)), k=_r(rng, (1, 2, 2)), v=_r(rng, (1, 2, 3))), np.zeros((2, 2), bool))]):
        cases.append(op_case(f"attention: {title}", "out = attention(q, k, v, mask); out.backward(output gradient)",
                             arrays, lambda ns, q, k, v, mask=mask: ns.attention(q, k, v, mask),
                             lambda q, k, v, mask=mask: by_the_docstring(q, k, v, mask), shown={"mask": mask},
                             seed=95 + i))
    return cases


def _attention(mod, scale="sqrt", mask_means="may attend", fill=-1e9, mask_at="scores"):
    def attention(q, k, v, mask=None):
        d = v.shape[-1] if scale == "d_v" else q.shape[-1]
        s = q @ k.transpose()
        s = s / {"sqrt": np.sqrt(d), "d_v": np.sqrt(d), "d": d, "none": 1.0}[scale]
        if mask is not None and mask_at == "weights":     # the weights masked after the softmax
            return mod.softmax(s).masked_fill(~np.asarray(mask, bool), 0.0) @ v
        if mask is not None:
            m = np.asarray(mask, bool)
            s = s.masked_fill(m if mask_means == "blocked" else ~m, fill)
        return mod.softmax(s) @ v
    return attention


MISTAKES_08 = (
    Mistake("softmax over the wrong axis: the weights of one query sum to 1 over the keys, the last axis",
            dict(softmax=lambda x: (lambda e: e / e.sum(axis=0, keepdims=True))(
                (x - x.max(axis=0, keepdims=True)).exp()))),
    Mistake("this mask lets query i see the keys after it (j > i), the upper triangle: query i may see keys "
            "j ≤ i, so True belongs on and below the diagonal (np.tril)",
            dict(causal_mask=lambda T: np.triu(np.ones((T, T), dtype=bool)))),
    Mistake("the causal mask hides the diagonal too: a position may attend to itself",
            dict(causal_mask=lambda T: np.tril(np.ones((T, T), dtype=bool), -1))),
    Mistake("the scores are divided by d_k: equation 1 divides by √d_k",
            dict(attention=Using(lambda m: _attention(m, "d")))),
    Mistake("the scores are not scaled: divide q kᵀ by √d_k",
            dict(attention=Using(lambda m: _attention(m, "none")))),
    Mistake("the mask is read the wrong way round: True means may attend, so fill where it is False",
            dict(attention=Using(lambda m: _attention(m, mask_means="blocked")))),
    Mistake("the mask was applied after the softmax: the remaining weights no longer sum to 1; fill the masked "
            "scores with a large negative number before it", dict(attention=Using(lambda m: _attention(
                m, mask_at="weights")))),
    Mistake("the masked scores were set to 0: exp(0) still gives them weight; set them to a large negative number "
            "(−1e9)", dict(attention=Using(lambda m: _attention(m, fill=0.0)))),
    Mistake("the scores are divided by √d_v, v's width: equation 1 divides by √d_k, the width of q and k",
            dict(attention=Using(lambda m: _attention(m, "d_v")))),
)


# ---------------------------------------------------------------- 09: multi-head attention
def _cases_09():
    rng = np.random.default_rng(9)
    cases = []
    for i, (B, T, d, h, title) in enumerate([(1, 1, 2, 1, "one head: nothing to split"), (1, 2, 4, 2, "two heads"),
                                            (2, 3, 6, 3, "three heads, a batch of two"),
                                            (1, 0, 4, 2, "an empty sequence (T = 0)")]):
        mha = transformer.MultiHeadAttention(d, h)
        x = _r(rng, (B, T, d))
        cases.append(op_case(f"split_heads: {title}", "out = split_heads(x, h); out.backward(output gradient)",
                             dict(x=x), lambda ns, x, h=h: ns.split_heads(x, h), lambda x, mha=mha: mha.split_heads(x),
                             shown={"h": h}, seed=90 + i))
        y = _r(rng, (B, h, T, d // h))
        cases.append(op_case(f"merge_heads: {title}", "out = merge_heads(x); out.backward(output gradient)",
                             dict(x=y), lambda ns, x: ns.merge_heads(x), lambda x, mha=mha: mha.merge_heads(x),
                             seed=95 + i))
    for i, (B, Tq, Tk, d, h, masked, title) in enumerate([
            (1, 1, 1, 2, 1, False, "one head, one position"), (1, 2, 2, 4, 2, False, "self-attention, two heads"),
            (2, 2, 3, 4, 2, True, "attention to another sequence, with padding"),
            (1, 3, 3, 6, 3, True, "three heads, a causal mask")]):
        query, key = _r(rng, (B, Tq, d)), _r(rng, (B, Tk, d))
        self_attn = "self" in title
        if not masked:
            mask = None
        elif "causal" in title:
            mask = np.tril(np.ones((Tq, Tk), bool))
        else:
            mask = np.ones((B, 1, 1, Tk), bool)
            mask[-1, ..., -1] = False
        inputs = {"query": query} if self_attn or "causal" in title else {"query": query, "key": key}

        def mine(ns, m, query, key=None, mask=mask):
            T = engine(ns).Tensor
            q = T(query)
            kv = q if key is None else T(key)
            return m(q, kv, kv, mask)

        def theirs(m, query, key=None, mask=mask):
            q = mt.tensor(query)
            kv = q if key is None else mt.tensor(key)
            return m(q, kv, kv, None if mask is None else mt.tensor(mask))
        cases.append(module_case(f"MultiHeadAttention: {title}", "out = MultiHeadAttention(d_model, h)(query, key, "
                                 "value, mask)",
                                 lambda ns, d=d, h=h: ns.MultiHeadAttention(d, h, np.random.default_rng(0)),
                                 transformer.MultiHeadAttention(d, h), inputs, mine, theirs, seed=900 + i,
                                 shown={**inputs, "key = value": "query" if "key" not in inputs else "key", "h": h,
                                        "mask": "None" if mask is None else mask}))
    B, Tq, Tk, d, h = 2, 2, 3, 4, 2
    inputs = {"query": _r(rng, (B, Tq, d)), "key": _r(rng, (B, Tk, d)), "value": _r(rng, (B, Tk, d))}
    cases.append(module_case("MultiHeadAttention: query, key and value all different", "out = MultiHeadAttention("
                             "d_model, h)(query, key, value, None)",
                             lambda ns: ns.MultiHeadAttention(d, h, np.random.default_rng(0)),
                             transformer.MultiHeadAttention(d, h), inputs,
                             lambda ns, m, query, key, value: m(*(engine(ns).Tensor(a) for a in (query, key, value))),
                             lambda m, query, key, value: m(mt.tensor(query), mt.tensor(key), mt.tensor(value)),
                             seed=905, shown={**inputs, "h": h, "mask": "None"}))
    B, T, d, h = 2, 3, 4, 2        # the decoder's self-attention mask: padding and causal, (B, 1, T, T)
    query = _r(rng, (B, T, d))
    mask = np.ones((B, 1, 1, T), bool) & np.tril(np.ones((T, T), bool))
    mask[1, ..., -1] = False
    cases.append(module_case("MultiHeadAttention: a (B, 1, T, T) mask, padding and causal, whose rows differ by "
                             "query", "out = MultiHeadAttention(d_model, h)(query, query, query, mask)",
                             lambda ns: ns.MultiHeadAttention(d, h, np.random.default_rng(0)),
                             transformer.MultiHeadAttention(d, h), {"query": query},
                             lambda ns, m, query, mask=mask: (lambda q: m(q, q, q, mask))(engine(ns).Tensor(query)),
                             lambda m, query, mask=mask: (lambda q: m(q, q, q, mt.tensor(mask)))(mt.tensor(query)),
                             seed=906, shown={"query": query, "key = value": "query", "h": h, "mask": mask}))
    heads = np.ones((1, h, 1, T), bool)            # a mask of its own for each head: (1, h, 1, T_k)
    heads[0, 0, 0, -1] = heads[0, 1, 0, 0] = False
    one = query[:1]
    cases.append(module_case("MultiHeadAttention: a (1, h, 1, T) mask, each head its own keys",
                             "out = MultiHeadAttention(d_model, h)(query, query, query, mask)",
                             lambda ns: ns.MultiHeadAttention(d, h, np.random.default_rng(0)),
                             transformer.MultiHeadAttention(d, h), {"query": one},
                             lambda ns, m, query, mask=heads: (lambda q: m(q, q, q, mask))(engine(ns).Tensor(query)),
                             lambda m, query, mask=heads: (lambda q: m(q, q, q, mt.tensor(mask)))(mt.tensor(query)),
                             seed=907, shown={"query": one, "key = value": "query", "h": h, "mask": heads}))
    return cases


MISTAKES_09 = (
    Mistake("the heads are interleaved: head i takes every h-th column; it takes the block of columns "
            "i·d_k ... (i + 1)·d_k − 1, so reshape to (B, T, h, d_k)",
            dict(split_heads=lambda x, h: x.reshape(x.shape[0], x.shape[1], x.shape[2] // h, h).transpose(0, 3, 1, 2))),
    Mistake("reshaped straight to (B, h, T, d_k): that mixes positions into heads; reshape to (B, T, h, d_k), "
            "then swap the axes of T and h", dict(split_heads=lambda x, h: x.reshape(x.shape[0], h, x.shape[1],
                                                                                   x.shape[2] // h))),
    Mistake("reshaped straight back to (B, T, d_model): swap the axes of h and T first, then reshape",
            dict(merge_heads=lambda x: x.reshape(x.shape[0], x.shape[2], x.shape[1] * x.shape[3]))),
    Mistake("the output projection w_o is missing: Concat(heads) W^O",
            {"MultiHeadAttention.forward": Using(lambda m: lambda self, q, k, v, mask=None: m.merge_heads(m.attention(
                *(m.split_heads(lin(x), self.h) for lin, x in ((self.w_q, q), (self.w_k, k), (self.w_v, v))), mask)))}),
)


# ---------------------------------------------------------------- 10: embeddings and positions
def _cases_10():
    rng = np.random.default_rng(10)
    cases = []
    for T, d in [(1, 2), (3, 2), (4, 6), (50, 8), (2, 5), (1000, 8)]:
        def run(ns, T=T, d=d):
            yield ns.sinusoidal_table(T, d)
        title = "an odd width: the last column is a sine" if d % 2 else \
            f"T = {T}, d = {d}: angles up to 999 radians, in float64 throughout" if T >= 1000 else f"T = {T}, d = {d}"
        cases.append(Case(f"sinusoidal_table: {title}", "sinusoidal_table(T, d)", {"T": T, "d": d}, run,
                          [Expect("", _package_table(T, d).astype(np.float64), atol=1e-6, rtol=0, dtype="float64")]))
    for i, (V, d, ids, title) in enumerate([(3, 2, [1], "one id"), (4, 2, [2, 0, 3], "three ids"),
                                            (4, 3, [[1, 1], [3, 1]], "a repeated id: its rows' gradients add up")]):
        ids = np.array(ids)
        cases.append(op_case(f"Embedding: {title}", "out = Embedding.apply(weight, ids=ids); "
                             "out.backward(output gradient)", dict(weight=_r(rng, (V, d))),
                             lambda ns, weight, ids=ids: ns.Embedding.apply(weight, ids=ids.copy()),
                             lambda weight, ids=ids: F.embedding(mt.tensor(ids), weight), shown={"ids": ids},
                             seed=100 + i))
    for i, (V, d, ids, offset, title) in enumerate([(5, 4, [[3, 1]], 0, "two tokens"),
                                                    (5, 4, [[2, 4, 1], [1, 1, 0]], 0, "a batch of two"),
                                                    (5, 4, [[2]], 3, "one token at offset 3, as in decoding"),
                                                    (5, 4, [[3, 1]], 0, "a float32 table: a float32 output and "
                                                                        "gradient"),
                                                    (5, 4, [[1, 2, 3]], 2, "three tokens at offset 2: positions 2, 3 "
                                                                           "and 4")]):
        dtype = "float32" if "float32" in title else "float64"
        ids = np.array(ids)
        table = _package_table(offset + ids.shape[1], d).astype(np.float64)[offset:]

        def mine(ns, weight, ids=ids, offset=offset, V=V, d=d):
            emb = ns.Embeddings(V, d, 16, 0.0, np.random.default_rng(0))
            emb.weight = weight
            return emb(ids.copy(), offset=offset)
        cases.append(op_case(f"Embeddings: {title}", "out = Embeddings(V, d, max_len, 0.0, rng) with weight, "
                             "(ids, offset=offset); out.backward(output gradient)", dict(weight=_r(rng, (V, d))), mine,
                             lambda weight, ids=ids, d=d, table=table:
                             F.embedding(mt.tensor(ids), weight) * math.sqrt(d) + mt.tensor(table),
                             shown={"ids": ids, "offset": offset}, seed=105 + i, atol=1e-6 if dtype == "float64"
                             else 1e-5, rtol=1e-6 if dtype == "float64" else 1e-5, dtype=dtype))
    for training in (True, False):
        cases.append(_embeddings_dropout_case(_r(rng, (5, 4)), np.array([[2, 4, 1], [1, 3, 0]]), training))
    return cases


def _kept(rng, shape, p):
    """dropped(·, keep, p)'s keep: the entries exercise 06's dropout keeps, drawing from ``rng``."""
    return rng.random(shape) >= p


def _embeddings_dropout_case(weight, ids, training, p=0.5, seed=107) -> Case:
    """Embeddings with p_drop = 0.5 and the grader's seeded generator: in training, dropout over
    the sum of the scaled embedding and the positions, drawn as exercise 06 draws (after the
    constructor's draw of the table); after ``eval()``, none."""
    V, d = weight.shape
    rng = np.random.default_rng(seed)
    rng.normal(0.0, d**-0.5, size=(V, d))      # the constructor's draw
    keep = _kept(rng, ids.shape + (d,), p) if training else np.ones(ids.shape + (d,), bool)
    table = _package_table(ids.shape[1], d).astype(np.float64)
    scale = keep / (1.0 - p) if training else np.ones(keep.shape)
    theirs = lambda weight: (F.embedding(mt.tensor(ids), weight) * math.sqrt(d) + mt.tensor(table)) * mt.tensor(scale)  # noqa: E731

    def mine(ns, weight):
        emb = ns.Embeddings(V, d, 16, p, np.random.default_rng(seed))
        emb.weight = weight
        emb.train(training)
        return emb(ids.copy())
    mode = "training: dropout over the embedding plus the positions" if training else "after eval(): no dropout"
    return op_case(f"Embeddings with dropout p = {p}, {mode}", f"emb = Embeddings(V, d, max_len, {p}, rng) with "
                   f"weight; emb.{'train()' if training else 'eval()'}; out = emb(ids); out.backward(output gradient)",
                   dict(weight=weight), mine, theirs,
                   shown={"ids": ids, "rng": f"np.random.default_rng({seed}), the grader's (your dropout draws from it "
                                            "as exercise 06's does)"}, seed=108, atol=1e-6, rtol=1e-6)


def _table(swap=False, exponent="2i"):
    def sinusoidal_table(T, d):
        i = np.arange(0, d, 2) if exponent == "2i" else np.arange((d + 1) // 2)
        angle = np.arange(T)[:, None] / 10000.0 ** (i / d)
        table = np.zeros((T, d))
        table[:, 0::2] = np.cos(angle) if swap else np.sin(angle)
        table[:, 1::2] = (np.sin if swap else np.cos)(angle[:, : d // 2])
        return table
    return sinusoidal_table


def _embedding_backward_assigned(self, grad):
    g = np.zeros(self.shape, grad.dtype)
    g[self.ids] = grad
    return (g,)


def _embeddings_forward(mod, scale=True, offset_used=True, drop="in training", ids_by="keyword"):
    Tensor = mod.__track__["01"].Tensor

    def forward(self, ids, offset=0):
        ids = np.asarray(ids)
        start = offset if offset_used else 0
        x = mod.Embedding.apply(self.weight, ids=ids) if ids_by == "keyword" else mod.Embedding.apply(self.weight, ids)
        x = x * np.sqrt(self.weight.shape[1]) if scale else x
        x = x + Tensor(self.table[start:start + ids.shape[-1]])
        return x if drop == "never" else mod.dropout(x, self.p_drop, self.rng, drop == "always" or self.training)
    return forward


MISTAKES_10 = (
    Mistake("sine and cosine are swapped: the even columns (2i) are sines, the odd ones cosines",
            dict(sinusoidal_table=_table(swap=True))),
    Mistake("the exponent uses i where the paper has 2i: column 2i's wavelength is 10000^(2i/d)·2π",
            dict(sinusoidal_table=_table(exponent="i"))),
    Mistake("a repeated id keeps only one row's gradient: add them (np.add.at), do not assign",
            {"Embedding.backward": _embedding_backward_assigned}),
    Mistake("the embedding is not multiplied by √d_model (Section 3.4)",
            {"Embeddings.forward": Using(lambda m: _embeddings_forward(m, scale=False))}),
    Mistake("the positions start at 0 whatever the offset: position t of a decoded sequence is row offset + t",
            {"Embeddings.forward": Using(lambda m: _embeddings_forward(m, offset_used=False))}),
    Mistake("no dropout after the embeddings: the paper applies it to the sums of the embeddings and the positions "
            "(Section 5.4)", {"Embeddings.forward": Using(lambda m: _embeddings_forward(m, drop="never"))}),
    Mistake("dropout ran after eval(): pass the module's own self.training to dropout",
            {"Embeddings.forward": Using(lambda m: _embeddings_forward(m, drop="always"))}),
    Mistake("ids were passed as a second input (Embedding.apply(W, ids)), so they became a float Tensor: pass them "
            "by keyword, Embedding.apply(W, ids=ids), a parameter that needs no gradient",
            {"Embeddings.forward": Using(lambda m: _embeddings_forward(m, ids_by="position"))}),
)


# ---------------------------------------------------------------- 11: the encoder layer
def _cases_11():
    from transformer.layers import EncoderLayer, PositionwiseFeedForward
    rng = np.random.default_rng(11)
    cases = []
    for i, (B, T, d, d_ff) in enumerate([(1, 1, 2, 3), (2, 3, 4, 6)]):
        x = _r(rng, (B, T, d))
        cases.append(module_case(f"FeedForward: x of shape {x.shape}, d_ff = {d_ff}", "out = FeedForward(d_model, "
                                 "d_ff)(x)", lambda ns, d=d, f=d_ff: ns.FeedForward(d, f, np.random.default_rng(0)),
                                 PositionwiseFeedForward(d, d_ff), {"x": x}, lambda ns, m, x: m(engine(ns).Tensor(x)),
                                 lambda m, x: m(mt.tensor(x)), seed=110 + i))
    for i, (B, T, d, h, d_ff, padded, title) in enumerate([(1, 1, 2, 1, 3, False, "one position, one head"),
                                                          (1, 3, 4, 2, 6, False, "three positions, two heads"),
                                                          (2, 3, 4, 2, 6, True, "a batch with padding")]):
        x = _r(rng, (B, T, d))
        mask = np.ones((B, 1, 1, T), bool)
        if padded:
            mask[1, ..., -1] = False
        cases.append(module_case(f"EncoderLayer: {title}", "out = EncoderLayer(d_model, h, d_ff, 0.0, rng)(x, mask)",
                                 lambda ns, d=d, h=h, f=d_ff: ns.EncoderLayer(d, h, f, 0.0, np.random.default_rng(0)),
                                 EncoderLayer(d, h, d_ff, 0.0), {"x": x},
                                 lambda ns, m, x, mask=mask: m(engine(ns).Tensor(x), mask),
                                 lambda m, x, mask=mask: m(mt.tensor(x), mt.tensor(mask)), seed=115 + i,
                                 shown={"x": x, "mask": mask, "h": h}, atol=1e-8, rtol=1e-7))
    for training in (True, False):
        cases.append(_residual_dropout_case(_r(rng, (2, 3, 4)), _r(rng, (4,)), training))
    cases.append(_layer_dropout_case("encoder", _r(rng, (1, 3, 4))))
    return cases


def _layer_dropout_case(kind, x, memory=None, p=0.5, seed=111) -> Case:
    """An encoder (or decoder) layer with p_drop = 0.5, training, its residual sublayers drawing
    from one generator of the grader's (as the constructor gives them one): each sublayer's
    dropout over its sublayer's output, in the order the sublayers run."""
    from transformer.layers import DecoderLayer, EncoderLayer
    d, h, d_ff = x.shape[-1], 2, 8
    T = x.shape[1]
    n = 2 if kind == "encoder" else 3
    draws = np.random.default_rng(seed)
    scales = [_kept(draws, x.shape, p) / (1.0 - p) for _ in range(n)]
    causal = np.tril(np.ones((T, T), bool))

    def residual(sub, x, scale, f):
        return sub.norm(x + mt.tensor(scale) * f(x))

    def theirs(m, x, memory=None):
        if kind == "encoder":
            x = residual(m.sub1, x, scales[0], lambda y: m.self_attn(y, y, y, None))
            return residual(m.sub2, x, scales[1], m.ffn)
        x = residual(m.sub1, x, scales[0], lambda y: m.self_attn(y, y, y, mt.tensor(causal)))
        x = residual(m.sub2, x, scales[1], lambda y: m.cross_attn(y, memory, memory, None))
        return residual(m.sub3, x, scales[2], m.ffn)

    def mine(ns, m, x, memory=None):
        m.train(True)
        shared = np.random.default_rng(seed)      # one generator for every sublayer, as the constructor shares it
        for k in range(1, n + 1):
            getattr(m, f"sub{k}").rng = shared
        T_ = engine(ns).Tensor
        if kind == "encoder":
            return m(T_(x), np.ones((1, 1, 1, T), bool))
        return m(T_(x), T_(memory), causal, np.ones((1, 1, 1, memory.shape[1]), bool))
    inputs = {"x": x} if kind == "encoder" else {"x": x, "memory": memory}
    build = (lambda ns: ns.EncoderLayer(d, h, d_ff, p, np.random.default_rng(0))) if kind == "encoder" else \
        (lambda ns: ns.DecoderLayer(d, h, d_ff, p, np.random.default_rng(0)))
    reference = EncoderLayer(d, h, d_ff, 0.0) if kind == "encoder" else DecoderLayer(d, h, d_ff, 0.0)
    call = "out = EncoderLayer(d_model, h, d_ff, 0.5, rng)(x, mask)" if kind == "encoder" else \
        "out = DecoderLayer(d_model, h, d_ff, 0.5, rng)(x, memory, tgt_mask, src_mask)"
    return module_case(f"{kind.capitalize()}Layer with dropout p = {p}, training: each sublayer's output dropped, "
                       "in the order they run", call, build, reference, inputs, mine,
                       lambda m, **a: theirs(m, *(mt.tensor(v) for v in a.values())), seed=seed + 1,
                       shown={**inputs, "rng of the sublayers": f"np.random.default_rng({seed}), one for all of them "
                                                                "(the grader's, set after the constructor)"},
                       atol=1e-8, rtol=1e-7)


def _residual_dropout_case(x, c, training, p=0.5, seed=118) -> Case:
    """Residual with p_drop = 0.5 and the grader's seeded generator: LayerNorm(x + Dropout(sublayer(x)))
    in training (dropout over the sublayer's output alone, drawn as exercise 06 draws); after
    ``eval()``, LayerNorm(x + sublayer(x)). The sublayer is x · c + 1, c a fixed row: not linear,
    so that a dropout of its input shows."""
    keep = _kept(np.random.default_rng(seed), x.shape, p) if training else np.ones(x.shape, bool)
    scale = keep / (1.0 - p) if training else np.ones(x.shape)
    d = x.shape[-1]
    theirs = lambda x: F.layer_norm(x + mt.tensor(scale) * (x * mt.tensor(c) + 1.0),  # noqa: E731
                                    mt.tensor(np.ones(d)), mt.tensor(np.zeros(d)), 1e-5)

    def mine(ns, x):
        res = ns.Residual(d, p, np.random.default_rng(seed))
        res.train(training)
        return res(x, lambda t: t * engine(ns).Tensor(c.copy()) + 1.0)
    mode = "training: dropout over the sublayer's output" if training else "after eval(): no dropout"
    return op_case(f"Residual with dropout p = {p}, {mode}", f"res = Residual(d_model, {p}, rng); "
                   f"res.{'train()' if training else 'eval()'}; out = res(x, sublayer); out.backward(output gradient)",
                   dict(x=x), mine, theirs,
                   shown={"sublayer": "x · c + 1", "c": c, "rng": f"np.random.default_rng({seed}), the grader's (your "
                                                             "dropout draws from it as exercise 06's does)"},
                   seed=119, atol=1e-8, rtol=1e-7)


def _residual(mod, order="post"):
    def forward(self, x, sublayer):
        if order == "dropout outside":
            return self.norm(mod.dropout(x + sublayer(x), self.p_drop, self.rng, self.training))
        if order == "always training":
            return self.norm(x + mod.dropout(sublayer(x), self.p_drop, self.rng, True))
        if order == "pre":
            return x + sublayer(self.norm(x))
        if order == "no residual":
            return self.norm(sublayer(x))
        return self.norm(x + sublayer(x))
    return forward


MISTAKES_11 = (
    Mistake("the ReLU between the two linear maps is missing: max(0, x W1 + b1) W2 + b2",
            {"FeedForward.forward": lambda self, x: self.w_2(self.w_1(x))}),
    Mistake("this is the pre-norm order, x + Sublayer(LayerNorm(x)): the paper's is LayerNorm(x + Sublayer(x))",
            {"Residual.forward": Using(lambda m: _residual(m, "pre"))}),
    Mistake("the residual connection is missing: LayerNorm(x + Sublayer(x)), x added back",
            {"Residual.forward": Using(lambda m: _residual(m, "no residual"))}),
    Mistake("dropout was applied to x + Sublayer(x): it belongs to the sublayer's output alone, "
            "LayerNorm(x + Dropout(Sublayer(x)))", {"Residual.forward": Using(lambda m: _residual(m, "dropout outside"))}),
    Mistake("dropout ran after eval(): pass the module's own self.training to dropout",
            {"Residual.forward": Using(lambda m: _residual(m, "always training"))}),
    Mistake("no dropout in the residual sublayer: LayerNorm(x + Dropout(Sublayer(x))) (Section 5.4)",
            {"Residual.forward": Using(lambda m: _residual(m, "post"))}),
)


# ---------------------------------------------------------------- 12: the decoder layer and its cached step
def _decoder_inputs(rng, B, T, Ts, d, padded):
    y, memory = _r(rng, (B, T, d)), _r(rng, (B, Ts, d))
    src_mask = np.ones((B, 1, 1, Ts), bool)
    if padded:
        src_mask[-1, ..., -1] = False
    return y, memory, src_mask


def _cases_12():
    from transformer.layers import DecoderLayer
    rng = np.random.default_rng(12)
    cases = []
    for i, (B, T, Ts, d, h, d_ff, padded, title) in enumerate([(1, 1, 1, 2, 1, 3, False, "one position"),
                                                              (1, 3, 2, 4, 2, 6, False, "three positions"),
                                                              (2, 3, 3, 4, 2, 6, True, "a padded source")]):
        y, memory, src_mask = _decoder_inputs(rng, B, T, Ts, d, padded)
        tgt_mask = np.tril(np.ones((T, T), bool))
        cases.append(module_case(
            f"DecoderLayer.forward: {title}", "out = DecoderLayer(d_model, h, d_ff, 0.0, rng)(x, memory, tgt_mask, "
            "src_mask)", lambda ns, d=d, h=h, f=d_ff: ns.DecoderLayer(d, h, f, 0.0, np.random.default_rng(0)),
            DecoderLayer(d, h, d_ff, 0.0), {"x": y, "memory": memory},
            lambda ns, m, x, memory, a=tgt_mask, b=src_mask: m(engine(ns).Tensor(x), engine(ns).Tensor(memory), a, b),
            lambda m, x, memory, a=tgt_mask, b=src_mask: m(mt.tensor(x), mt.tensor(memory), mt.tensor(a), mt.tensor(b)),
            seed=120 + i, shown={"x": y, "memory": memory, "tgt_mask": tgt_mask, "src_mask": src_mask, "h": h},
            atol=1e-8, rtol=1e-7))
    for i, (B, T, Ts, d, h, d_ff, padded, title) in enumerate([(1, 1, 2, 2, 1, 3, False, "the first position"),
                                                              (1, 3, 2, 4, 2, 6, False, "three positions, one by one"),
                                                              (2, 4, 3, 4, 2, 6, True, "a batch, a padded source")]):
        y, memory, src_mask = _decoder_inputs(rng, B, T, Ts, d, padded)
        ref = DecoderLayer(d, h, d_ff, 0.0)
        state = _seeded_weights(ref, 125 + i)
        full = ref(mt.tensor(y), mt.tensor(memory), mt.tensor(np.tril(np.ones((T, T), bool))),
                   mt.tensor(src_mask)).numpy()
        k_all = ref.self_attn.split_heads(ref.self_attn.w_k(mt.tensor(y))).numpy()
        v_all = ref.self_attn.split_heads(ref.self_attn.w_v(mt.tensor(y))).numpy()

        def run(ns, y=y, memory=memory, src_mask=src_mask, state=state, d=d, h=h, f=d_ff, T=T):
            m = ns.DecoderLayer(d, h, f, 0.0, np.random.default_rng(0))
            m.load_state_dict({k: v.copy() for k, v in state.items()})
            Tensor, cache = engine(ns).Tensor, {}
            for t in range(T):
                out = m.step(Tensor(y[:, t:t + 1]), Tensor(memory), src_mask, cache)
                yield out
                yield cache["k"] if "k" in cache else Missing("the cache has no 'k' after the step")
                yield cache["v"] if "v" in cache else Missing("the cache has no 'v' after the step")
        expected = []
        for t in range(T):
            expected += [Expect(f"after the step of position {t}: the output", full[:, t:t + 1], atol=1e-8, rtol=1e-7),
                         Expect(f"after the step of position {t}: cache['k'] (B, h, t + 1, d_k)", k_all[:, :, :t + 1],
                                atol=1e-8, rtol=1e-7),
                         Expect(f"after the step of position {t}: cache['v']", v_all[:, :, :t + 1], atol=1e-8,
                                rtol=1e-7)]
        cases.append(Case(f"DecoderLayer.step: {title}", "cache = {}; for t in range(T): out = layer.step(x[:, t:t+1], "
                          "memory, src_mask, cache)",
                          {"x": y, "memory": memory, "src_mask": src_mask, "h": h,
                           "weights": f"the grader's, loaded by name ({len(state)} arrays)",
                           "expected": "position t of forward over the whole sequence, under the causal mask"},
                          run, expected))
    cases.append(_layer_dropout_case("decoder", _r(rng, (1, 3, 4)), memory=_r(rng, (1, 2, 4))))
    return cases


def _decoder_forward(cross_to="memory", masked=True):
    def forward(self, x, memory, tgt_mask, src_mask):
        x = self.sub1(x, lambda x: self.self_attn(x, x, x, tgt_mask if masked else None))
        x = self.sub2(x, lambda x: self.cross_attn(x, memory, memory, src_mask) if cross_to == "memory"
                      else self.cross_attn(x, x, x, None))
        return self.sub3(x, self.ffn)
    return forward


def _step_without_past(mod):
    def step(self, x, memory, src_mask, cache):
        a = self.self_attn
        k, v = mod.split_heads(a.w_k(x), a.h), mod.split_heads(a.w_v(x), a.h)
        cache["k"], cache["v"] = k, v
        x = self.sub1(x, lambda x: a.w_o(mod.merge_heads(mod.attention(mod.split_heads(a.w_q(x), a.h), k, v))))
        x = self.sub2(x, lambda x: self.cross_attn(x, memory, memory, src_mask))
        return self.sub3(x, self.ffn)
    return step


MISTAKES_12 = (
    Mistake("the second sublayer attends to the decoder's own positions: its keys and values are the encoder's "
            "output, memory", {"DecoderLayer.forward": _decoder_forward(cross_to="self")}),
    Mistake("self-attention is not masked: pass tgt_mask, so that no position sees a later one",
            {"DecoderLayer.forward": _decoder_forward(masked=False)}),
    Mistake("the new position attends to itself alone: append its key and value to the cache's, and attend to "
            "all of them", {"DecoderLayer.step": Using(_step_without_past)}),
)


# ---------------------------------------------------------------- 13: Table 1 on the engine's graph
def _layer_13(kind: str, n: int, d: int):
    """(what it computes, a function of the learner's module building it, its multiply-adds and
    sequential products, both counted from the shapes as Table 1 does)."""
    rng = np.random.default_rng(13 + n + d)
    x, ws = _r(rng, (n, d)), [_r(rng, (d, d)) for _ in range(4)]

    def tensors(ns):
        T = engine(ns).Tensor
        return T(x, requires_grad=True), [T(w, requires_grad=True) for w in ws]

    if kind == "chain":
        def build(ns):
            x_, (w, v, *_) = tensors(ns)
            return (x_ @ w) @ v
        return "(x @ w) @ v", build, 2 * n * d * d, 2
    if kind == "shared":
        def build(ns):
            x_, (w, a, b, _) = tensors(ns)
            h = x_ @ w
            return h @ a + h @ b
        return "h = x @ w; h @ a + h @ b (h reached along two paths)", build, 3 * n * d * d, 2
    if kind == "attention":
        def build(ns):
            x_, (wq, wk, wv, wo) = tensors(ns)
            q, k, v = x_ @ wq, x_ @ wk, x_ @ wv
            return ((q @ k.transpose()) @ v) @ wo     # the softmax left out: it multiplies no matrices
        return "q, k, v = x @ w_q, x @ w_k, x @ w_v; ((q @ kᵀ) @ v) @ w_o", build, 4 * n * d * d + 2 * n * n * d, 4
    if kind == "recurrent":
        def build(ns):
            x_, (w, u, *_) = tensors(ns)
            h = engine(ns).Tensor(np.zeros((1, d)))
            for t in range(n):
                h = (h @ w + x_[t:t + 1] @ u).relu()
            return h
        return "h = 0; for t in range(n): h = relu(h @ w + x[t] @ u)", build, 2 * n * d * d, n
    if kind == "stack":
        def build(ns):
            x_, (w, *_) = tensors(ns)
            y = x_ @ w
            return engine(ns, "02").concat([y @ w, (x_ @ w) @ w], axis=0)
        return "concat(x @ w @ w, x @ w @ w) (two chains, the first product shared in one)", build, 4 * n * d * d, 2
    raise ValueError(kind)


def _cases_13():
    cases = []
    for kind, n, d in [("chain", 2, 3), ("shared", 2, 2), ("attention", 3, 2), ("attention", 6, 2),
                       ("recurrent", 3, 2), ("recurrent", 6, 2), ("stack", 2, 2)]:
        text, build, madds, seq = _layer_13(kind, n, d)

        def run(ns, build=build):
            out = build(ns)
            yield ns.multiply_adds(out)
            yield ns.sequential_products(out)
        cases.append(Case(f"{kind}, n = {n} positions of width d = {d}", "multiply_adds(out), sequential_products(out)",
                          {"out": text, "x": f"({n}, {d})", "w, v, ...": f"({d}, {d})"}, run,
                          [Expect("multiply_adds", np.int64(madds), kind="i"),
                           Expect("sequential_products", np.int64(seq), kind="i")]))
    for a, b, title in [((3, 2, 4), (4, 5), "a stack of 3 matrices times one matrix"),
                        ((2, 4), (3, 4, 5), "one matrix times a stack of 3"),
                        ((2, 1, 2, 3), (3, 3, 2), "stacks that broadcast to (2, 3)"),
                        ((2, 2, 3), (2, 3, 4), "two stacks of 2: 2 products, one per pair, not 2 × 2")]:
        stack = int(np.prod(np.broadcast_shapes(a[:-2], b[:-2])))
        cases.append(_products_case(f"x @ w, {title}", "out = x @ w", a, b, 0, stack * a[-2] * a[-1] * b[-1], 1))
    cases.append(_products_case("30 doublings of x @ w: 2^30 paths, one product", "u = x @ w; 30 times: u = u + u",
                                (2, 3), (3, 2), 30, 2 * 3 * 2, 1))
    cases.append(_right_nested_case())
    cases.append(_deep_recurrent_case(3000))
    cases.append(_leaf_case())
    cases.append(_two_lengths_case())
    return cases


def _two_lengths_case(n=2, d=2) -> Case:
    """y = x @ w reached directly and through z = y @ v: the longest path counts, whichever input
    of the sum a walk visits first (out = z + y, then y + z)."""
    rng = np.random.default_rng(131)
    x, w, v = _r(rng, (n, d)), _r(rng, (d, d)), _r(rng, (d, d))

    def run(ns):
        T = engine(ns).Tensor
        for first_long in (True, False):
            y = T(x, requires_grad=True) @ T(w, requires_grad=True)
            z = y @ T(v, requires_grad=True)
            out = z + y if first_long else y + z
            yield ns.multiply_adds(out)
            yield ns.sequential_products(out)
    return Case("y = x @ w reached directly and through z = y @ v: the longer path, in either order",
                "y = x @ w; z = y @ v; multiply_adds and sequential_products of z + y, then of y + z",
                {"x": f"({n}, {d})", "w, v": f"({d}, {d})"}, run,
                [e for order in ("z + y", "y + z") for e in
                 (Expect(f"{order}: multiply_adds", np.int64(2 * n * d * d), kind="i"),
                  Expect(f"{order}: sequential_products", np.int64(2), kind="i"))])


def _leaf_case() -> Case:
    """out is an input itself: no Function made it, so it holds no product on any path."""
    def run(ns):
        x = engine(ns).Tensor(np.ones((2, 3)), requires_grad=True)
        yield ns.multiply_adds(x)
        yield ns.sequential_products(x)
    return Case("out is an input itself (out.creator is None): no product", "multiply_adds(x), sequential_products(x)",
                {"x": "(2, 3), made with Tensor(..., requires_grad=True)"}, run,
                [Expect("multiply_adds", np.int64(0), kind="i"), Expect("sequential_products", np.int64(0), kind="i")])


def _deep_recurrent_case(n: int, d: int = 2) -> Case:
    """A recurrent layer over ``n`` positions: a graph 2n Functions deep, beyond Python's recursion
    limit, which a count that calls itself for each input cannot walk."""
    text, build, madds, seq = _layer_13("recurrent", n, d)

    def run(ns):
        with np.errstate(all="ignore"):   # the values may overflow; only the graph's shape is counted
            out = build(ns)
            yield ns.multiply_adds(out)
            yield ns.sequential_products(out)
    return Case(f"recurrent, n = {n:,} positions: a graph deeper than Python's recursion limit (1,000 calls)",
                "multiply_adds(out), sequential_products(out)", {"out": text, "x": f"({n}, {d})", "w, v, ...": f"({d}, {d})"},
                run, [Expect("multiply_adds", np.int64(madds), kind="i"),
                      Expect("sequential_products", np.int64(seq), kind="i")])


def _right_nested_case() -> Case:
    """x @ (w @ v): the longer path runs through the second input of the outer product."""
    def run(ns):
        Tensor = engine(ns).Tensor
        x, w, v = (Tensor(np.ones(s), requires_grad=True) for s in ((2, 3), (3, 4), (4, 5)))
        out = x @ (w @ v)
        yield ns.multiply_adds(out)
        yield ns.sequential_products(out)
    return Case("x @ (w @ v): the longer path through the second input", "multiply_adds(out), "
                "sequential_products(out)", {"out": "x @ (w @ v)", "x": "(2, 3)", "w": "(3, 4)", "v": "(4, 5)"}, run,
                [Expect("multiply_adds", np.int64(3 * 4 * 5 + 2 * 3 * 5), kind="i"),
                 Expect("sequential_products", np.int64(2), kind="i")])


def _products_case(title, text, a, b, doublings, madds, seq) -> Case:
    def run(ns):
        Tensor = engine(ns).Tensor
        out = _doubled(Tensor(np.ones(a), requires_grad=True) @ Tensor(np.ones(b), requires_grad=True), doublings)
        yield ns.multiply_adds(out)
        yield ns.sequential_products(out)
    return Case(title, "multiply_adds(out), sequential_products(out)", {"out": text, "x": str(a), "w": str(b)}, run,
                [Expect("multiply_adds", np.int64(madds), kind="i"), Expect("sequential_products", np.int64(seq),
                                                                           kind="i")])


def _multiply_adds_per_path(mod):
    def multiply_adds(out):
        fn = out.creator
        if fn is None:
            return 0
        own = 0
        if isinstance(fn, mod.MatMul):
            a, b = fn.inputs[0].data, fn.inputs[1].data
            stack = int(np.prod(np.broadcast_shapes(a.shape[:-2], b.shape[:-2])))
            own = stack * a.shape[-2] * a.shape[-1] * b.shape[-1]
        return own + sum(multiply_adds(x) for x in fn.inputs)
    return multiply_adds


def _all_products(mod):
    def sequential_products(out):
        seen, stack, count = set(), [out], 0
        while stack:
            fn = stack.pop().creator
            if fn is None or id(fn) in seen:
                continue
            seen.add(id(fn))
            count += isinstance(fn, mod.MatMul)
            stack.extend(fn.inputs)
        return count
    return sequential_products


def _every_op(mod):
    def sequential_products(out):
        fn = out.creator
        return 0 if fn is None else 1 + max(sequential_products(x) for x in fn.inputs)
    return sequential_products


def _multiply_adds_stacked(mod, stack="none"):
    """multiply_adds that sizes a product's stack wrongly: "none" (one matrix per product) or
    "first" (the first input's leading axes alone)."""
    def multiply_adds(out):
        total, seen, todo = 0, set(), [out]
        while todo:
            fn = todo.pop().creator
            if fn is None or id(fn) in seen:
                continue
            seen.add(id(fn))
            if isinstance(fn, mod.MatMul):
                a, b = fn.inputs[0].data, fn.inputs[1].data
                size = 1 if stack == "none" else int(np.prod(a.shape[:-2]))
                total += size * a.shape[-2] * a.shape[-1] * b.shape[-1]
            todo.extend(fn.inputs)
        return total
    return multiply_adds


MISTAKES_13 = (
    Mistake("a stack of matrices was counted as one product: multiply n·k·m by the stack's size, the product of the "
            "two inputs' broadcast leading axes", dict(multiply_adds=Using(lambda m: _multiply_adds_stacked(m)))),
    Mistake("the stack's size was taken from the first input alone: broadcast the leading axes of both inputs "
            "(np.broadcast_shapes)", dict(multiply_adds=Using(lambda m: _multiply_adds_stacked(m, "first")))),
    Mistake("a product reached along two paths is counted twice: count each Function once (remember the ones seen)",
            dict(multiply_adds=Using(_multiply_adds_per_path))),
    Mistake("this counts every product in the graph: count only the products on the longest path, since products "
            "on different paths may run at once", dict(sequential_products=Using(_all_products))),
    Mistake("this counts every operation on the longest path: count only the matrix products",
            dict(sequential_products=Using(lambda mod: _every_op(mod)))),
)


# ---------------------------------------------------------------- 14: the whole model
def _ids(rng, B, T, V, pad_from=None):
    ids = rng.integers(3, V, (B, T))
    if pad_from is not None:
        ids[-1, pad_from:] = 0
    return ids


def _cases_14():
    rng = np.random.default_rng(14)
    cases = []
    for ids in (_ids(rng, 1, 3, 6), _ids(rng, 2, 4, 6, pad_from=2)):
        for name, ref in (("padding_mask", _masks.padding_mask), ("target_mask", _masks.target_mask)):
            def run(ns, ids=ids, name=name):
                yield getattr(ns, name)(ids.copy(), 0)
            cases.append(Case(f"{name}: ids of shape {ids.shape}" + (", padded" if (ids == 0).any() else ""),
                              f"{name}(ids, pad)", {"ids": ids, "pad": 0}, run,
                              [Expect("", np.asarray(ref(mt.tensor(ids), 0).numpy(), bool), kind="b")]))
    for i, (V, d, h, d_ff, layers, B, Ts, Tt, pad, title) in enumerate([
            (6, 2, 1, 3, 1, 1, 2, 2, 0, "one layer each, one head"),
            (8, 4, 2, 6, 2, 2, 3, 4, 0, "two layers each, a padded batch"),
            (8, 4, 2, 6, 1, 2, 3, 4, 3, "pad id 3 (and 0 a word): the padding is the pad argument's")]):
        src = _ids(rng, B, Ts, V, pad_from=2 if B > 1 else None)
        tgt = _ids(rng, B, Tt, V, pad_from=3 if B > 1 else None)
        tgt[:, 0] = 1
        src, tgt = (np.where(a == 0, pad, np.where(a == pad, 0, a)) for a in (src, tgt))   # ids 0 and pad swapped
        cfg = transformer.TransformerConfig(V, d_model=d, n_heads=h, d_ff=d_ff, n_encoder_layers=layers,
                                            n_decoder_layers=layers, dropout=0.0, max_len=16, pad_id=pad)
        cases.append(module_case(
            f"Transformer: {title}",
            "logits = Transformer(vocab, d_model, h, d_ff, n_layers, 0.0, max_len" + (f", pad={pad}" if pad else "")
            + ")(src, tgt_in)",
            lambda ns, V=V, d=d, h=h, f=d_ff, n=layers, pad=pad: ns.Transformer(V, d_model=d, h=h, d_ff=f, n_layers=n,
                                                                                p_drop=0.0, max_len=16, pad=pad),
            transformer.Transformer(cfg), {"src": src, "tgt_in": tgt}, lambda ns, m, src, tgt_in: m(src, tgt_in),
            lambda m, src, tgt_in: m(mt.tensor(src), mt.tensor(tgt_in)), seed=140 + i, atol=1e-6, rtol=1e-6))
    return cases


def _target_mask_no_padding(mod):
    return lambda ids, pad: np.broadcast_to(mod.causal_mask(np.shape(ids)[1]), (np.shape(ids)[0], 1) +
                                            (np.shape(ids)[1],) * 2)


def _target_mask_on_queries(mod, keys=True):
    """The target's padding applied to the queries (rows) as well as the keys, or (``keys`` False)
    to the queries only."""
    def target_mask(ids, pad):
        ids = np.asarray(ids)
        queries = (ids != pad)[:, None, :, None]
        return queries & (mod.padding_mask(ids, pad) if keys else True) & mod.causal_mask(ids.shape[1])
    return target_mask


def _forward_without_src_mask(self, src, tgt_in):
    memory = self.encode(src)
    return self.generator(self.decode(tgt_in, memory, None))


MISTAKES_14 = (
    Mistake("the padding mask is True at the padding: True marks the keys that may be attended to",
            dict(padding_mask=lambda ids, pad: (np.asarray(ids) == pad)[:, None, None, :])),
    Mistake("the target mask is causal only: the target's padding must be hidden too",
            dict(target_mask=Using(_target_mask_no_padding))),
    *(Mistake("the padding is masked on the queries: only the keys at padding are hidden (the last axis, as "
              "padding_mask does); a query at padding still attends, and the loss ignores its output",
              dict(target_mask=Using(lambda m, keys=keys: _target_mask_on_queries(m, keys=keys))))
      for keys in (True, False)),
    Mistake("the decoder attends to the source's padding: pass the source's padding mask to decode",
            {"Transformer.forward": _forward_without_src_mask}),
)


# ---------------------------------------------------------------- 15: greedy decoding and beam search's step
def _cases_15():
    from transformer.decoding import beam_search as _beam, greedy_decode as _greedy, rank_extensions as _rank_extensions
    rng = np.random.default_rng(15)
    cases = []
    for i, (V, d, h, layers, src, max_len, title) in enumerate([
            (7, 4, 2, 1, [[3, 4]], 1, "one step"), (7, 4, 2, 1, [[3, 4, 5]], 4, "four steps"),
            (9, 4, 2, 2, [[3, 4, 5, 6], [7, 8, 0, 0]], 6, "a batch, a padded source, two layers")]):
        src = np.array(src)
        cfg = transformer.TransformerConfig(V, d_model=d, n_heads=h, d_ff=2 * d, n_encoder_layers=layers,
                                            n_decoder_layers=layers, dropout=0.0, max_len=16)
        ref = transformer.Transformer(cfg)
        for seed in range(150 + 100 * i, 250 + 100 * i):   # weights whose output varies from step to step
            state = _seeded_weights(ref, seed)
            want = _greedy(ref, mt.tensor(src), max_len=max_len)
            if want.shape[1] >= min(4, max_len) and all(len(set(row.tolist())) >= min(2, max_len) for row in want):
                break
        else:
            raise AssertionError(f"no weights found for greedy_decode case {i}")

        def run(ns, src=src, state=state, V=V, d=d, h=h, n=layers, max_len=max_len):
            m = engine(ns, "14").Transformer(V, d_model=d, h=h, d_ff=2 * d, n_layers=n, p_drop=0.0, max_len=16)
            m.load_state_dict({k: v.copy() for k, v in state.items()})
            recording, generator = [], m.generator     # whether a graph is recorded at each step's generator
            m.generator = lambda h: (recording.append(engine(ns)._grad_enabled), generator(h))[1]
            out = ns.greedy_decode(m, src.copy(), max_len, 1, 2, 0)
            if not isinstance(out, np.ndarray):
                raise Malformed(f"greedy_decode must return a (B, L) integer array; it returned a {type(out).__name__}")
            yield out
            yield np.bool_(not any(recording))
        cases.append(Case(f"greedy_decode: {title}", "greedy_decode(model, src, max_len, bos=1, eos=2, pad=0)",
                          {"src": src, "max_len": max_len,
                           "model": f"your Transformer (vocab {V}, d_model {d}, {h} heads, "
                           f"{layers} layer{'s' if layers > 1 else ''} each) with the grader's weights"},
                          run, [Expect("the tokens", np.asarray(want), kind="i"),
                                Expect("decoded under no_grad(): no step records a graph", np.bool_(True), kind="b")]))
    cases.append(_greedy_again_case(ref, state, (V, d, h, layers), [src, np.array([[5, 3, 7]]), src]))
    cases.append(_greedy_no_steps_case(state, (V, d, h, layers), src))
    for i, (V, d, h, layers, src, beam, alpha, max_len, title) in enumerate([
            (7, 4, 2, 1, [3, 4, 5], 1, 0.6, 4, "a beam of one: greedy decoding"),
            (8, 4, 2, 1, [3, 4, 5], 2, 0.6, 6, "a beam of two"),
            (9, 4, 2, 1, [3, 4, 5, 6], 3, 1.0, 6, "a beam of three, alpha = 1"),
            (9, 4, 2, 2, [7, 8, 4], 4, 2.0, 8, "a beam of four, two layers, alpha = 2")]):
        src = np.array(src)
        cfg = transformer.TransformerConfig(V, d_model=d, n_heads=h, d_ff=2 * d, n_encoder_layers=layers,
                                            n_decoder_layers=layers, dropout=0.0, max_len=16)
        ref = transformer.Transformer(cfg)
        for seed, scale in ((seed, scale) for seed in range(100) for scale in (1.0, 2.0)):
            state = _seeded_weights(ref, seed, scale=scale)   # weights whose best hypothesis ends with eos
            want = _beam(ref, mt.tensor(src[None]), beam_size=beam, alpha=alpha, max_len=max_len)[0][0].tokens
            if 3 <= len(want) < max_len and want[-1] == 2 and len(set(want)) >= 2:
                break
        else:
            raise AssertionError(f"no weights found for beam_search case {i}")

        def run(ns, src=src, state=state, V=V, d=d, h=h, n=layers, a=(beam, alpha, max_len)):
            m = engine(ns, "14").Transformer(V, d_model=d, h=h, d_ff=2 * d, n_layers=n, p_drop=0.0, max_len=16)
            m.load_state_dict({k: v.copy() for k, v in state.items()})
            out = ns.beam_search(m, src.copy(), *a, 1, 2, 0)
            if not isinstance(out, list):
                raise Malformed(f"beam_search must return the tokens as a list; it returned a {type(out).__name__}")
            yield np.asarray(out)
        cases.append(Case(f"beam_search: {title}", "beam_search(model, src, beam, alpha, max_len, bos=1, eos=2, pad=0)",
                          {"src": src, "beam": beam, "alpha": alpha, "max_len": max_len,
                           "model": f"your Transformer (vocab {V}, d_model {d}, {h} heads, {layers} layer"
                                    f"{'s' if layers > 1 else ''} each) with the grader's weights"},
                          run, [Expect("the best hypothesis' tokens", np.asarray(want), kind="i")]))
    cases.append(_greedy_rows_case(first=(110, 1.0)))
    cases.append(_greedy_eos_on_top_case(first=(14, 1.0)))
    cases.append(_greedy_rows_case(first=(110, 1.0), row0_first=True))
    cases.append(_greedy_padded_case(track.load(track.SOLUTIONS, "15"), first=(1, 2.0)))
    reference = track.load(track.SOLUTIONS, "15")   # the rules' variants run on the reference track
    cases.append(_scripted_greedy_case(reference, [[3, 2, 3, 3, 3, 3], [3, 3, 3, 3, 2, 3], [4, 2, 2, 2, 2, 2]], 6))
    for rule, (beam, alpha, max_len, first, title) in {
            "penalty": (2, 2.0, 8, (172, 1.0), "a finished hypothesis' penalty is lp(its length, eos included)"),
            "eos rank": (2, 1.0, 8, (1, 2.0), "an eos ranked beyond the first beam extensions finishes nothing"),
            "at end": (2, 1.0, 3, (192, 1.0), "the steps run out with prefixes open: they count, by their own "
                                               "length"),
            "ban": (3, 1.0, 6, (1, 3.0), "the tokens banned before the log-softmax"),
            "ban zeroed": (3, 1.0, 6, (191, 1.0), "the banned tokens set to −∞ before the log-softmax, not zeroed"),
            "no bos": (2, 1.0, 8, (248, 1.0), "the length in the penalty counts the tokens without bos"),
            "alpha": (2, 2.0, 8, (130, 2.0), "alpha = 2: the penalty is squared"),
            "five": (2, 1.0, 8, (36, 2.0), "the penalty's 5 + n"),
            "start": (2, 1.0, 8, (36, 2.0), "the empty prefix starts at log probability 0"),
            "ranked": (3, 1.0, 8, (186, 3.0), "2·beam extensions ranked, so that beam stay open after an eos"),
            "kept": (2, 1.0, 8, (84, 1.0), "at most beam prefixes stay open"),
            "eos kept": (2, 1.0, 8, (0, 1.0), "an extension by eos never stays open"),
            "mask": (2, 1.0, 8, (1, 3.0), "a source that ends in padding: masked")}.items():
        cases.append(_beam_rule_case(reference, rule, beam, alpha, max_len, title, first))
    for table, (beam, alpha, max_len), title in _SCRIPTED_15:
        cases.append(_scripted_beam_case(reference, table, beam, alpha, max_len, title))
    cases.append(_scripted_beam_case(reference, {(3,): {3: .7, 2: .3}, (3, 3): {3: .7, 2: .3}}, 4, 0.6, 4,
                                     "a beam wider than the words allowed: an extension at −∞ (banned) is neither "
                                     "finished nor kept", V=4))
    specs = [((1, 1, 2, 1), "one beam, two tokens, the best one"), ((1, 2, 2, 2), "two beams"),
             ((1, 2, 3, 6), "n = K·V: every extension, in order"), ((2, 2, 3, 4), "two sentences"),
             ((2, 3, 4, 6), "three beams, four tokens"), ((1, 2, 3, 3), "beam 1 is unused (score −∞)")]
    for (B, K, V, n), title in specs:
        while True:   # no ties between the totals: the order is then unique
            scores = np.round(-rng.uniform(0, 3, (B, K)), 2)
            logp = np.round(np.log(rng.dirichlet(np.ones(V), (B, K))), 2)
            if "unused" in title:
                scores[:, 1] = -np.inf
            total = (scores[:, :, None] + logp).reshape(B, -1)
            gaps = np.diff(np.sort(total[np.isfinite(total)]))
            if gaps.size == 0 or gaps.min() > 1e-6:
                break

        def run(ns, scores=scores, logp=logp, n=n):
            given = scores.copy(), logp.copy()
            out = ns.rank_extensions(*given, n)
            if not isinstance(out, (tuple, list)) or len(out) != 3:
                got = f"{len(out)} values" if isinstance(out, (tuple, list)) else f"a {type(out).__name__}"
                raise Malformed(f"rank_extensions must return three arrays (beam, token, score); it returned {got}")
            yield from out
            yield np.bool_(np.array_equal(given[0], scores) and np.array_equal(given[1], logp))

        beam, token, score = _rank_extensions(scores, logp, n)
        cases.append(Case(f"rank_extensions: {title}", "rank_extensions(scores, logp, n)",
                          {"scores": scores, "logp": logp, "n": n}, run,
                          [Expect("beam", beam, kind="i"), Expect("token", token, kind="i"),
                           Expect("score", score, atol=1e-12),
                           Expect("scores and logp unchanged (the caller's arrays)", np.bool_(True), kind="b")]))
    return cases


def _greedy_again_case(ref, state, sizes, sources) -> Case:
    """One model decodes several batches in turn, of different sizes: each call starts afresh
    (caches kept from a call before would mix two batches, or fail on a new batch size)."""
    V, d, h, layers = sizes
    wants = [_greedy_reference(ref, src) for src in sources]

    def run(ns):
        m = engine(ns, "14").Transformer(V, d_model=d, h=h, d_ff=2 * d, n_layers=layers, p_drop=0.0, max_len=16)
        m.load_state_dict({k: v.copy() for k, v in state.items()})
        for src in sources:
            yield ns.greedy_decode(m, src.copy(), 6, 1, 2, 0)
    return Case("greedy_decode: one model, three calls in turn (batches of 2, 1 and 2)",
                "for src in (src_a, src_b, src_a): greedy_decode(model, src, max_len=6, bos=1, eos=2, pad=0)",
                {"src_a": sources[0], "src_b": sources[1],
                 "model": f"your Transformer (vocab {V}, d_model {d}, {h} heads, {layers} layers each) with the "
                          "grader's weights"},
                run, [Expect(f"call {i + 1}: the tokens", want, kind="i") for i, want in enumerate(wants)])


def _greedy_no_steps_case(state, sizes, src) -> Case:
    """max_len = 0: no step runs, and the result is a (B, 0) integer array."""
    V, d, h, layers = sizes

    def run(ns):
        m = engine(ns, "14").Transformer(V, d_model=d, h=h, d_ff=2 * d, n_layers=layers, p_drop=0.0, max_len=16)
        m.load_state_dict({k: v.copy() for k, v in state.items()})
        out = ns.greedy_decode(m, src.copy(), 0, 1, 2, 0)
        if not isinstance(out, np.ndarray):
            raise Malformed(f"greedy_decode must return a (B, L) integer array; it returned a {type(out).__name__}")
        yield out
    return Case("greedy_decode: max_len = 0, no token to generate", "greedy_decode(model, src, max_len=0, bos=1, "
                "eos=2, pad=0)", {"src": src, "model": "your Transformer with the grader's weights"}, run,
                [Expect(f"the tokens: a ({len(src)}, 0) integer array", np.zeros((len(src), 0), np.int64), kind="i")])


def _greedy_reference(ref, src):
    from transformer.decoding import greedy_decode  # noqa: PLC0415
    return np.asarray(greedy_decode(ref, mt.tensor(src), max_len=6))


def _rank(scores, logp, n, by="total", report="total", order=-1, divide_by="V"):
    B, K, V = logp.shape
    total = (scores[:, :, None] + logp).reshape(B, -1)
    key = total if by == "total" else logp.reshape(B, -1)
    top = np.argsort(order * key, axis=1, kind="stable")[:, :n]
    shown = total if report == "total" else logp.reshape(B, -1)
    width = V if divide_by == "V" else K
    return top // width, top % width, np.take_along_axis(shown, top, 1)


def _greedy(mod, offsets=True, banned=True, pad_after=True, masked=True):
    def greedy_decode(model, src, max_len, bos, eos, pad):
        src = np.asarray(src)
        with mod.no_grad():
            src_mask, memory = mod.padding_mask(src, pad if masked else -1), model.encode(src)
            caches = [{} for _ in model.decoder.layers]
            ys, done = np.full((len(src), 1), bos, dtype=np.int64), np.zeros(len(src), bool)
            for t in range(max_len):
                x = model.embed(ys[:, -1:], offset=t if offsets else 0)
                for layer, cache in zip(model.decoder.layers, caches):
                    x = layer.step(x, memory, src_mask, cache)
                logits = model.generator(x).data[:, -1].copy()
                if banned:
                    logits[:, [pad, bos] + ([eos] if t == 0 else [])] = -np.inf
                nxt = np.where(done & pad_after, pad, logits.argmax(axis=-1))
                ys = np.concatenate([ys, nxt[:, None]], axis=1)
                done |= nxt == eos
                if done.all():
                    break
        return ys[:, 1:]
    return greedy_decode


def _model_15(V, d, h, layers):
    cfg = transformer.TransformerConfig(V, d_model=d, n_heads=h, d_ff=2 * d, n_encoder_layers=layers,
                                        n_decoder_layers=layers, dropout=0.0, max_len=16)
    return transformer.Transformer(cfg)


# Scripted models for beam search's rules that a trained model's numbers seldom reach: the next
# token's probabilities depend on the prefix alone (a dict prefix -> {token: probability}; any other
# prefix gives token 3), and 2 is eos.
_SCRIPTED_15 = [
    ({(): {3: .6, 4: .4}, (3,): {2: .5, 3: .42, 4: .08}, (4,): {2: .6, 3: .2, 4: .2}, (3, 3): {2: .1, 3: .9},
      (4, 3): {2: .5, 3: .5}, (4, 2): {3: 1.0}}, (2, 2.0, 3),
     "an eos ranked beyond the first beam is dropped, even with open slots still free"),
    ({(): {3: .5, 4: .5}}, (2, 0.0, 1), "equal scores at the end: the open prefix ranked first wins"),
    ({(): {3: .5, 4: .5}, (3,): {2: 1 / 3, 3: 1 / 3, 4: 1 / 3}, (4,): {2: 1 / 3, 3: 1 / 3, 4: 1 / 3}}, (2, 0.6, 2),
     "a finished hypothesis and an open one of equal score: the finished one, found first, wins"),
    ({(): {3: .6, 4: .4}}, (2, 0.6, 0), "max_len = 0: no step, the empty prefix"),
]


def _scripted_model(ns, table: dict, V: int = 5):
    """A model with the Transformer's decoding interface (encode, decode, generator, and the
    whole forward) whose logits at each position are log P(next | prefix) from ``table``, −50
    for a token it does not list (bos first in every target row, not part of the prefix)."""
    Tensor = engine(ns).Tensor

    def logits_of(prefix):
        probs = table.get(tuple(prefix), {3: 1.0})
        return [float(np.log(probs[w])) if w in probs else -50.0 for w in range(V)]

    class Scripted:
        def encode(self, src):
            return Tensor(np.zeros(np.shape(src) + (1,)))

        def decode(self, tgt_in, memory=None, src_mask=None):
            rows = np.asarray(tgt_in)
            return Tensor(np.array([[logits_of(row[1:t + 1]) for t in range(rows.shape[1])] for row in rows]))

        def generator(self, h):
            return h

        def __call__(self, src, tgt_in):
            return self.decode(tgt_in)
    return Scripted()


def _scripted_beam_case(reference, table, beam, alpha, max_len, title, V=5) -> Case:
    """beam_search on a scripted model of ``V`` tokens; the answer is the reference solution's on it."""
    src = np.array([3])
    ours = types.SimpleNamespace(__track__=reference.__track__)
    want = reference.beam_search(_scripted_model(ours, table, V), src.copy(), beam, alpha, max_len, 1, 2, 0)

    def run(ns):
        out = ns.beam_search(_scripted_model(ns, table, V), src.copy(), beam, alpha, max_len, 1, 2, 0)
        yield np.zeros(0, np.int64) if isinstance(out, list) and not out else np.asarray(out)
    shown = "; ".join(f"after {list(k)}: " + ", ".join(f"{w} {p:g}" for w, p in v.items()) for k, v in table.items())
    return Case(f"beam_search: {title}", "beam_search(model, src, beam, alpha, max_len, bos=1, eos=2, pad=0)",
                {"src": src, "beam": beam, "alpha": alpha, "max_len": max_len,
                 "model": f"a scripted model of {V} tokens (pad 0, bos 1, eos 2): next-token probabilities {shown}; "
                          "after any other prefix, token 3"}, run,
                [Expect("the best hypothesis' tokens", np.asarray(want, dtype=np.int64), kind="i")])


def _learners_model(ns, state, V, d, h, layers):
    m = engine(ns, "14").Transformer(V, d_model=d, h=h, d_ff=2 * d, n_layers=layers, p_drop=0.0, max_len=16)
    m.load_state_dict({k: v.copy() for k, v in state.items()})
    return m


def _scripted_greedy_case(reference, wants: list, max_len: int) -> Case:
    """greedy_decode on a scripted model whose likeliest token for row b at step t is wants[b][t]
    (every other token 5 lower): rows that finish steps before the last, whose model would go on
    with words, or with eos again, continue with pad at every step. The answer is the reference
    solution's on the same model."""
    V = 5

    def model_for(ns):
        Tensor = engine(ns).Tensor

        class Layer:
            def step(self, x, memory, src_mask, cache):
                return x

        class Scripted:
            decoder = types.SimpleNamespace(layers=[Layer()])

            def encode(self, src):
                return Tensor(np.zeros(np.shape(src) + (1,)))

            def embed(self, ids, offset=0):       # the step, carried to the generator
                return Tensor(np.full(np.shape(ids) + (1,), float(offset)))

            def generator(self, x):
                steps = np.asarray(x.data)[:, -1, 0].astype(int)
                logits = np.full((len(steps), 1, V), -5.0)
                for b, t in enumerate(steps):
                    logits[b, 0, wants[b][min(t, len(wants[b]) - 1)]] = 0.0
                return Tensor(logits)
        return Scripted()
    src = np.full((len(wants), 2), 3)
    ours = types.SimpleNamespace(__track__=reference.__track__)
    want = reference.greedy_decode(model_for(ours), src.copy(), max_len, 1, 2, 0)

    def run(ns):
        yield ns.greedy_decode(model_for(ns), src.copy(), max_len, 1, 2, 0)
    return Case("greedy_decode: rows that finish steps before the last, their model going on with words or with eos",
                f"greedy_decode(model, src, max_len={max_len}, bos=1, eos=2, pad=0)",
                {"src": src, "model": "a scripted model of 5 tokens (pad 0, bos 1, eos 2) and one layer whose step "
                                      "passes x on: row b's likeliest token at step t is " + "; ".join(
                                          f"row {b}: {w}" for b, w in enumerate(wants))}, run,
                [Expect("the tokens", np.asarray(want), kind="i")])


def _greedy_rows_case(first=(0, 1.0), row0_first=False) -> Case:
    """Rows that finish at different steps: each continues with pad after its eos (``row0_first``:
    the first row finishes before another, so that a loop that stops on row 0 stops early)."""
    from transformer.decoding import greedy_decode as _greedy_ref
    V, d, h, layers, max_len = 9, 4, 2, 1, 6
    src = np.array([[3, 4, 5], [6, 7, 8], [4, 4, 3]])
    ref = _model_15(V, d, h, layers)
    def finish_apart(state, want):
        ends = [row.index(2) for row in want.tolist() if 2 in row]
        return len(ends) >= 2 and len(set(ends)) >= 2
    state, want = _weights_where(ref, first, 300, (1.0, 2.0), lambda: np.asarray(_greedy_ref(
        ref, mt.tensor(src), max_len=max_len)), finish_apart, "the greedy rows case")
    if row0_first:   # the rows in the order they finish (each row is decoded on its own)
        order = np.argsort([row.index(2) if 2 in row else len(row) for row in want.tolist()], kind="stable")
        src, want = src[order], want[order]

    def run(ns):
        yield ns.greedy_decode(_learners_model(ns, state, V, d, h, layers), src.copy(), max_len, 1, 2, 0)
    return Case("greedy_decode: rows that finish at different steps" + (", the first row first" if row0_first else ""),
                "greedy_decode(model, src, max_len, "
                "bos=1, eos=2, pad=0)", {"src": src, "max_len": max_len, "model": f"your Transformer (vocab {V}, "
                                         f"d_model {d}, {h} heads, 1 layer each) with the grader's weights"},
                run, [Expect("the tokens", want, kind="i")])


def _greedy_eos_on_top_case(first=(0, 1.0)) -> Case:
    """max_len = 1 with weights whose likeliest first token is eos: eos is banned at step 0
    whatever max_len is, so the one token is the best of the others."""
    from transformer.decoding import greedy_decode as _greedy_ref
    V, d, h, layers = 9, 4, 2, 1
    src = np.array([[3, 4, 5]])
    ref = _model_15(V, d, h, layers)

    def eos_on_top(state, want):
        with mt.no_grad():
            logits = ref(mt.tensor(src), mt.tensor(np.array([[1]]))).numpy()[0, -1]
        logits[[0, 1]] = -np.inf
        return int(logits.argmax()) == 2
    state, want = _weights_where(ref, first, 300, (1.0, 2.0, 3.0), lambda: np.asarray(_greedy_ref(
        ref, mt.tensor(src), max_len=1)), eos_on_top, "the greedy eos-on-top case")

    def run(ns):
        yield ns.greedy_decode(_learners_model(ns, state, V, d, h, layers), src.copy(), 1, 1, 2, 0)
    return Case("greedy_decode: max_len = 1, eos the likeliest first token: banned at step 0 all the same",
                "greedy_decode(model, src, max_len=1, bos=1, eos=2, pad=0)",
                {"src": src, "max_len": 1, "model": f"your Transformer (vocab {V}, d_model {d}, {h} heads, 1 layer "
                                                    "each) with the grader's weights, eos its likeliest first token"},
                run, [Expect("the tokens", want, kind="i")])


def _weights_where(ref, first, seeds, scales, answer, holds, what):
    """(state, answer()) for the first weights given to ``ref`` for which ``holds(state,
    answer())``: drawn with (seed, scale) pairs, ``first`` first (the pair a search from the
    start found, kept so that the grader starts where it will stop), then seed by seed."""
    pairs = [first] + [(seed, scale) for seed in range(seeds) for scale in scales if (seed, scale) != first]
    for seed, scale in pairs:
        state = _seeded_weights(ref, seed, scale=scale)
        want = answer()
        if holds(state, want):
            return state, want
    raise AssertionError(f"no weights found for {what}")


def _greedy_padded_case(reference, first=(0, 1.0)) -> Case:
    """A source that ends in padding, with weights for which decoding without the source's
    padding mask (``_greedy(..., masked=False)`` on the reference track) gives other tokens."""
    from transformer.decoding import greedy_decode as _greedy_ref
    V, d, h, layers, max_len = 9, 4, 2, 1, 6
    src = np.array([[3, 4, 0, 0]])
    ref = _model_15(V, d, h, layers)
    unmasked = _greedy(reference, masked=False)
    def unmasked_differs(state, want):
        theirs = unmasked(_learners_model(types.SimpleNamespace(__track__=reference.__track__), state, V, d, h,
                                          layers), src.copy(), max_len, 1, 2, 0)
        return theirs.shape != want.shape or bool((theirs != want).any())
    state, want = _weights_where(ref, first, 300, (1.0, 2.0, 3.0), lambda: np.asarray(_greedy_ref(
        ref, mt.tensor(src), max_len=max_len)), unmasked_differs, "the greedy padded case")

    def run(ns):
        yield ns.greedy_decode(_learners_model(ns, state, V, d, h, layers), src.copy(), max_len, 1, 2, 0)
    return Case("greedy_decode: a source that ends in padding (pad = 0), masked", "greedy_decode(model, src, "
                "max_len, bos=1, eos=2, pad=0)", {"src": src, "max_len": max_len, "model": f"your Transformer (vocab "
                                                  f"{V}, d_model {d}, {h} heads, 1 layer each) with the grader's "
                                                  "weights"}, run, [Expect("the tokens", want, kind="i")])


def _beam_rule_case(reference, rule, beam, alpha, max_len, title, first=(0, 1.0)) -> Case:
    """A beam search whose answer changes when ``rule`` is broken: weights are drawn until the
    reference's variant that breaks it (``_beam_variant`` on the reference track) returns
    another hypothesis than minitensor's beam search."""
    from transformer.decoding import beam_search as _beam_ref
    V, d, h, layers = 9, 4, 2, 1
    src = np.array([3, 4, 5, 0, 0] if rule == "mask" else [3, 4, 5, 6])
    ref = _model_15(V, d, h, layers)
    broken = _beam_variant(reference, **_BEAM_RULES[rule][0])
    def broken_differs(state, want):
        return list(broken(_learners_model(types.SimpleNamespace(__track__=reference.__track__), state, V, d, h,
                                           layers), src.copy(), beam, alpha, max_len, 1, 2, 0)) != list(want)
    state, want = _weights_where(ref, first, 400, (1.0, 2.0, 3.0), lambda: _beam_ref(
        ref, mt.tensor(src[None]), beam_size=beam, alpha=alpha, max_len=max_len)[0][0].tokens, broken_differs,
        f"the beam rule {rule!r}")

    def run(ns):
        yield np.asarray(ns.beam_search(_learners_model(ns, state, V, d, h, layers), src.copy(), beam, alpha, max_len,
                                        1, 2, 0))
    return Case(f"beam_search: {title}", "beam_search(model, src, beam, alpha, max_len, bos=1, eos=2, pad=0)",
                {"src": src, "beam": beam, "alpha": alpha, "max_len": max_len,
                 "model": f"your Transformer (vocab {V}, d_model {d}, {h} heads, 1 layer each) with the grader's "
                          "weights"}, run, [Expect("the best hypothesis' tokens", np.asarray(want), kind="i")])


def _beam_variant(mod, penalty="length", eos_rank="beam", at_end="open count", ban="before", alpha_used=True,
                  pick="best", lp_form=None, start=0.0, ranked=2, kept_up_to=1, eos_kept=False, finish_cap=True,
                  masked=True):
    """Beam search on the track ``mod`` with the rules of exercise 15, one of them broken when a
    setting is changed: ``penalty`` "t - 1" (a finished hypothesis' penalty one short),
    ``eos_rank`` "any" (an eos beyond the first beam finishes) or "open" (it stays open),
    ``at_end`` "finished only" (open prefixes never count), ``ban`` "after" (banned after the
    log-softmax) or "zeroed" (zeroed before it and set to −∞ after), ``alpha_used`` False (no
    length penalty), ``pick`` "first" (the first to finish) or "last of equals" (ties to the
    last found), ``lp_form`` another penalty (n, alpha) -> lp, ``start`` the empty prefix's
    score, ``ranked`` the extensions ranked per beam, ``kept_up_to`` open prefixes kept per
    beam, ``eos_kept`` an eos extension kept open as well, ``finish_cap`` False (more than beam
    finish), ``masked`` False (the source's padding not masked)."""
    def beam_search(model, src, beam, alpha, max_len, bos, eos, pad):
        a = alpha if alpha_used else 0.0
        lp = (lambda n: ((5.0 + n) / 6.0) ** a) if lp_form is None else (lambda n: lp_form(n, a))   # noqa: E731
        src = np.asarray(src)[None]
        with mod.no_grad():
            src_mask, memory = mod.padding_mask(src, pad if masked else -1), model.encode(src)
            open_, finished, done = [([], start)], [], False
            for t in range(1, max_len + 1):
                ys = np.array([[bos] + tokens for tokens, _ in open_])
                rows = np.zeros(len(open_), dtype=np.int64)
                logits = model.generator(model.decode(ys, memory[rows], src_mask[rows])).data[:, -1].copy()
                banned = [pad, bos] + ([eos] if t == 1 else [])
                if ban in ("before", "zeroed"):
                    logits[:, banned] = -np.inf if ban == "before" else 0.0
                logp = mod.LogSoftmax().forward(logits)
                if ban in ("after", "zeroed"):
                    logp[:, banned] = -np.inf
                n = min(ranked * beam, logp.size)
                which, token, total = mod.rank_extensions(np.array([[s for _, s in open_]]), logp[None], n)
                kept = []
                for j in range(n):
                    k, w, s = int(which[0, j]), int(token[0, j]), float(total[0, j])
                    if not np.isfinite(s):
                        break
                    if w == eos and (j < beam or eos_rank != "open"):
                        if (j < beam or eos_rank == "any") and (len(finished) < beam or not finish_cap):
                            finished.append((open_[k][0] + [w], s / lp(t - 1 if penalty == "t - 1" else t)))
                        if not eos_kept:
                            continue
                    if len(kept) < kept_up_to * beam:
                        kept.append((open_[k][0] + [w], s))
                if len(finished) >= beam or not kept:
                    done = True
                    break
                open_ = kept
            hypotheses = list(finished)
            if (not done or not hypotheses) and (at_end == "open count" or not hypotheses):
                hypotheses += [(tokens, s / lp(len(tokens))) for tokens, s in open_]
        if pick == "last of equals":
            hypotheses.reverse()
        return hypotheses[0][0] if pick == "first" else max(hypotheses, key=lambda h: h[1])[0]
    return beam_search


_BEAM_RULES = {   # rule -> (the variant that breaks it, the hint of the mistake)
    "penalty": (dict(penalty="t - 1"), "a finished hypothesis' length penalty is lp(t), t its length with eos "
                                       "(the step it finished at), not lp(t − 1)"),
    "eos rank": (dict(eos_rank="any"), "an eos ranked beyond the first beam extensions of a step finished a "
                                       "hypothesis: only the first beam may; drop the others"),
    "eos open": (dict(eos_rank="open"), "an eos ranked beyond the first beam extensions stayed open: drop it (an "
                                        "extension by eos never stays open)"),
    "ties": (dict(pick="last of equals"), "between equal scores the one found first wins: the finished ones in the "
                                          "order they finished, then the open ones best first"),
    "at end": (dict(at_end="finished only"), "the search ran out of steps and the open prefixes were left out: "
                                             "they count too, each scored log P / lp(its length)"),
    "ban": (dict(ban="after"), "the tokens were banned after the log-softmax: set their logits to −∞ first, so "
                               "that the allowed tokens' probabilities sum to 1"),
    "ban zeroed": (dict(ban="zeroed"), "the banned tokens' logits were zeroed before the log-softmax and set to −∞ "
                                       "only after: set them to −∞ first, so that the allowed tokens' probabilities "
                                       "sum to 1"),
    "alpha": (dict(lp_form=lambda n, a: (5.0 + n) / 6.0), "the length penalty is ((5 + n) / 6) to the power alpha"),
    "five": (dict(lp_form=lambda n, a: ((10.0 + n) / 6.0) ** a), "the length penalty is ((5 + n) / 6)^alpha"),
    "no bos": (dict(lp_form=lambda n, a: ((6.0 + n) / 6.0) ** a), "bos was counted in the length: n in lp(n) counts "
                                                                 "the hypothesis' tokens without bos (eos counts)"),
    "start": (dict(start=1.0), "the empty prefix starts with log probability 0 (probability 1)"),
    "ranked": (dict(ranked=1), "rank the 2·beam best extensions: with only beam, an eos among them leaves fewer "
                               "than beam to keep open"),
    "kept": (dict(kept_up_to=2), "keep at most beam open prefixes"),
    "eos kept": (dict(eos_kept=True), "an extension by eos finishes (or is dropped): it never stays open"),
    "mask": (dict(masked=False), "the source's padding was not masked: encode and attend with "
                                 "padding_mask(src, pad)"),
}


MISTAKES_15 = (
    Mistake("the hypotheses are ranked by log P alone: divide by the length penalty ((5 + n) / 6)^alpha, or short "
            "ones win", dict(beam_search=Using(lambda m: _beam_variant(m, alpha_used=False)))),
    Mistake("the first hypothesis to finish was returned: return the best-scored one",
            dict(beam_search=Using(lambda m: _beam_variant(m, pick="first")))),
    *(Mistake(hint, dict(beam_search=Using(lambda m, rule=rule: _beam_variant(m, **rule))))
      for rule, hint in _BEAM_RULES.values()),
    Mistake("a row went on after its eos: once a row has its eos, it continues with pad",
            dict(greedy_decode=Using(lambda m: _greedy(m, pad_after=False)))),
    Mistake("every step embeds its token at position 0: the token of step t sits at position t (offset=t)",
            dict(greedy_decode=Using(lambda m: _greedy(m, offsets=False)))),
    Mistake("pad or bos was chosen, or eos as the first token: neither pad nor bos is ever an output, and an "
            "output has at least one token", dict(greedy_decode=Using(lambda m: _greedy(m, banned=False)))),
    Mistake("ranked by the token's log-probability alone: rank by the total, the beam's score plus the token's",
            dict(rank_extensions=lambda s, lp, n: _rank(s, lp, n, by="logp"))),
    Mistake("the scores returned are the tokens' log-probabilities: return the totals you ranked by",
            dict(rank_extensions=lambda s, lp, n: _rank(s, lp, n, report="logp"))),
    Mistake("worst first: the best extension, the highest total log-probability, comes first",
            dict(rank_extensions=lambda s, lp, n: _rank(s, lp, n, order=1))),
    Mistake("extension (beam k, token w) sits at k·V + w of a flattened row: divide that index by V, not K",
            dict(rank_extensions=lambda s, lp, n: _rank(s, lp, n, divide_by="K"))),
)



# ---------------------------------------------------------------- 16: the schedule
def _cases_16():
    specs = [(1, 16, 1, 1.0, "step = warmup = 1: the two branches of the min agree"),
             (1, 512, 4000, 1.0, "the first step of a long warm-up"), (2, 16, 1, 1.0, "one step past a warm-up of 1"),
             (2, 512, 4000, 1.0, "the second step of the warm-up"),
             (50, 1024, 8000, 1.0, "still warming up, d_model = 1024"),
             (4000, 512, 4000, 1.0, "the peak: step = warmup"), (4001, 512, 4000, 1.0, "the step after the peak"),
             (100_000, 512, 4000, 1.0, "step 100,000"), (10, 64, 100, 0.5, "a factor of 0.5")]
    cases = []
    for step, d_model, warmup, factor, title in specs:
        def run(ns, a=(step, d_model, warmup), factor=factor):
            yield ns.noam_lr(*a, factor=factor)
        cases.append(Case(f"noam_lr: {title}", "noam_lr(step, d_model, warmup, factor=factor)",
                          {"step": step, "d_model": d_model, "warmup": warmup, "factor": factor}, run,
                          [Expect("", transformer.noam_lr(step, d_model, warmup, factor), atol=0, rtol=1e-9)]))

    def run(ns):
        yield ns.noam_lr(1, 16, 3, factor=2.0)
        yield ns.noam_lr(1, 16, 3)
    cases.append(Case("noam_lr: factor left out is 1, even after a call with factor 2", "noam_lr(1, 16, 3, factor=2.0); "
                      "then noam_lr(1, 16, 3)", {"step": 1, "d_model": 16, "warmup": 3}, run,
                      [Expect("with factor 2", transformer.noam_lr(1, 16, 3, 2.0), atol=0, rtol=1e-9),
                       Expect("then without a factor", transformer.noam_lr(1, 16, 3, 1.0), atol=0, rtol=1e-9)]))
    for steps, d_model, warmup, factor in [(3, 64, 2, 1.0), (5, 16, 3, 2.0)]:
        def run(ns, a=(d_model, warmup, factor), steps=steps):
            opt = types.SimpleNamespace(lr=123.0)   # an optimiser as Noam sees it: an lr to set
            sched = ns.Noam(opt, *a)
            for _ in range(steps):
                rate = sched.step()
                yield rate
                yield opt.lr
        cases.append(Case(f"Noam: {steps} steps", "sched = Noam(optimizer, d_model, warmup, factor); then sched.step() "
                          f"{steps} times", {"d_model": d_model, "warmup": warmup, "factor": factor}, run,
                          [Expect(f"step {t} {what}", transformer.noam_lr(t, d_model, warmup, factor),
                                  atol=0, rtol=1e-9)
                           for t in range(1, steps + 1) for what in ("returns", ": the optimiser's lr")]))
    return cases



def noam(self):
    return transformer.noam_lr(self.steps, self.d_model, self.warmup, self.factor)


def _noam_from_zero(mod):
    def step(self):     # the rate of the step count before this call
        rate = mod.noam_lr(self.steps, self.d_model, self.warmup, self.factor)
        self.steps += 1
        self.optimizer.lr = rate
        return rate
    return step


def _noam_step_unset(self):
    self.steps += 1
    return noam(self)


MISTAKES_16 = (
    Mistake("the warm-up branch uses warmup^−1: equation (3) has warmup^−1.5, so that both branches meet at step = "
            "warmup", dict(noam_lr=lambda s, d, w, f=1.0: f * d**-0.5 * min(s**-0.5, s * w**-1.0))),
    Mistake("there is no warm-up: for the first warmup steps the rate must grow linearly with step",
            dict(noam_lr=lambda s, d, w, f=1.0: f * d**-0.5 * s**-0.5)),
    Mistake("max where equation (3) has min",
            dict(noam_lr=lambda s, d, w, f=1.0: f * d**-0.5 * max(s**-0.5, s * w**-1.5))),
    Mistake("the factor d_model^−0.5 is missing", dict(noam_lr=lambda s, d, w, f=1.0: f * min(s**-0.5, s * w**-1.5))),
    Mistake("factor is ignored: multiply the rate by it",
            dict(noam_lr=lambda s, d, w, f=1.0: d**-0.5 * min(s**-0.5, s * w**-1.5))),
    Mistake("the rate is returned but the optimiser's lr is not set: optimizer.lr = the rate",
            {"Noam.step": _noam_step_unset}),
    Mistake("the steps were counted from 0: the first call of step is step 1 (count, then compute the rate)",
            {"Noam.step": Using(_noam_from_zero)}),
)



# ---------------------------------------------------------------- 17: silent parameters
def _cases_17():
    from lessonkit.checks import silent_parameters as _package_silent
    rng = np.random.default_rng(17)
    V, d, h, layers = 7, 4, 2, 1
    cfg = transformer.TransformerConfig(V, d_model=d, n_heads=h, d_ff=2 * d, n_encoder_layers=layers,
                                        n_decoder_layers=layers, dropout=0.0, max_len=16)
    src, tgt_in, tgt_out = _ids(rng, 2, 3, V, pad_from=2), _ids(rng, 2, 3, V), _ids(rng, 2, 3, V)
    tgt_in[:, 0] = 1
    losses = {
        "the whole model's loss": (
            lambda ns, m: engine(ns, "04").cross_entropy(m(src, tgt_in), tgt_out, 0.1, 0),
            lambda m: transformer.label_smoothed_loss(m(mt.tensor(src), mt.tensor(tgt_in)), mt.tensor(tgt_out), 0,
                                                      0.1)),
        "a loss of the encoder's output alone": (
            lambda ns, m: (m.encode(src) * m.encode(src)).sum(),
            lambda m: (m.encode(mt.tensor(src), _masks.padding_mask(mt.tensor(src), 0)) ** 2).sum()),
        "the whole model's loss times 1e-12: silent is relative to the largest gradient": (
            lambda ns, m: engine(ns, "04").cross_entropy(m(src, tgt_in), tgt_out, 0.1, 0) * 1e-12,
            lambda m: transformer.label_smoothed_loss(m(mt.tensor(src), mt.tensor(tgt_in)), mt.tensor(tgt_out), 0,
                                                      0.1) * 1e-12),
        "a loss that reaches no parameter (the encoder's output times 0): every one is silent": (
            lambda ns, m: (m.encode(src) * 0.0).sum(),
            lambda m: (m.encode(mt.tensor(src), _masks.padding_mask(mt.tensor(src), 0)) * 0.0).sum()),
        "a loss of the first decoder layer's feed-forward output alone": (
            lambda ns, m: (m.decoder.layers[0].ffn(engine(ns).Tensor(np.ones((1, d)))) * 1.0).sum(),
            lambda m: (m.decoder.layers[0].ffn(mt.tensor(np.ones((1, d)))) * 1.0).sum()),
        "the whole model's loss plus 1e9: silent is relative to the largest gradient, not to the loss": (
            lambda ns, m: engine(ns, "04").cross_entropy(m(src, tgt_in), tgt_out, 0.1, 0) + 1e9,
            lambda m: transformer.label_smoothed_loss(m(mt.tensor(src), mt.tensor(tgt_in)), mt.tensor(tgt_out), 0,
                                                      0.1) + 1e9),
    }
    cases = []
    for i, (title, (mine, theirs)) in enumerate(losses.items()):
        ref = transformer.Transformer(cfg)
        state = _seeded_weights(ref, 170 + i)
        for p in ref.parameters():
            p.grad = None
        theirs(ref).backward()
        # the default rel for each loss; for the whole model's loss also rel = 0.05 and 0.3, where the
        # gradients' norms (not their largest or mean entry) decide
        for before, rel in ([(False, None), (False, 0.05), (False, 0.3)] if i == 0 else
                            [(False, None), (True, None)] if i == 1 else [(False, None)]):
            want = _package_silent(ref, *([] if rel is None else [rel]))

            def run(ns, mine=mine, state=state, before=before, rel=rel):
                m = engine(ns, "14").Transformer(V, d_model=d, h=h, d_ff=2 * d, n_layers=layers, p_drop=0.0, max_len=16)
                m.load_state_dict({k: v.copy() for k, v in state.items()})
                if before:   # gradients left over from an earlier backward must not count
                    losses["the whole model's loss"][0](ns, m).backward()
                yield ns.silent_parameters(m, lambda m: mine(ns, m), **({} if rel is None else {"rel": rel}))
            shown = {"model": f"your Transformer (vocab {V}, d_model {d}, {h} heads, {layers} layer each) "
                              "with the grader's weights", "loss_fn": title}
            if rel is not None:
                shown["rel"] = rel
            cases.append(Case(title + (", after an earlier backward of the whole loss" if before else "")
                              + (f", with rel = {rel}" if rel is not None else ""),
                              "silent_parameters(model, loss_fn)" if rel is None else
                              "silent_parameters(model, loss_fn, rel=rel)", shown, run,
                              [Expect("the silent parameters, in order", want, kind="s")]))
    cases.append(_largest_first_case())
    return cases


def _largest_first_case() -> Case:
    """Five parameters, the largest gradient the first's: every norm counts toward the largest."""
    scales = {"big": 1e5, "a": 1.0, "tiny": 1e-3, "b": 1.0, "c": 1.0}

    def run(ns):
        Module, P = engine(ns, "05").Module, engine(ns, "05").Parameter

        class Five(Module):
            def __init__(self):
                for name in scales:
                    setattr(self, name, P(np.ones(2)))

        def loss_fn(m):
            total = None
            for name, k in scales.items():
                term = (getattr(m, name) * k).sum()
                total = term if total is None else total + term
            return total
        yield ns.silent_parameters(Five(), loss_fn)
    return Case("five parameters, the largest gradient the first one's: the largest over them all",
                "silent_parameters(model, loss_fn)", {"model": "a Module of five parameters (2,) of ones: big, a, "
                                                      "tiny, b, c", "loss_fn": "Σ(1e5·big) + Σa + Σ(1e-3·tiny) + Σb + Σc"},
                run, [Expect("the silent parameters, in order", ["tiny"], kind="s")])


def _silent(none_only=False, clear=True):
    def silent_parameters(model, loss_fn, rel=1e-6):
        named = list(model.named_parameters())
        if clear:
            for _, p in named:
                p.grad = None
        loss_fn(model).backward()
        if none_only:
            return [n for n, p in named if p.grad is None]
        norms = [0.0 if p.grad is None else float(np.linalg.norm(p.grad)) for _, p in named]
        return [n for (n, _), g in zip(named, norms) if g <= rel * max(norms)]
    return silent_parameters


MISTAKES_17 = (
    Mistake("only the parameters without a gradient are listed: a gradient that is zero, or tiny next to the "
            "largest, reaches nothing either", dict(silent_parameters=_silent(none_only=True))),
    Mistake("gradients left from an earlier backward were counted: clear every .grad before the backward",
            dict(silent_parameters=_silent(clear=False))),
)


# ---------------------------------------------------------------- 18: a shift as a linear map
def _cases_18():
    cases = []
    for k, d in [(0, 2), (1, 2), (1, 4), (3, 6), (25, 8), (-1, 2), (-7, 4)]:
        table = _package_table(2 * abs(k) + 40, d).astype(np.float64)
        want = np.zeros((d, d))
        for i in range(d // 2):
            a = k / 10000.0 ** (2 * i / d)
            want[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]]
        pos = abs(k) + np.arange(40)     # the package's table agrees, at positions where pos + k >= 0
        assert np.allclose(table[pos] @ want, table[pos + k], atol=1e-5)

        def run(ns, k=k, d=d):
            yield ns.shift_matrix(k, d)
        cases.append(Case(f"k = {k}, d = {d}", "shift_matrix(k, d)", {"k": k, "d": d}, run,
                          [Expect("M, with PE(pos + k) = PE(pos) M", want, atol=1e-12)]))
    return cases


def _shift(transposed=False, exponent="2i"):
    def shift_matrix(k, d):
        M = np.zeros((d, d))
        for i in range(d // 2):
            a = k / 10000.0 ** ((2 * i if exponent == "2i" else i) / d)
            block = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
            M[2 * i:2 * i + 2, 2 * i:2 * i + 2] = block.T if transposed else block
        return M
    return shift_matrix


MISTAKES_18 = (
    Mistake("each block turns the wrong way: with PE a row, sin(p+k) = sin p cos k + cos p sin k puts sin k below "
            "the diagonal, in row 2i + 1 of column 2i", dict(shift_matrix=_shift(transposed=True))),
    Mistake("the frequencies use i where the paper has 2i: ω_i = 1 / 10000^(2i/d)",
            dict(shift_matrix=_shift(exponent="i"))),
)


# ---------------------------------------------------------------- 19: the parameter count
def _cases_19():
    cases = []
    for V, d, d_ff, n, title in [(5, 3, 5, 1, "a tiny model"), (13, 64, 128, 2, "the copy task's model"),
                                 (37000, 512, 2048, 6, "the base model (Table 3: 65 million)"),
                                 (37000, 1024, 4096, 6, "the big model (Table 3: 213 million)"),
                                 (37000, 4096, 16384, 6, "a model of about 3 billion: beyond 32-bit integers")]:
        cfg = transformer.TransformerConfig(V, d_model=d, n_heads=1, d_ff=d_ff, n_encoder_layers=n,
                                            n_decoder_layers=n, dropout=0.0)
        want = _count_without_building(cfg)

        def run(ns, a=(V, d, d_ff, n)):
            yield ns.parameter_count(*a)
        cases.append(Case(title, "parameter_count(vocab, d_model, d_ff, n_layers)",
                          {"vocab": V, "d_model": d, "d_ff": d_ff, "n_layers": n}, run,
                          [Expect("", np.int64(want), kind="i")]))
    return cases


def _count_without_building(cfg) -> int:
    """transformer.Transformer(cfg).num_parameters(), from small models (the base and big models
    take seconds to build): one layer each and two, whose difference is one layer of each stack,
    and a vocabulary of 4 and of 5, whose difference is one row of the shared table."""
    small = lambda v, n: transformer.Transformer(dataclasses.replace(   # noqa: E731
        cfg, vocab_size=v, n_encoder_layers=n, n_decoder_layers=n)).num_parameters()
    p1, p2, row = small(4, 1), small(4, 2), small(5, 1) - small(4, 1)
    return p1 + (cfg.n_encoder_layers - 1) * (p2 - p1) + (cfg.vocab_size - 4) * row


def _count(biases=True, norms=True, cross=True, shared=True):
    def parameter_count(V, d, d_ff, n):
        lin = lambda a, b: a * b + (b if biases else 0)   # noqa: E731
        att, ffn, norm = 4 * lin(d, d), lin(d, d_ff) + lin(d_ff, d), (2 * d if norms else 0)
        encoder, decoder = att + ffn + 2 * norm, (2 if cross else 1) * att + ffn + 3 * norm
        return V * d * (1 if shared else 2) + n * (encoder + decoder)
    return parameter_count


MISTAKES_19 = (
    Mistake("the biases are missing: every Linear has one, of its output's width",
            dict(parameter_count=_count(biases=False))),
    Mistake("the LayerNorms are missing: each has γ and β, two per encoder layer and three per decoder layer",
            dict(parameter_count=_count(norms=False))),
    Mistake("a decoder layer has two attentions: self-attention and attention over the encoder's output",
            dict(parameter_count=_count(cross=False))),
    Mistake("the embedding table is counted twice: source, target and output share one (Section 3.4)",
            dict(parameter_count=_count(shared=False))),
)


# ---------------------------------------------------------------- 20: corpus BLEU
def _sacrebleu(hyps, refs) -> float:
    """sacreBLEU's corpus score of the token lists, tokenised by the spaces we join them with, unsmoothed."""
    import sacrebleu
    metric = sacrebleu.metrics.BLEU(tokenize="none", smooth_method="none")
    return float(metric.corpus_score([" ".join(h) for h in hyps], [[" ".join(r) for r in refs]]).score)


_CORPORA_20 = [
    ("a hypothesis equal to its reference", ["a cat sat on the mat"], ["a cat sat on the mat"]),
    ("one word differs", ["a cat sat on the mat"], ["a cat sat on a mat"]),
    ("a repeated word counts only as often as the reference has it", ["the the the cat sat on the mat"],
     ["the cat sat on the mat today"]),
    ("a short hypothesis: the brevity penalty", ["a cat sat on"], ["a cat sat on the mat today"]),
    ("no 4-gram in common: 0", ["a cat sat down"], ["a cat lay down"]),
    ("a corpus: the counts are added over the sentences before the precisions",
     ["a cat sat on the mat", "two dogs ran in the park", "the sun is up"],
     ["a cat sat on a mat", "two dogs ran in a big park", "the sun is up now"]),
    ("a one-word sentence has no 2-, 3- or 4-grams: it adds nothing to those totals",
     ["a cat sat on the mat", "yes"], ["a cat sat on a mat", "yes"]),
    ("hypotheses without a word: 0", ["", ""], ["a cat sat on the mat", "yes"]),
    ("case matters: 'The' is not 'the'", ["The cat sat on the mat"], ["the cat sat on the mat"]),
    ("an n-gram is a tuple of tokens: 'a bc' is not 'ab c'", ["a bc d e"], ["ab c d e"]),
    ("one word shorter than the reference: BP = exp(1 − 6/5)", ["the cat sat on the"], ["the cat sat on the mat"]),
    ("an empty reference and an empty hypothesis add nothing, not even to the lengths",
     ["a cat sat on the mat", ""], ["a cat sat on the mat", ""]),
]


def _cases_20():
    cases = []
    for title, hyps, refs in _CORPORA_20:
        hyps, refs = [h.split() for h in hyps], [r.split() for r in refs]

        def run(ns, hyps=hyps, refs=refs):
            yield ns.corpus_bleu([list(h) for h in hyps], [list(r) for r in refs])
        cases.append(Case(title, "corpus_bleu(hypotheses, references)",
                          {"hypotheses": [" ".join(h) for h in hyps], "references": [" ".join(r) for r in refs]},
                          run, [Expect("", _sacrebleu(hyps, refs), atol=1e-9, rtol=1e-9)]))
    return cases


def _bleu(clip=True, brevity=True, corpus=True):
    from collections import Counter

    def score(hyps, refs):
        m, t, c, r = [0] * 4, [0] * 4, 0, 0
        for hyp, ref in zip(hyps, refs):
            c, r = c + len(hyp), r + len(ref)
            for n in range(1, 5):
                h = Counter(tuple(hyp[i:i + n]) for i in range(len(hyp) - n + 1))
                f = Counter(tuple(ref[i:i + n]) for i in range(len(ref) - n + 1))
                m[n - 1] += sum(min(k, f[g]) if clip else (k if f[g] else 0) for g, k in h.items())
                t[n - 1] += max(0, len(hyp) - n + 1)
        if c == 0 or min(m) == 0:
            return 0.0
        bp = 1.0 if c > r or not brevity else math.exp(1 - r / c)
        return 100 * bp * math.exp(sum(math.log(a / b) for a, b in zip(m, t)) / 4)

    if corpus:
        return score
    return lambda hyps, refs: sum(score([h], [r]) for h, r in zip(hyps, refs)) / len(hyps)


MISTAKES_20 = (
    Mistake("an n-gram is counted as often as the hypothesis has it: clip its count at the reference's",
            dict(corpus_bleu=_bleu(clip=False))),
    Mistake("the brevity penalty is missing: a hypothesis shorter than its reference is multiplied by exp(1 − r/c)",
            dict(corpus_bleu=_bleu(brevity=False))),
    Mistake("this is the mean of sentence scores: BLEU adds the counts over the corpus, then takes the precisions",
            dict(corpus_bleu=_bleu(corpus=False))),
)


# ---------------------------------------------------------------- 21: token batches and averaging
def _cases_21():
    from transformer.batching import token_batches as _package_batches
    rng = np.random.default_rng(21)
    cases = []
    for lengths, max_tokens, title in [([3, 1, 2], 4, "three examples"), ([2, 2, 2, 2], 4, "equal lengths"),
                                       ([5], 5, "one example that just fits"), ([], 4, "no examples: no batches"),
                                       (list(rng.integers(2, 9, 12)), 16, "twelve examples"),
                                       (list(rng.integers(2, 30, 40)), 60, "forty examples")]:
        lengths = [int(n) for n in lengths]
        want = _package_batches([n - 1 for n in lengths], [n - 1 for n in lengths], max_tokens, shuffle=False)

        def run(ns, lengths=lengths, max_tokens=max_tokens, k=len(want)):
            out = ns.token_batches(list(lengths), max_tokens)
            if not isinstance(out, (list, tuple)):
                raise Malformed(f"token_batches must return a list of index arrays; it returned a {type(out).__name__}")
            yield np.int64(len(out))
            for b in out[:k]:
                if not isinstance(b, np.ndarray):
                    raise Malformed(f"token_batches must return index arrays; a batch is a {type(b).__name__}")
                yield b
        cases.append(Case(f"token_batches: {title}", "token_batches(lengths, max_tokens)",
                          {"lengths": lengths, "max_tokens": max_tokens}, run,
                          [Expect("the number of batches", np.int64(len(want)), kind="i")]
                          + [Expect(f"batch {j}", np.asarray(b), kind="i") for j, b in enumerate(want)]))
    for k, title in [(1, "one state: itself"), (2, "two states"), (5, "five states, as Section 6.1 averages"),
                     (6, "six states: every one counts")]:
        states = [{"w": _r(rng, (2, 3)), "b": _r(rng, (3,))} for _ in range(k)]
        want = {n: np.mean([s[n] for s in states], axis=0) for n in ("w", "b")}

        def run(ns, states=states):
            given = [{n: a.copy() for n, a in s.items()} for s in states]
            out = ns.average(given)
            yield out.get("w", Missing("the result has no 'w'")) if isinstance(out, dict) else out
            yield out.get("b", Missing("the result has no 'b'")) if isinstance(out, dict) else out
            yield np.bool_(all(np.array_equal(g[n], s[n]) for g, s in zip(given, states) for n in s))
        cases.append(Case(f"average: {title}", "average(states)", {"states": states}, run,
                          [Expect("'w'", want["w"], atol=1e-12), Expect("'b'", want["b"], atol=1e-12),
                           Expect("the states given unchanged", np.bool_(True), kind="b")]))
    cases.append(_average_is_new_case(states))
    steps = [{"step": np.array(1), "w": np.array([1.0, 3.0], np.float32)}, {"step": np.array(2), "w": np.array([2.0, 5.0],
                                                                                                          np.float32)}]

    def run(ns):
        out = ns.average([{n: a.copy() for n, a in s.items()} for s in steps])
        yield out.get("step", Missing("the result has no 'step'")) if isinstance(out, dict) else out
        yield out.get("w", Missing("the result has no 'w'")) if isinstance(out, dict) else out
    cases.append(Case("average: an integer entry (a step count): its mean, 1.5, is not rounded", "average(states)",
                      {"states": steps}, run, [Expect("'step'", np.float64(1.5)), Expect("'w'", np.array([1.5, 4.0]),
                                                                                           atol=1e-6)]))
    return cases


def _average_is_new_case(states) -> Case:
    """average returns one new state dict: none of its arrays is (or views) an array given, so
    that changing the average never changes a checkpoint, even when there is one state."""
    def run(ns):
        for some in (states[:1], states):
            given = [{n: a.copy() for n, a in s.items()} for s in some]
            out = ns.average(given)
            yield np.bool_(isinstance(out, dict) and out is not given[0] and not any(
                isinstance(a, np.ndarray) and np.shares_memory(a, g[n]) for n, a in out.items() for g in given
                if n in g))
    return Case("average: one new state dict, sharing no array with a state given (one state, then six)",
                "average(states[:1]); average(states)", {"states": "the six states of the case before"}, run,
                [Expect(f"{k}: a new dict of new arrays", np.bool_(True), kind="b") for k in ("one state", "six states")])


def _batches(cost="padded", order="sorted"):
    def token_batches(lengths, max_tokens):
        idx = np.argsort(np.asarray(lengths), kind="stable") if order == "sorted" else np.arange(len(lengths))
        batches, current, longest = [], [], 0
        for i in idx:
            n = lengths[i]
            grown = (len(current) + 1) * max(longest, n) if cost == "padded" else sum(lengths[j] for j in current) + n
            if current and grown > max_tokens:
                batches.append(np.array(current))
                current, longest = [], 0
            current.append(int(i))
            longest = max(longest, n)
        if current:
            batches.append(np.array(current))
        return batches
    return token_batches


MISTAKES_21 = (
    Mistake("a batch's cost is its real tokens here: padded, it is the number of examples times the longest",
            dict(token_batches=_batches(cost="real"))),
    Mistake("the examples are not sorted by length: sorting puts similar lengths together, so little is padding",
            dict(token_batches=_batches(order="given"))),
    Mistake("the states are summed: divide by their number",
            dict(average=lambda states: {n: sum(s[n] for s in states) for n in states[0]})),
)


# ---------------------------------------------------------------- 22: micro-batches
_BATCH_22 = {}


def _batch_22(pad: int = 0) -> dict:
    """The grader's batch of 6 sentence pairs, its weights, and minitensor's gradient of the
    whole batch's loss (made once for each ``pad``: the ids 0 and ``pad`` swapped in the data)."""
    if pad in _BATCH_22:
        return _BATCH_22[pad]
    rng = np.random.default_rng(22)
    V, d, h, layers = 9, 4, 2, 1
    cfg = transformer.TransformerConfig(V, d_model=d, n_heads=h, d_ff=2 * d, n_encoder_layers=layers,
                                        n_decoder_layers=layers, dropout=0.0, max_len=16, pad_id=pad)
    lengths = [5, 3, 1, 4, 4, 2]           # real target tokens of each sentence pair
    src = rng.integers(3, V, (6, 4))
    tgt_in, tgt_out = np.zeros((6, 6), np.int64), np.zeros((6, 6), np.int64)
    for row, n in enumerate(lengths):
        words = rng.integers(3, V, n)
        tgt_in[row, 0], tgt_in[row, 1:n] = 1, words[:-1]
        tgt_out[row, :n - 1], tgt_out[row, n - 1] = words[:-1], 2
    src, tgt_in, tgt_out = (np.where(a == 0, pad, np.where(a == pad, 0, a)) for a in (src, tgt_in, tgt_out))
    ref = transformer.Transformer(cfg)
    state = _seeded_weights(ref, 220)
    transformer.label_smoothed_loss(ref(mt.tensor(src), mt.tensor(tgt_in)), mt.tensor(tgt_out), pad, 0.1).backward()
    named = sorted(ref.named_parameters(), key=lambda kv: (kv[1].size, kv[0]))
    _BATCH_22[pad] = dict(V=V, d=d, h=h, layers=layers, lengths=lengths, src=src, tgt_in=tgt_in, tgt_out=tgt_out,
                          state=state, want=[(k, p.grad.numpy()) for k, p in named])
    return _BATCH_22[pad]


def _case_22(rows: list, title: str, spare=False, pad=0, empty=False) -> Case:
    """accumulate over the micro-batches of the grader's batch whose rows are ``rows`` [(a, b), ...];
    ``spare``: the model holds one more parameter, which the loss does not reach; ``pad``: the pad id;
    ``empty``: one more micro-batch, whose targets are all pad (it adds no token and no gradient)."""
    b = _batch_22(pad)
    V, d, h, layers, want = b["V"], b["d"], b["h"], b["layers"], b["want"]

    def run(ns):
        m = engine(ns, "14").Transformer(V, d_model=d, h=h, d_ff=2 * d, n_layers=layers, p_drop=0.0, max_len=16,
                                         pad=pad)
        m.load_state_dict({k: v.copy() for k, v in b["state"].items()})
        if spare:
            m.spare = engine(ns, "05").Parameter(np.zeros(3))
        for p in m.parameters():       # left over from an earlier update: accumulate must clear them
            p.grad = np.ones_like(p.data)
        micro = [(b["src"][i:j], b["tgt_in"][i:j], b["tgt_out"][i:j]) for i, j in rows]
        if empty:
            micro.insert(1, (b["src"][:1], b["tgt_in"][:1], np.full_like(b["tgt_out"][:1], pad)))
        yield ns.accumulate(m, micro, 0.1, pad)
        params = dict(m.named_parameters())
        for k, _ in want:
            g = params[k].grad
            yield Missing(f"the parameter {k} got no gradient: its module was not used in the computation "
                          "(or its result did not reach the output)") if g is None else g
        if spare:
            yield np.bool_(m.spare.grad is None or not np.any(m.spare.grad))
    spans = ", ".join(f"{i}–{j - 1}" if j - i > 1 else f"{i}" for i, j in rows) + \
        (", and between them pair 0 with every target pad" if empty else "")
    model = (f"your Transformer (vocab {V}, d_model {d}, pad={pad}) with the grader's weights, every .grad full of "
             "ones before the call")
    if spare:
        model += ", and one more parameter, model.spare, that the loss does not use"
    return Case(title, f"accumulate(model, micro_batches, smoothing=0.1, pad={pad})",
                {"micro-batches": f"sentence pairs {spans} of a batch of 6", "target tokens": b["lengths"],
                 "model": model}, run,
                [Expect("the returned number of tokens", np.int64(sum(b["lengths"])), kind="i")]
                + [Expect(f"the gradient of {k} {tuple(g.shape)}", g, atol=1e-9, rtol=1e-7) for k, g in want]
                + ([Expect("model.spare.grad None (or zeros): no gradient reached it", np.bool_(True), kind="b")]
                   if spare else []))


def _cases_22():
    return [_case_22(rows, title) for rows, title in [
        ([(0, 6)], "one micro-batch: the whole batch"),
        ([(0, 3), (3, 6)], "two micro-batches with the same number of tokens"),
        ([(0, 1), (1, 6)], "two micro-batches with different numbers of tokens"),
        ([(0, 2), (2, 3), (3, 6)], "three micro-batches")]] + [
        _case_22([(0, 3), (3, 6)], "a parameter the loss does not reach keeps no gradient (its .grad stays None)",
                 spare=True),
        _case_22([(0, 2), (2, 6)], "pad id 8 (and 0 a word): the tokens not counted are the pad argument's",
                 pad=8),
        _case_22([(0, 3), (3, 6)], "a micro-batch whose targets are all pad adds no token and no gradient",
                 empty=True), _no_tokens_case_22(), _one_token_case_22(), _pad_argument_case_22()]


def _no_tokens_case_22() -> Case:
    """Every target pad: no token, a loss of 0 (cross_entropy divides by 1) and zero gradients,
    not 0/0."""
    b = _batch_22(0)
    V, d, h, layers = b["V"], b["d"], b["h"], b["layers"]

    def run(ns):
        m = engine(ns, "14").Transformer(V, d_model=d, h=h, d_ff=2 * d, n_layers=layers, p_drop=0.0, max_len=16)
        m.load_state_dict({k: v.copy() for k, v in b["state"].items()})
        micro = [(b["src"][i:j], b["tgt_in"][i:j], np.zeros_like(b["tgt_out"][i:j])) for i, j in ((0, 3), (3, 6))]
        with np.errstate(all="ignore"):
            yield ns.accumulate(m, micro, 0.1, 0)
        grads = [p.grad for p in m.parameters()]
        yield np.bool_(all(g is None or (np.all(np.isfinite(g)) and not np.any(g)) for g in grads))
    return Case("every target pad: no token, and every gradient zero (not 0/0)", "accumulate(model, micro_batches, "
                "smoothing=0.1, pad=0)", {"micro-batches": "sentence pairs 0–2 and 3–5 of a batch of 6, every target "
                                          "pad", "model": "your Transformer with the grader's weights"}, run,
                [Expect("the returned number of tokens", np.int64(0), kind="i"),
                 Expect("every .grad zero (or None): the whole batch's loss is 0", np.bool_(True), kind="b")])


def _pad_argument_case_22(pad=3) -> Case:
    """The loss's pad is the argument, not the model's: a model that pads its sources with 0, and
    targets in which 3 is the pad the loss skips."""
    b = _batch_22(0)
    V, d, h, layers = b["V"], b["d"], b["h"], b["layers"]
    cfg = transformer.TransformerConfig(V, d_model=d, n_heads=h, d_ff=2 * d, n_encoder_layers=layers,
                                        n_decoder_layers=layers, dropout=0.0, max_len=16)
    ref = transformer.Transformer(cfg)
    ref.astype(np.float64)
    ref.load_state_dict({k: v.copy() for k, v in b["state"].items()})
    transformer.label_smoothed_loss(ref(mt.tensor(b["src"]), mt.tensor(b["tgt_in"])), mt.tensor(b["tgt_out"]), pad,
                                    0.1).backward()
    want = sorted(((k, p.grad.numpy()) for k, p in ref.named_parameters()), key=lambda kv: (kv[1].size, kv[0]))
    tokens = int((b["tgt_out"] != pad).sum())

    def run(ns):
        m = engine(ns, "14").Transformer(V, d_model=d, h=h, d_ff=2 * d, n_layers=layers, p_drop=0.0, max_len=16)
        m.load_state_dict({k: v.copy() for k, v in b["state"].items()})
        micro = [(b["src"][i:j], b["tgt_in"][i:j], b["tgt_out"][i:j]) for i, j in ((0, 3), (3, 6))]
        yield ns.accumulate(m, micro, 0.1, pad)
        params = dict(m.named_parameters())
        for k, _ in want:
            g = params[k].grad
            yield Missing(f"the parameter {k} got no gradient") if g is None else g
    return Case(f"pad = {pad} for the loss, the model padding its sources with 0: the pad argument decides",
                f"accumulate(model, micro_batches, smoothing=0.1, pad={pad})",
                {"micro-batches": "sentence pairs 0–2 and 3–5 of a batch of 6",
                 "model": "your Transformer (pad 0, its default) with the grader's weights"}, run,
                [Expect("the returned number of tokens", np.int64(tokens), kind="i")]
                + [Expect(f"the gradient of {k} {tuple(g.shape)}", g, atol=1e-9, rtol=1e-7) for k, g in want])


def _one_token_case_22() -> Case:
    """A batch of one sentence pair with one target token: the sum divided by exactly 1."""
    b = _batch_22(0)
    V, d, h, layers = b["V"], b["d"], b["h"], b["layers"]
    src, tgt_in, tgt_out = (b[k][2:3] for k in ("src", "tgt_in", "tgt_out"))
    cfg = transformer.TransformerConfig(V, d_model=d, n_heads=h, d_ff=2 * d, n_encoder_layers=layers,
                                        n_decoder_layers=layers, dropout=0.0, max_len=16)
    ref = transformer.Transformer(cfg)
    ref.astype(np.float64)
    ref.load_state_dict({k: v.copy() for k, v in b["state"].items()})
    transformer.label_smoothed_loss(ref(mt.tensor(src), mt.tensor(tgt_in)), mt.tensor(tgt_out), 0, 0.1).backward()
    want = sorted(((k, p.grad.numpy()) for k, p in ref.named_parameters()), key=lambda kv: (kv[1].size, kv[0]))

    def run(ns):
        m = engine(ns, "14").Transformer(V, d_model=d, h=h, d_ff=2 * d, n_layers=layers, p_drop=0.0, max_len=16)
        m.load_state_dict({k: v.copy() for k, v in b["state"].items()})
        yield ns.accumulate(m, [(src, tgt_in, tgt_out)], 0.1, 0)
        params = dict(m.named_parameters())
        for k, _ in want:
            g = params[k].grad
            yield Missing(f"the parameter {k} got no gradient") if g is None else g
    return Case("one micro-batch of one target token", "accumulate(model, micro_batches, smoothing=0.1, pad=0)",
                {"micro-batches": "sentence pair 2 of the batch of 6, alone: one target token",
                 "model": "your Transformer with the grader's weights"}, run,
                [Expect("the returned number of tokens", np.int64(1), kind="i")]
                + [Expect(f"the gradient of {k} {tuple(g.shape)}", g, atol=1e-9, rtol=1e-7) for k, g in want])


def _accumulate(mod, how="sum then divide", clear=True):
    def accumulate(model, micro_batches, smoothing, pad):
        params = model.parameters()
        if clear:
            for p in params:
                p.grad = None
        tokens = [int((np.asarray(t) != pad).sum()) for _, _, t in micro_batches]
        for (src, tgt_in, tgt_out), n in zip(micro_batches, tokens):
            loss = mod.cross_entropy(model(src, tgt_in), tgt_out, smoothing, pad)
            (loss * n if how == "sum then divide" else loss).backward()
        divide = sum(tokens) if how == "sum then divide" else len(tokens)
        for p in params:
            if p.grad is not None:
                p.grad = p.grad / divide
        return sum(tokens)
    return accumulate


MISTAKES_22 = (
    Mistake("this averages the micro-batches' per-token losses, so a token of a short micro-batch weighs more: "
            "multiply each loss by its tokens, then divide the sum once by all the tokens",
            dict(accumulate=Using(lambda m: _accumulate(m, how="mean of means")))),
    Mistake("the gradients left from before were kept: clear every .grad first",
            dict(accumulate=Using(lambda m: _accumulate(m, clear=False)))),
)


# ---------------------------------------------------------------- 23: attention a block of keys at a time
def _cases_23():
    rng = np.random.default_rng(23)
    cases = []
    # (Tq, Tk, d, block, title, what is added to each query's and each key's entries); with d = 2, an offset
    # of 30 on both sides adds about 30·30·2/√2 ≈ 1270 to the score, far beyond where exp overflows (709)
    for Tq, Tk, d, block, title, q_add, k_add in [
            (1, 1, 2, 1, "one key", 0, 0), (2, 4, 2, 4, "one block: all the keys", 0, 0),
            (2, 4, 2, 2, "two blocks", 0, 0), (3, 5, 4, 2, "a last block shorter than the others", 0, 0),
            (2, 6, 2, 1, "a block per key", 0, 0),
            (2, 4, 2, 2, "scores near 1000: exp overflows without the running maximum", 30, 30),
            (2, 4, 2, 4, "rows a thousand apart, and scores a thousand apart within a row: each query's row "
                         "needs its own maximum", [[30], [-30]], [[30], [30], [0], [0]]),
            (2, 3, 2, 1, "every score near −1000: the running maximum starts at −∞, not 0", 30, -30),
            (2, 4, 2, 2, "a later block's scores a thousand below the first block's: the maximum so far is kept, "
                         "not replaced by the block's", 30, [[30], [30], [-30], [-30]]),
            (2, 4, 2, 2, "a later block's scores a thousand above the first block's: the maximum rises with it", 30,
             [[-30], [-30], [30], [30]]),
            (2, 4, 2, 2, "square blocks (2 queries, 2 keys) and rows a thousand apart: each row's maximum", [[30], [-30]],
             [[30], [30], [30], [30]])]:
        q, k, v = _r(rng, (Tq, d)) + q_add, _r(rng, (Tk, d)) + k_add, _r(rng, (Tk, 3))
        want = F.scaled_dot_product_attention(mt.tensor(q), mt.tensor(k), mt.tensor(v)).numpy()

        def run(ns, a=(q, k, v), block=block):
            given = [x.copy() for x in a]
            yield ns.blockwise_attention(*given, block)
            yield np.bool_(all(np.array_equal(g, x) for g, x in zip(given, a)))
        cases.append(Case(title, "blockwise_attention(q, k, v, block)", {"q": q, "k": k, "v": v, "block": block}, run,
                          [Expect("the output", want, atol=1e-9, rtol=1e-7),
                           Expect("q, k and v unchanged (the caller's arrays)", np.bool_(True), kind="b")]))
    return cases


def _blockwise(rescale=True, shift=True, per_row=True, start=-np.inf, running=True):
    def blockwise_attention(q, k, v, block):
        m, l, a = np.full((len(q), 1), start if shift else 0.0), np.zeros((len(q), 1)), np.zeros((len(q), v.shape[1]))
        for s0 in range(0, len(k), block):
            s = q @ k[s0:s0 + block].T / np.sqrt(q.shape[1])
            largest = s.max(axis=1 if per_row else None, keepdims=True)
            m_new = (np.maximum(m, largest) if running else largest) if shift else m
            r = np.exp(m - m_new) if rescale else 1.0
            p = np.exp(s - m_new)
            l, a, m = l * r + p.sum(axis=1, keepdims=True), a * r + p @ v[s0:s0 + block], m_new
        return a / l
    return blockwise_attention


MISTAKES_23 = (
    Mistake("what was summed before is not rescaled when the maximum grows: multiply ℓ and a by exp(m − m') first",
            dict(blockwise_attention=_blockwise(rescale=False))),
    Mistake("exp overflowed: subtract the running maximum from the scores before exp",
            dict(blockwise_attention=_blockwise(shift=False))),
    Mistake("the maximum is taken over the whole block: a query whose scores lie far below the block's largest gets "
            "exp(s − m) = 0 everywhere, and 0/0; take each row's own, s.max(axis=1, keepdims=True)",
            dict(blockwise_attention=_blockwise(per_row=False))),
    Mistake("the running maximum starts at 0: a row whose scores all lie far below 0 gets exp(s − 0) = 0 "
            "everywhere, and 0/0; start it at −∞", dict(blockwise_attention=_blockwise(start=0.0))),
    Mistake("m' is the block's own maximum, not the largest so far: after a block of lower scores, exp(m − m') "
            "overflows; take m' = max(m, max s_b)", dict(blockwise_attention=_blockwise(running=False))),
)


# ---------------------------------------------------------------- 24: the ring all-reduce
def _ring_sent(R: int, n: int) -> list:
    """What each rank sends in the ring all-reduce of arrays of n entries, from the chunk sizes."""
    sizes = [len(c) for c in np.array_split(np.arange(n), R)]
    return [sum(sizes[(r - s) % R] for s in range(R - 1)) + sum(sizes[(r + 1 - s) % R] for s in range(R - 1))
            for r in range(R)]


def _cases_24():
    rng = np.random.default_rng(24)
    cases = []
    for R, shape, title in [(1, (3,), "one rank: nothing to send"), (2, (4,), "two ranks"), (3, (6,), "three ranks"),
                            (4, (2, 5), "four ranks, chunks of unequal size"), (3, (2,), "more ranks than entries "
                                                                                      "but one: an empty chunk")]:
        arrays = [_r(rng, shape) for _ in range(R)]
        total = np.sum(arrays, axis=0)
        sent = _ring_sent(R, int(np.prod(shape)))

        def run(ns, arrays=arrays):
            given = [a.copy() for a in arrays]
            out = ns.ring_all_reduce(given)
            if not isinstance(out, (tuple, list)) or len(out) != 2:
                raise Malformed("ring_all_reduce must return (results, sent)")
            results, sent_ = out
            for r in range(len(arrays)):
                yield results[r]
            yield np.asarray(sent_)
            for r in range(len(arrays)):
                yield given[r]
            yield np.bool_(not any(np.shares_memory(results[r], other) for r in range(len(arrays))
                                   for other in [*given, *results[:r]] if isinstance(results[r], np.ndarray)))
        cases.append(Case(title, "ring_all_reduce(arrays)", {f"arrays[{r}]": a for r, a in enumerate(arrays)}, run,
                          [Expect(f"results[{r}]: the sum", total, atol=1e-12) for r in range(R)]
                          + [Expect("sent: entries each rank sent", np.asarray(sent), kind="i")]
                          + [Expect(f"arrays[{r}] after the call (unchanged)", a, atol=0, rtol=0)
                             for r, a in enumerate(arrays)]
                          + [Expect("each result an array of its own (no memory shared with an input or another "
                                    "rank's result)", np.bool_(True), kind="b")]))
    cases.append(_ring_dtype_case([rng.standard_normal((2, 3)).astype(np.float32) for _ in range(3)],
                                  "float32 gradients: float32 sums"))
    cases.append(_ring_dtype_case([np.array([2**53 + 1, 5]), np.array([1, 7])],
                                  "integers beyond 2^53: exact sums, as integers (a float64 sum would round them)"))
    cases.append(_ring_dtype_case([np.array(1.5), np.array(-0.25), np.array(2.0)],
                                  "0-d arrays, one number each: results of shape (), as given"))
    return cases


def _ring_dtype_case(arrays, title) -> Case:
    """Each rank's result has the dtype of the arrays: summed in it, never through float64."""
    dtype = arrays[0].dtype
    total = arrays[0].copy()
    for a in arrays[1:]:
        total += a
    exact = dtype.kind in "iu"

    def run(ns):
        results, sent = ns.ring_all_reduce([a.copy() for a in arrays])
        yield from (results[r] for r in range(len(arrays)))
        yield np.asarray(sent)
    return Case(title, "ring_all_reduce(arrays)", {f"arrays[{r}]": a for r, a in enumerate(arrays)}, run,
                [Expect(f"results[{r}]: the sum, {dtype}", total, kind="i" if exact else "f", atol=1e-6, rtol=1e-6,
                        dtype=str(dtype)) for r in range(len(arrays))]
                + [Expect("sent: entries (not bytes) each rank sent", np.asarray(_ring_sent(len(arrays), total.size)),
                          kind="i")])


def _everyone(arrays):
    total = sum(np.asarray(a, dtype=np.float64) for a in arrays)
    return [total.copy() for _ in arrays], [(len(arrays) - 1) * np.size(a) for a in arrays]


def _ring_reduce_scatter_only(arrays):
    R = len(arrays)
    chunks = [[c.copy() for c in np.array_split(np.asarray(a, dtype=np.float64).ravel(), R)] for a in arrays]
    sent = [0] * R
    for s in range(R - 1):
        msgs = [(r, (r - s) % R, chunks[r][(r - s) % R].copy()) for r in range(R)]
        for r, i, c in msgs:
            chunks[(r + 1) % R][i] += c
            sent[r] += c.size
    return [np.concatenate(c).reshape(np.shape(arrays[0])) for c in chunks], sent


MISTAKES_24 = (
    Mistake("every rank sent its whole array to every other rank: that is (R − 1)·n entries each; the ring sends "
            "one chunk per step, about 2·n in all", dict(ring_all_reduce=_everyone)),
    Mistake("only the reduce-scatter ran: afterwards rank r holds the sum of one chunk only; the all-gather passes "
            "the summed chunks around the ring", dict(ring_all_reduce=_ring_reduce_scatter_only)),
)


# ---------------------------------------------------------------- 25: profiling the engine
_PROGRAMS_25 = {
    "one product and its backward": ("(x @ w).sum().backward()", {"MatMul": (1, 1), "Sum": (1, 1)}),
    "a layer: bias, ReLU, a second product": (
        "((x @ w + b).relu() @ w2).sum().backward()",
        {"MatMul": (2, 2), "BroadcastAdd": (1, 1), "ReLU": (1, 1), "Sum": (1, 1)}),
    "a forward without backward": ("(x @ w * 2.0).sum()", {"MatMul": (1, 0), "BroadcastMul": (1, 0), "Sum": (1, 0)}),
    "two forwards": ("(x @ w).sum(); (x @ w).sum().backward()", {"MatMul": (2, 1), "Sum": (2, 1)}),
    "a Function that sleeps 10 ms a call: its seconds add up over its four calls": (
        "Slow.apply(Slow.apply(w)).sum().backward()", {"Slow": (2, 2), "Sum": (1, 1)}),
}
_SLEEP_25 = 0.01    # seconds each call of Slow sleeps


def _slow_function(Function):
    """A Function of the learner's engine that passes its input through after sleeping."""
    class Slow(Function):
        def forward(self, x):
            time.sleep(_SLEEP_25)
            return x

        def backward(self, grad):
            time.sleep(_SLEEP_25)
            return (grad,)
    return Slow


def _cases_25():
    rng = np.random.default_rng(25)
    x, w, b, w2 = _r(rng, (2, 3)), _r(rng, (3, 4)), _r(rng, (4,)), _r(rng, (4, 2))
    cases = []
    for title, (program, calls) in _PROGRAMS_25.items():
        def run(ns, program=program):
            T = engine(ns).Tensor
            env = {"x": T(x), "w": T(w, requires_grad=True), "b": T(b, requires_grad=True),
                   "w2": T(w2, requires_grad=True)}
            Function = engine(ns).Function
            if "Slow" in program:
                env["Slow"] = _slow_function(Function)
            before = {cls: dict(vars(cls)) for cls in _subclasses(Function)}
            t0 = time.perf_counter()
            table = ns.profile(lambda: exec(program, {}, env))
            wall = time.perf_counter() - t0
            if not isinstance(table, dict):
                raise Malformed(f"profile must return a dict; it returned a {type(table).__name__}")
            yield sorted(table)
            yield np.array([[table[n].get("forward", -1), table[n].get("backward", -1)] for n in sorted(table)])
            seconds = [table[n].get("seconds", -1.0) for n in sorted(table)]
            yield np.bool_(all(0 <= s for s in seconds) and sum(seconds) <= wall)
            yield np.bool_(all(dict(vars(cls)) == before[cls] for cls in before))
            if "Slow" in program:
                yield np.bool_(table.get("Slow", {}).get("seconds", 0.0) >= 4 * _SLEEP_25)
        names = sorted(calls)
        slept = [Expect(f"Slow's seconds at least the {4 * _SLEEP_25:.2f} s its four calls slept", np.bool_(True),
                        kind="b")] if "Slow" in program else []
        shown = {"fn": f"lambda: {program}", "x, w, b, w2": "Tensors of your engine"}
        if "Slow" in program:
            shown["Slow"] = "a subclass of your Function whose forward and backward sleep 10 ms, then pass their input on"
        cases.append(Case(title, "profile(fn)", shown,
                          run, [Expect("the Functions that ran, sorted", names, kind="s"),
                                Expect("their [forward, backward] calls, in that order",
                                       np.array([calls[n] for n in names]), kind="i"),
                                Expect("every 'seconds' at least 0, and their sum at most fn()'s wall time",
                                       np.bool_(True), kind="b"),
                                Expect("every Function class as it was before (the originals put back)", np.bool_(True),
                                       kind="b")] + slept))

    def raising(ns):
        T, Function = engine(ns).Tensor, engine(ns).Function
        env = {"x": T(x), "w": T(w, requires_grad=True)}
        before = {cls: dict(vars(cls)) for cls in _subclasses(Function)}
        try:
            ns.profile(lambda: exec("(x @ w).sum(); 1 / 0", {}, env))
            yield ["returned"]
        except ZeroDivisionError:
            yield ["raised ZeroDivisionError"]
        yield np.bool_(all(dict(vars(cls)) == before[cls] for cls in before))
    cases.append(Case("fn() raises: the error goes on to the caller, and the originals are put back all the same",
                      "profile(fn)", {"fn": "lambda: ((x @ w).sum(), 1 / 0)"}, raising,
                      [Expect("what profile did", ["raised ZeroDivisionError"], kind="s"),
                       Expect("every Function class as it was before (the originals put back)", np.bool_(True),
                              kind="b")]))
    return cases


def _subclasses(cls):
    out = []
    for sub in cls.__subclasses__():
        out += [sub] + _subclasses(sub)
    return out


def _profile(mod, by="object", restore=True, finally_=True):
    def profile(fn):
        table, originals = {}, []

        def timed(method, kind, owner):
            def run(self, *args, **kwargs):
                t0 = time.perf_counter()
                try:
                    return method(self, *args, **kwargs)
                finally:
                    name = type(self).__name__ if by == "object" else owner.__name__
                    row = table.setdefault(name, {"forward": 0, "backward": 0, "seconds": 0.0})
                    row[kind] += 1
                    row["seconds"] += time.perf_counter() - t0
            return run
        for cls in _subclasses(mod.Function):
            for kind in ("forward", "backward"):
                if kind in vars(cls):
                    originals.append((cls, kind, vars(cls)[kind]))
                    setattr(cls, kind, timed(vars(cls)[kind], kind, cls))
        def put_back():
            if restore:
                for cls, kind, method in originals:
                    setattr(cls, kind, method)
        if finally_:
            try:
                fn()
            finally:
                put_back()
        else:
            fn()
            put_back()
        return table
    return profile


MISTAKES_25 = (
    Mistake("the calls are counted under the class that defines the method: count them under the class of the "
            "object that ran (type(self).__name__)", dict(profile=Using(lambda m: _profile(m, by="owner")))),
    Mistake("the original methods were not put back: every Function class must be as it was afterwards",
            dict(profile=Using(lambda m: _profile(m, restore=False)))),
    Mistake("when fn() raised, the originals stayed wrapped: put them back in a finally, which runs on the way out "
            "whether fn() returns or raises", dict(profile=Using(lambda m: _profile(m, finally_=False)))),
)


# ---------------------------------------------------------------- cases drawn by hypothesis
# Once an answer passes the fixed cases, the grader tries more that hypothesis draws
# (lessonkit.grader.DRAWN of them), and reports the smallest failing one it finds. Each strategy below makes
# Cases exactly as the fixed ones are made, from drawn sizes and values (tenths, so that the
# report prints them exactly); hypothesis is imported only when the cases are drawn.
def _tenths(st, shape, low=-30, high=30):
    size = int(np.prod(shape))
    return st.lists(st.integers(low, high), min_size=size, max_size=size).map(
        lambda v: np.array(v, dtype=np.float64).reshape(shape) / 10)


def _drawn_02():
    import hypothesis.strategies as st

    @st.composite
    def sum_to_case(draw):
        shape = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=3)))
        full = tuple(draw(st.integers(1, 3)) if n == 1 else n for n in shape)
        lead = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=2)))
        g = draw(_tenths(st, lead + full))
        want = g.sum(axis=tuple(range(len(lead))))
        want = want.sum(axis=tuple(i for i, k in enumerate(shape) if k == 1), keepdims=True) if shape else want

        def run(ns, g=g, shape=shape):
            yield ns.sum_to(g.copy(), shape)
        return Case("sum_to", "sum_to(grad, shape)", {"grad": g, "shape": shape}, run, [Expect("", want)])

    @st.composite
    def matmul_case(draw):
        n, k, m = (draw(st.integers(1, 3)) for _ in range(3))
        batch = tuple(draw(st.lists(st.integers(1, 2), min_size=0, max_size=2)))
        a_batch = tuple(b if draw(st.booleans()) else 1 for b in batch)
        b_batch = batch[draw(st.integers(0, len(batch))):]
        x, y = draw(_tenths(st, a_batch + (n, k))), draw(_tenths(st, b_batch + (k, m)))
        return op_case("x @ y", "out = x @ y; out.backward(output gradient)", dict(x=x, y=y),
                       lambda ns, x, y: x @ y, lambda x, y: x @ y, seed=2)
    return st.one_of(sum_to_case(), matmul_case())


def _drawn_04():
    import hypothesis.strategies as st

    @st.composite
    def case(draw):
        lead = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=2)))
        V = draw(st.integers(2, 5))
        eps = draw(st.sampled_from([0.0, 0.1, 0.5, 1.0]))
        logits = draw(_tenths(st, lead + (V,)))
        target = np.array(draw(st.lists(st.integers(0, V - 1), min_size=int(np.prod(lead)),
                                        max_size=int(np.prod(lead))))).reshape(lead)
        pad = draw(st.sampled_from([-1, 0]))
        if (target == pad).all():
            target.flat[0] = 1
        return op_case("cross_entropy", "loss = cross_entropy(logits, target, smoothing, pad); loss.backward()",
                       dict(logits=logits), lambda ns, logits: ns.cross_entropy(logits, target.copy(), eps, pad),
                       lambda logits: transformer.label_smoothed_loss(logits, mt.tensor(target), pad, eps),
                       shown={"target": target, "smoothing": eps, "pad": pad}, start=False)
    return case()


def _drawn_07():
    import hypothesis.strategies as st

    @st.composite
    def case(draw):
        shape = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=2))) + (draw(st.integers(1, 5)),)
        eps = draw(st.sampled_from([1e-5, 0.1, 1.0]))
        arrays = dict(x=draw(_tenths(st, shape)), gamma=draw(_tenths(st, shape[-1:])),
                      beta=draw(_tenths(st, shape[-1:])))
        return op_case("LayerNormFunction", "out = LayerNormFunction.apply(x, gamma, beta, eps=eps); "
                       "out.backward(output gradient)", arrays,
                       lambda ns, x, gamma, beta: ns.LayerNormFunction.apply(x, gamma, beta, eps=eps),
                       lambda x, gamma, beta: F.layer_norm(x, gamma, beta, eps), shown={"eps": eps}, seed=7,
                       atol=1e-8, rtol=1e-6)
    return case()


def _drawn_08():
    import hypothesis.strategies as st

    @st.composite
    def case(draw):
        B, Tq, Tk, d = (draw(st.integers(1, 3)) for _ in range(4))
        kind = draw(st.sampled_from(["none", "padding"] + (["causal"] if Tq == Tk else [])))
        arrays = dict(q=draw(_tenths(st, (B, Tq, d))), k=draw(_tenths(st, (B, Tk, d))), v=draw(_tenths(st, (B, Tk, 2))))
        if kind == "causal":
            mask = np.tril(np.ones((Tq, Tk), bool))
        elif kind == "padding":
            mask = np.array(draw(st.lists(st.booleans(), min_size=B * Tk, max_size=B * Tk))).reshape(B, 1, Tk)
            mask[:, :, 0] = True        # a query always has a key to attend to
        else:
            mask = None
        return op_case("attention", "out = attention(q, k, v, mask); out.backward(output gradient)", arrays,
                       lambda ns, q, k, v: ns.attention(q, k, v, mask),
                       lambda q, k, v: F.scaled_dot_product_attention(
                           q, k, v, None if mask is None else mt.tensor(mask)),
                       shown={"mask": "None" if mask is None else mask}, seed=8)
    return case()


def _drawn_10():
    import hypothesis.strategies as st

    @st.composite
    def case(draw):
        V, d = draw(st.integers(1, 4)), draw(st.integers(1, 3))
        shape = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=2)))
        ids = np.array(draw(st.lists(st.integers(0, V - 1), min_size=int(np.prod(shape)),
                                     max_size=int(np.prod(shape))))).reshape(shape)
        return op_case("Embedding", "out = Embedding.apply(weight, ids=ids); out.backward(output gradient)",
                       dict(weight=draw(_tenths(st, (V, d)))),
                       lambda ns, weight: ns.Embedding.apply(weight, ids=ids.copy()),
                       lambda weight: F.embedding(mt.tensor(ids), weight), shown={"ids": ids}, seed=10)
    return case()


def _drawn_16():
    import hypothesis.strategies as st

    @st.composite
    def case(draw):
        a = (draw(st.integers(1, 10**5)), draw(st.sampled_from([16, 64, 512, 1024])), draw(st.integers(1, 8000)),
             draw(st.sampled_from([0.5, 1.0, 2.0])))

        def run(ns, a=a):
            yield ns.noam_lr(*a)
        return Case("noam_lr", "noam_lr(step, d_model, warmup, factor)", dict(zip(("step", "d_model", "warmup",
                                                                                   "factor"), a)), run,
                    [Expect("", transformer.noam_lr(*a), atol=0, rtol=1e-9)])
    return case()


def _drawn_20():
    import hypothesis.strategies as st
    sentence = st.lists(st.sampled_from("a b c d the cat".split()), min_size=1, max_size=8)

    @st.composite
    def case(draw):
        n = draw(st.integers(1, 3))
        hyps, refs = [draw(sentence) for _ in range(n)], [draw(sentence) for _ in range(n)]

        def run(ns, hyps=hyps, refs=refs):
            yield ns.corpus_bleu([list(h) for h in hyps], [list(r) for r in refs])
        return Case("corpus_bleu", "corpus_bleu(hypotheses, references)",
                    {"hypotheses": [" ".join(h) for h in hyps], "references": [" ".join(r) for r in refs]}, run,
                    [Expect("", _sacrebleu(hyps, refs), atol=1e-9, rtol=1e-9)])
    return case()


def _drawn_21():
    import hypothesis.strategies as st
    from transformer.batching import token_batches as _package_batches

    @st.composite
    def case(draw):
        lengths = draw(st.lists(st.integers(1, 8), min_size=1, max_size=12))
        max_tokens = draw(st.integers(max(lengths), 30))
        want = _package_batches([n - 1 for n in lengths], [n - 1 for n in lengths], max_tokens, shuffle=False)

        def run(ns, lengths=lengths, max_tokens=max_tokens, k=len(want)):
            out = ns.token_batches(list(lengths), max_tokens)
            yield np.int64(len(out))
            for b in list(out)[:k]:
                yield np.asarray(b)
        return Case("token_batches", "token_batches(lengths, max_tokens)",
                    {"lengths": lengths, "max_tokens": max_tokens},
                    run, [Expect("the number of batches", np.int64(len(want)), kind="i")]
                    + [Expect(f"batch {j}", np.asarray(b), kind="i") for j, b in enumerate(want)])
    return case()


def _drawn_23():
    import hypothesis.strategies as st

    @st.composite
    def case(draw):
        Tq, Tk = draw(st.integers(1, 3)), draw(st.integers(1, 6))
        d, block = draw(st.integers(1, 3)), draw(st.integers(1, 6))
        q, k, v = draw(_tenths(st, (Tq, d))), draw(_tenths(st, (Tk, d))), draw(_tenths(st, (Tk, 2)))
        want = F.scaled_dot_product_attention(mt.tensor(q), mt.tensor(k), mt.tensor(v)).numpy()

        def run(ns, a=(q, k, v), block=block):
            yield ns.blockwise_attention(*(x.copy() for x in a), block)
        return Case("blockwise_attention", "blockwise_attention(q, k, v, block)", {"q": q, "k": k, "v": v,
                                                                                  "block": block},
                    run, [Expect("", want, atol=1e-9, rtol=1e-7)])
    return case()


def _drawn_24():
    import hypothesis.strategies as st

    @st.composite
    def case(draw):
        R, n = draw(st.integers(1, 5)), draw(st.integers(1, 8))
        arrays = [draw(_tenths(st, (n,))) for _ in range(R)]

        def run(ns, arrays=arrays):
            results, sent = ns.ring_all_reduce([a.copy() for a in arrays])
            yield from results
            yield np.asarray(sent)
        return Case("ring_all_reduce", "ring_all_reduce(arrays)", {f"arrays[{r}]": a for r, a in enumerate(arrays)},
                    run,
                    [Expect(f"results[{r}]: the sum", np.sum(arrays, axis=0), atol=1e-12) for r in range(R)]
                    + [Expect("sent: entries each rank sent", np.asarray(_ring_sent(R, n)), kind="i")])
    return case()


def _drawn_01():
    import hypothesis.strategies as st
    forms = [("x * y", lambda x, y: x * y), ("x + y", lambda x, y: x + y), ("(x + y) * x", lambda x, y: (x + y) * x),
             ("u = x * y; (u + x) * u", lambda x, y: (lambda u: (u + x) * u)(x * y)),
             ("u = x * y; (u * u + x) * u", lambda x, y: (lambda u: (u * u + x) * u)(x * y)),
             ("(x * x) * (y + y)", lambda x, y: (x * x) * (y + y))]

    @st.composite
    def case(draw):
        text, f = draw(st.sampled_from(forms))
        shape = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=2)))
        return op_case("an expression", f"out = {text}; out.backward(output gradient)",
                       dict(x=draw(_tenths(st, shape)), y=draw(_tenths(st, shape))),
                       lambda ns, x, y: f(x, y), lambda x, y: f(x, y), seed=1, twice=draw(st.booleans()))
    return case()


def _drawn_03():
    import hypothesis.strategies as st

    @st.composite
    def case(draw):
        shape = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)))
        x, c = draw(_tenths(st, shape)), draw(_tenths(st, shape))
        eps = draw(st.sampled_from([1e-4, 1e-3, 1e-2]))
        f = lambda a: float((c * a**3).sum())   # noqa: E731

        def run(ns):
            mine = x.copy()
            yield ns.numerical_gradient(f, mine, eps)
            yield mine
        return Case("numerical_gradient", "numerical_gradient(f, x, eps)",
                    {"f(x)": "sum(c * x**3)", "c": c, "x": x, "eps": eps}, run,
                    [Expect("the result", _package_numerical_gradient(f, x.copy(), eps), atol=1e-7, rtol=1e-7),
                     Expect("x after the call (every entry put back exactly as it was)", x, atol=0, rtol=0)])
    return case()


def _drawn_05():
    import hypothesis.strategies as st

    @st.composite
    def case(draw):
        shapes = draw(st.lists(st.lists(st.integers(1, 3), min_size=1, max_size=2).map(tuple), min_size=1, max_size=3))
        steps = draw(st.integers(1, 4))
        hyper = (draw(st.sampled_from([0.001, 0.01, 0.1])), draw(st.sampled_from([(0.9, 0.98), (0.5, 0.8)])),
                 draw(st.sampled_from([1e-9, 1e-3])))
        params = [draw(_tenths(st, s)) for s in shapes]
        grads = [[draw(_tenths(st, s)) for s in shapes] for _ in range(steps)]
        want = _adam_reference(params, grads, *hyper)

        def run(ns):
            ps = [ns.Parameter(p.copy()) for p in params]
            opt = ns.Adam(ps, lr=hyper[0], betas=hyper[1], eps=hyper[2])
            for step in grads:
                opt.zero_grad()
                for p, g in zip(ps, step):
                    p.grad = g.copy()
                opt.step()
                yield from (p.data.copy() for p in ps)
        return Case("Adam", "Adam(params, lr, betas, eps); then, for each step: set .grad; step()",
                    {"params": params, "grads (one list per step)": grads, "lr": hyper[0], "betas": hyper[1],
                     "eps": hyper[2]}, run,
                    [Expect(f"after step {t + 1}: parameter {k}", w, atol=1e-12, rtol=1e-8)
                     for t, step in enumerate(want) for k, w in enumerate(step)])
    return case()


def _drawn_06():
    import hypothesis.strategies as st
    from minitensor.ops.dropout import dropped

    @st.composite
    def case(draw):
        shape = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)))
        p, training, seed = draw(st.sampled_from([0.0, 0.1, 0.5, 0.9])), draw(st.booleans()), draw(st.integers(0, 99))
        x, w = draw(_tenths(st, shape)), draw(_tenths(st, shape))
        keep = np.random.default_rng(seed).random(shape) >= p
        on = training and p > 0

        def run(ns):
            t = engine(ns).Tensor(x.copy(), requires_grad=True)
            y = ns.dropout(t, p, np.random.default_rng(seed), training)
            yield y
            y.backward(w.copy())
            yield Missing("x.grad is None") if t.grad is None else t.grad
        return Case("dropout", "out = dropout(x, p, rng, training); out.backward(output gradient)",
                    {"x": x, "p": p, "training": training, "rng": f"np.random.default_rng({seed})",
                     "output gradient": w}, run,
                    [Expect("the output", dropped(x, keep, p) if on else x, atol=1e-12),
                     Expect("the gradient of x", dropped(w, keep, p) if on else w, atol=1e-12)])
    return case()


def _drawn_09():
    import hypothesis.strategies as st

    @st.composite
    def case(draw):
        B, Tq, Tk, h, d_k = (draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 3)),
                             draw(st.integers(1, 3)), draw(st.integers(1, 2)))
        d = h * d_k
        query, key = draw(_tenths(st, (B, Tq, d))), draw(_tenths(st, (B, Tk, d)))

        def mine(ns, m, query, key):
            T = engine(ns).Tensor
            kv = T(key)
            return m(T(query), kv, kv, None)
        return module_case("MultiHeadAttention", "out = MultiHeadAttention(d_model, h)(query, key, value=key)",
                           lambda ns: ns.MultiHeadAttention(d, h, np.random.default_rng(0)),
                           transformer.MultiHeadAttention(d, h), {"query": query, "key": key}, mine,
                           lambda m, query, key: (lambda kv: m(mt.tensor(query), kv, kv))(mt.tensor(key)),
                           seed=draw(st.integers(0, 99)), shown={"query": query, "key = value": key, "h": h},
                           atol=1e-8, rtol=1e-7)
    return case()


def _drawn_11():
    import hypothesis.strategies as st
    from transformer.layers import EncoderLayer

    @st.composite
    def case(draw):
        B, T, h, d_k, d_ff = (draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 2)),
                              draw(st.integers(1, 2)), draw(st.integers(1, 4)))
        d = h * d_k
        x = draw(_tenths(st, (B, T, d)))
        mask = np.ones((B, 1, 1, T), bool)
        mask[:, ..., 1:] = np.array(draw(st.lists(st.booleans(), min_size=B * (T - 1), max_size=B * (T - 1)))
                                    ).reshape(B, 1, 1, T - 1)
        return module_case("EncoderLayer", "out = EncoderLayer(d_model, h, d_ff, 0.0, rng)(x, mask)",
                           lambda ns: ns.EncoderLayer(d, h, d_ff, 0.0, np.random.default_rng(0)),
                           EncoderLayer(d, h, d_ff, 0.0), {"x": x}, lambda ns, m, x: m(engine(ns).Tensor(x), mask),
                           lambda m, x: m(mt.tensor(x), mt.tensor(mask)), seed=draw(st.integers(0, 99)),
                           shown={"x": x, "mask": mask, "h": h, "d_ff": d_ff}, atol=1e-8, rtol=1e-7)
    return case()


def _drawn_12():
    import hypothesis.strategies as st
    from transformer.layers import DecoderLayer

    @st.composite
    def case(draw):
        B, T, Ts, h, d_k = (draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 3)),
                            draw(st.integers(1, 2)), draw(st.integers(1, 2)))
        d = h * d_k
        y, memory = draw(_tenths(st, (B, T, d))), draw(_tenths(st, (B, Ts, d)))
        tgt_mask, src_mask = np.tril(np.ones((T, T), bool)), np.ones((B, 1, 1, Ts), bool)
        if Ts > 1 and draw(st.booleans()):
            src_mask[-1, ..., -1] = False
        return module_case("DecoderLayer.forward", "out = DecoderLayer(d_model, h, d_ff, 0.0, rng)(x, memory, "
                           "tgt_mask, src_mask)",
                           lambda ns: ns.DecoderLayer(d, h, 2 * d, 0.0, np.random.default_rng(0)),
                           DecoderLayer(d, h, 2 * d, 0.0), {"x": y, "memory": memory},
                           lambda ns, m, x, memory: m(engine(ns).Tensor(x), engine(ns).Tensor(memory), tgt_mask,
                                                      src_mask),
                           lambda m, x, memory: m(mt.tensor(x), mt.tensor(memory), mt.tensor(tgt_mask),
                                                  mt.tensor(src_mask)),
                           seed=draw(st.integers(0, 99)),
                           shown={"x": y, "memory": memory, "tgt_mask": tgt_mask, "src_mask": src_mask, "h": h},
                           atol=1e-8, rtol=1e-7)
    return case()


def _drawn_13():
    import hypothesis.strategies as st

    @st.composite
    def case(draw):
        kind = draw(st.sampled_from(["chain", "shared", "attention", "recurrent", "stack"]))
        n, d = draw(st.integers(1, 6)), draw(st.integers(1, 3))
        text, build, madds, seq = _layer_13(kind, n, d)

        def run(ns):
            out = build(ns)
            yield ns.multiply_adds(out)
            yield ns.sequential_products(out)
        return Case(f"{kind}, n = {n} positions of width d = {d}", "multiply_adds(out), sequential_products(out)",
                    {"out": text, "x": f"({n}, {d})", "w, v, ...": f"({d}, {d})"}, run,
                    [Expect("multiply_adds", np.int64(madds), kind="i"),
                     Expect("sequential_products", np.int64(seq), kind="i")])
    return case()


def _drawn_14():
    import hypothesis.strategies as st

    @st.composite
    def case(draw):
        V, h = draw(st.integers(4, 8)), draw(st.integers(1, 2))
        d_k, layers = draw(st.integers(1, 2)), draw(st.integers(1, 2))
        d = h * d_k
        B, Ts, Tt = draw(st.integers(1, 2)), draw(st.integers(1, 4)), draw(st.integers(1, 4))
        src, tgt = _ids(np.random.default_rng(draw(st.integers(0, 99))), B, Ts, V), \
            _ids(np.random.default_rng(draw(st.integers(0, 99))), B, Tt, V)
        tgt[:, 0] = 1
        if B > 1 and Ts > 1 and draw(st.booleans()):
            src[-1, -1] = 0
        if B > 1 and Tt > 1 and draw(st.booleans()):
            tgt[-1, -1] = 0
        cfg = transformer.TransformerConfig(V, d_model=d, n_heads=h, d_ff=2 * d, n_encoder_layers=layers,
                                            n_decoder_layers=layers, dropout=0.0, max_len=16)
        return module_case(
            "Transformer", "logits = Transformer(vocab, d_model, h, d_ff, n_layers, 0.0, max_len)(src, tgt_in)",
            lambda ns: ns.Transformer(V, d_model=d, h=h, d_ff=2 * d, n_layers=layers, p_drop=0.0, max_len=16),
            transformer.Transformer(cfg), {"src": src, "tgt_in": tgt}, lambda ns, m, src, tgt_in: m(src, tgt_in),
            lambda m, src, tgt_in: m(mt.tensor(src), mt.tensor(tgt_in)), seed=draw(st.integers(0, 99)),
            shown={"src": src, "tgt_in": tgt, "vocab": V, "d_model": d, "h": h, "n_layers": layers},
            atol=1e-6, rtol=1e-6)
    return case()


def _drawn_18():
    import hypothesis.strategies as st

    @st.composite
    def case(draw):
        k, d = draw(st.integers(-60, 60)), 2 * draw(st.integers(1, 5))
        want = np.zeros((d, d))
        for i in range(d // 2):
            a = k / 10000.0 ** (2 * i / d)
            want[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]]

        def run(ns):
            yield ns.shift_matrix(k, d)
        return Case(f"k = {k}, d = {d}", "shift_matrix(k, d)", {"k": k, "d": d}, run,
                    [Expect("M, with PE(pos + k) = PE(pos) M", want, atol=1e-12)])
    return case()


def _drawn_19():
    import hypothesis.strategies as st

    @st.composite
    def case(draw):
        V, d = draw(st.integers(4, 60)), draw(st.integers(1, 16))
        d_ff, n = draw(st.integers(1, 32)), draw(st.integers(1, 4))
        cfg = transformer.TransformerConfig(V, d_model=d, n_heads=1, d_ff=d_ff, n_encoder_layers=n,
                                            n_decoder_layers=n, dropout=0.0)

        def run(ns):
            yield ns.parameter_count(V, d, d_ff, n)
        return Case("parameter_count", "parameter_count(vocab, d_model, d_ff, n_layers)",
                    {"vocab": V, "d_model": d, "d_ff": d_ff, "n_layers": n}, run,
                    [Expect("", np.int64(transformer.Transformer(cfg).num_parameters()), kind="i")])
    return case()


def _drawn_15():
    import hypothesis.strategies as st

    @st.composite
    def case(draw):   # beam search's step on drawn scores (the decoders' tokens are judged on the fixed cases)
        from transformer.decoding import rank_extensions as _rank_extensions
        B, K, V = draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(2, 4))
        n = draw(st.integers(1, K * V))
        scores = -np.abs(draw(_tenths(st, (B, K))))
        logp = -np.abs(draw(_tenths(st, (B, K, V))))
        beam, token, score = _rank_extensions(scores, logp, n)   # ties go to the lower k·V + w, as the stub says

        def run(ns):
            out = ns.rank_extensions(scores.copy(), logp.copy(), n)
            if not isinstance(out, (tuple, list)) or len(out) != 3:
                raise Malformed("rank_extensions must return three arrays (beam, token, score)")
            yield from out
        return Case("rank_extensions", "rank_extensions(scores, logp, n)", {"scores": scores, "logp": logp, "n": n},
                    run, [Expect("beam", beam, kind="i"), Expect("token", token, kind="i"),
                          Expect("score", score, atol=1e-12)])
    return case()


def _drawn_22():
    import hypothesis.strategies as st

    @st.composite
    def case(draw):
        cuts = sorted(draw(st.sets(st.integers(1, 5), max_size=5)))
        edges = [0] + cuts + [6]
        count = len(edges) - 1
        return _case_22(list(zip(edges[:-1], edges[1:])), f"{count} micro-batch{'es' if count > 1 else ''}")
    return case()


EXERCISES = {e.number: e for e in [
    Exercise("01", "a Tensor and a Function with backward", ("Tensor.backward", "Add.backward", "Mul.backward"),
             _cases_01, MISTAKES_01, drawn=_drawn_01),
    Exercise("02", "broadcasting's sum_to, and the matrix product's backward", ("sum_to", "MatMul.backward"),
             _cases_02, MISTAKES_02, drawn=_drawn_02),
    Exercise("03", "the gradient check", ("numerical_gradient", "gradcheck"), _cases_03, MISTAKES_03, drawn=_drawn_03),
    Exercise("04", "log-softmax, and cross-entropy with label smoothing",
             ("LogSoftmax.forward", "LogSoftmax.backward", "cross_entropy"), _cases_04, MISTAKES_04, drawn=_drawn_04),
    Exercise("05", "a Module, a Linear layer and Adam", ("Module.named_parameters", "Linear.forward", "Adam.step"),
             _cases_05, MISTAKES_05, drawn=_drawn_05),
    Exercise("06", "Xavier initialisation and dropout",
             ("xavier_uniform", "Dropout.forward", "Dropout.backward", "dropout"), _cases_06, MISTAKES_06,
             drawn=_drawn_06),
    Exercise("07", "LayerNorm, forward and backward by hand",
             ("LayerNormFunction.forward", "LayerNormFunction.backward"), _cases_07, MISTAKES_07, drawn=_drawn_07),
    Exercise("08", "softmax, the causal mask, and attention with masks", ("softmax", "causal_mask", "attention"),
             _cases_08, MISTAKES_08, drawn=_drawn_08),
    Exercise("09", "multi-head attention", ("split_heads", "merge_heads", "MultiHeadAttention.forward"), _cases_09,
             MISTAKES_09, drawn=_drawn_09),
    Exercise("10", "token embeddings and sinusoidal positions",
             ("sinusoidal_table", "Embedding.forward", "Embedding.backward", "Embeddings.forward"), _cases_10,
             MISTAKES_10, drawn=_drawn_10),
    Exercise("11", "the feed-forward network, the residual sublayer, the encoder layer",
             ("FeedForward.forward", "Residual.forward", "EncoderLayer.forward"), _cases_11, MISTAKES_11,
             drawn=_drawn_11),
    Exercise("12", "the decoder layer, and its cached step", ("DecoderLayer.forward", "DecoderLayer.step"),
             _cases_12, MISTAKES_12, drawn=_drawn_12),
    Exercise("13", "Table 1, counted on your engine's own graph", ("multiply_adds", "sequential_products"), _cases_13,
             MISTAKES_13, drawn=_drawn_13),
    Exercise("14", "the whole model, with shared embeddings",
             ("padding_mask", "target_mask", "Transformer.encode", "Transformer.decode", "Transformer.generator",
              "Transformer.forward"), _cases_14, MISTAKES_14, drawn=_drawn_14),
    Exercise("15", "greedy decoding with the cache, and beam search", ("greedy_decode", "rank_extensions",
                                                                         "beam_search"),
             _cases_15, MISTAKES_15, drawn=_drawn_15),
    Exercise("16", "the learning-rate schedule of equation (3)", ("noam_lr", "Noam.step"), _cases_16, MISTAKES_16,
             drawn=_drawn_16),
    Exercise("17", "the parameters a loss does not reach", ("silent_parameters",), _cases_17, MISTAKES_17,
             reaches=("04", "14")),
    Exercise("18", "a shift of positions as a fixed linear map", ("shift_matrix",), _cases_18, MISTAKES_18,
             drawn=_drawn_18),
    Exercise("19", "the size of a model, from its settings", ("parameter_count",), _cases_19, MISTAKES_19,
             drawn=_drawn_19),
    Exercise("20", "corpus BLEU", ("corpus_bleu",), _cases_20, MISTAKES_20, drawn=_drawn_20),
    Exercise("21", "batches by tokens, and checkpoint averaging", ("token_batches", "average"), _cases_21,
             MISTAKES_21, drawn=_drawn_21),
    Exercise("22", "one update's gradient from several micro-batches", ("accumulate",), _cases_22, MISTAKES_22,
             drawn=_drawn_22, reaches=("14",)),
    Exercise("23", "attention a block of keys at a time (flash attention's idea)", ("blockwise_attention",),
             _cases_23, MISTAKES_23, drawn=_drawn_23),
    Exercise("24", "the ring all-reduce", ("ring_all_reduce",), _cases_24, MISTAKES_24, drawn=_drawn_24),
    Exercise("25", "where the time goes in your engine", ("profile",), _cases_25, MISTAKES_25),
]}
