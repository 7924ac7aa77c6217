"""Routes: where the speed layer plugs faster implementations into the reference ops.

The reference engine (tensor, autograd, ops, nn, optim) computes every op with plain array
expressions and knows nothing of what makes it fast. The speed layer (:mod:`minitensor.speed`)
registers *routes* here, each one an op, a test of when it applies and an implementation: a
subclass of the op that computes the same result another way (a faster reduction, a block of
rows per core, a hand-written kernel). ``Function.apply`` asks :func:`choose` which class runs
a call; the graph node records that class, so its backward runs too.

Turning the routes off (:func:`off` in a ``with`` block, or ``MINITENSOR_ROUTES=off`` in the
environment of a process, read at the first op that has routes) leaves the reference engine
alone: correct, and slower.
"""
from __future__ import annotations

import importlib
import threading
from contextlib import ContextDecorator
from typing import Callable, NamedTuple

from . import environment


class Route(NamedTuple):
    """``implementation`` computes ``op`` wherever ``applies(xp, arrays, params)`` is true: a
    class, or its name as "module:Class", imported when the route is first taken (the CUDA
    kernels' modules bring the NVRTC build, which a run on NumPy never needs)."""

    op: type
    applies: Callable
    implementation: type | str


_table: dict = {}  # op class -> its routes, in the order registered (the first that applies runs)
_state = threading.local()  # .on, inside off() in this thread
_process = None  # whether MINITENSOR_ROUTES leaves the routes on: read by the first call that asks


def enabled() -> bool:
    """Whether routes are chosen in this thread now: not inside :func:`off`, nor in a process
    started with ``MINITENSOR_ROUTES=off``."""
    on = getattr(_state, "on", None)
    if on is None:
        global _process
        if _process is None:
            _process = environment.value("MINITENSOR_ROUTES") == "on"
        on = _process
    return on


def register(op: type, implementation: type | str, applies: Callable = lambda xp, arrays, params: True) -> Route:
    """Run ``implementation`` for calls of ``op`` where ``applies(xp, arrays, params)`` is true.

    ``implementation`` must be a subclass of ``op`` (it keeps the op's name, checks and any step
    it does not change); given as "module:Class", it is checked when first taken. Registering
    the same implementation twice replaces the first entry."""
    if not isinstance(implementation, str):
        _check(op, implementation)
    route = Route(op, applies, implementation)
    entries = [r for r in _table.get(op, ()) if r.implementation != implementation]
    _table[op] = entries + [route]
    return route


def _check(op: type, implementation) -> type:
    if not (isinstance(implementation, type) and issubclass(implementation, op)):
        raise TypeError(f"routes.register: {implementation!r} is not a subclass of {op.__name__}")
    if implementation is op:
        raise TypeError(f"routes.register: {op.__name__} cannot be a route of itself")
    return implementation


def implementation_of(route: Route) -> type:
    """The class of ``route``, its module imported the first time (and checked then)."""
    impl = route.implementation
    if isinstance(impl, str):
        module, _, name = impl.partition(":")
        impl = _check(route.op, getattr(importlib.import_module(module), name))
        entries = _table.get(route.op, [])
        _table[route.op] = [route._replace(implementation=impl) if r is route else r for r in entries]
    return impl


def routes_of(op: type) -> tuple:
    """The routes registered for ``op``, in the order they are tried."""
    return tuple(_table.get(op, ()))


def choose(op: type, xp, arrays, params) -> type:
    """The class that computes this call of ``op``: the first route that applies, else ``op``."""
    entries = _table.get(op)
    if entries and enabled():
        for route in entries:
            if route.applies(xp, arrays, params):
                return implementation_of(route)
    return op


class off(ContextDecorator):
    """Context manager / decorator: inside it (in this thread) every op runs its reference code."""

    def __enter__(self):
        self._prev = enabled()
        _state.on = False
        return self

    def __exit__(self, *exc):
        _state.on = self._prev
        return False
