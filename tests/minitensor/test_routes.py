"""The route table (minitensor/routes.py): a registered route runs a call of its op, forward and
backward, where it applies and nowhere else; ``off()`` and ``MINITENSOR_ROUTES=off`` leave the
reference ops alone, in one thread without touching another."""
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F
from minitensor import routes
from minitensor.autograd import Function
from minitensor.ops import softmax


class Double(Function):
    """y = 2x (the reference)."""

    @staticmethod
    def forward(ctx, x):
        return 2 * x

    @staticmethod
    def backward(ctx, grad):
        return 2 * grad


class DoubleByAdding(Double):
    """y = x + x: the same op another way; it counts its calls."""

    calls = []

    @staticmethod
    def forward(ctx, x):
        DoubleByAdding.calls.append("forward")
        return x + x

    @staticmethod
    def backward(ctx, grad):
        DoubleByAdding.calls.append("backward")
        return grad + grad


@pytest.fixture
def table(monkeypatch):
    """A scratch copy of the route table: routes registered in a test are gone after it."""
    monkeypatch.setattr(routes, "_table", dict(routes._table))
    DoubleByAdding.calls.clear()


def test_an_op_without_routes_runs_its_own_code(table):
    x = mt.tensor([1.0, 2.0], requires_grad=True)
    y = Double.apply(x)
    assert y._ctx.fn is Double and routes.routes_of(Double) == ()


def test_a_route_that_applies_runs_forward_and_backward_and_gives_the_same_result(table):
    routes.register(Double, DoubleByAdding, lambda xp, arrays, params: arrays[0].size > 2)
    small, big = mt.tensor([1.0, 2.0], requires_grad=True), mt.tensor([1.0, 2.0, 3.0], requires_grad=True)
    Double.apply(small).sum().backward()
    assert DoubleByAdding.calls == []                            # does not apply: the op ran
    y = Double.apply(big)
    assert y._ctx.fn is DoubleByAdding
    y.sum().backward()
    assert DoubleByAdding.calls == ["forward", "backward"]
    np.testing.assert_array_equal(y.numpy(), [2.0, 4.0, 6.0])
    np.testing.assert_array_equal(big.grad.numpy(), [2.0, 2.0, 2.0])


def test_the_first_route_that_applies_wins_and_registering_again_replaces(table):
    class Third(Double):
        pass

    routes.register(Double, Third, lambda xp, arrays, params: False)
    routes.register(Double, DoubleByAdding)
    assert routes.choose(Double, np, [np.ones(3)], {}) is DoubleByAdding
    routes.register(Double, Third)                               # now it applies everywhere, still tried first
    assert [r.implementation for r in routes.routes_of(Double)] == [DoubleByAdding, Third]
    assert routes.choose(Double, np, [np.ones(3)], {}) is DoubleByAdding


def test_a_route_must_be_a_subclass_of_its_op(table):
    with pytest.raises(TypeError, match="not a subclass of Double"):
        routes.register(Double, softmax.Softmax)
    with pytest.raises(TypeError, match="route of itself"):
        routes.register(Double, Double)


def test_a_route_named_by_its_module_is_imported_and_checked_when_first_taken(table):
    routes.register(Double, "tests.minitensor.test_routes:DoubleByAdding", lambda xp, arrays, params: arrays[0].size > 2)
    assert routes.routes_of(Double)[0].implementation == "tests.minitensor.test_routes:DoubleByAdding"
    assert routes.choose(Double, np, [np.ones(2)], {}) is Double                 # not taken: not imported yet
    assert routes.choose(Double, np, [np.ones(3)], {}) is DoubleByAdding
    assert routes.routes_of(Double)[0].implementation is DoubleByAdding          # imported once, kept
    class Triple(Function):
        pass

    routes.register(Triple, "tests.minitensor.test_routes:DoubleByAdding")
    with pytest.raises(TypeError, match="not a subclass of Triple"):
        routes.choose(Triple, np, [np.ones(3)], {})


def test_off_runs_the_reference_and_restores_the_routes_even_nested(table):
    routes.register(Double, DoubleByAdding)
    x = mt.tensor([1.0, 2.0], requires_grad=True)
    with routes.off():
        assert Double.apply(x)._ctx.fn is Double
        with routes.off():
            pass
        assert not routes.enabled()
    assert routes.enabled() and Double.apply(x)._ctx.fn is DoubleByAdding


def test_off_in_one_thread_leaves_the_routes_on_in_another(table):
    routes.register(Double, DoubleByAdding)
    inside, outside = threading.Event(), threading.Event()
    seen = {}

    def other():
        inside.wait(10)
        seen["fn"] = Double.apply(mt.tensor([1.0], requires_grad=True))._ctx.fn
        outside.set()

    t = threading.Thread(target=other)
    t.start()
    with routes.off():
        inside.set()
        outside.wait(10)
    t.join(10)
    assert seen["fn"] is DoubleByAdding


@pytest.mark.parametrize("value, expected", [("off", "minitensor.ops.softmax"), ("on", "minitensor.speed.cpu"),
                                             ("", "minitensor.speed.cpu")])
def test_the_environment_turns_the_routes_off_for_a_whole_process(value, expected):
    code = ("import minitensor as mt, minitensor.functional as F; "
            "print(F.softmax(mt.tensor([[1.0, 2.0]], requires_grad=True))._ctx.fn.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "MINITENSOR_ROUTES": value}, check=True)
    assert out.stdout.strip() == expected


def test_a_misspelt_environment_value_is_refused_with_its_name_at_the_first_op_not_at_import():
    code = "import minitensor as mt, minitensor.functional as F; print('imported', flush=True); F.softmax(mt.ones(2))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "MINITENSOR_ROUTES": "of"})
    assert out.stdout == "imported\n" and out.returncode != 0
    assert "MINITENSOR_ROUTES must be one of" in out.stderr and "got of" in out.stderr


def test_the_numpy_routes_are_registered_when_minitensor_is_imported():
    x = mt.tensor(np.ones((2, 3)), requires_grad=True)
    assert F.softmax(x)._ctx.fn.__module__ == "minitensor.speed.cpu"
    assert F.softmax(x)._ctx.fn.__name__ == "Softmax"            # profiles name the op, whichever route ran
