"""Reverse-mode automatic differentiation.

The graph is made of :class:`Context` nodes. Every op call (``Function.apply``) that
involves a tensor requiring grad creates one node, which remembers

* which function made it (``fn``) and its output's shape,
* one *edge* per input: ``None`` (no gradient wanted), the input's own node (an
  intermediate result), or the input tensor itself (a leaf that requires grad),
* whatever the forward chose to save for the backward.

Nodes do not hold the input tensors, only what was saved, so an intermediate result
whose array the backward does not need is freed as soon as Python drops it.

``backward`` walks the nodes in reverse topological order (an iterative sort: no
recursion limit), hands each node the sum of the gradients reaching its output, and
reduces every input gradient to its input's shape in one place (:func:`sum_to`).
"""
from __future__ import annotations

import threading
from contextlib import ContextDecorator

from . import backend, routes
from .backend import array_module
from .errors import DeviceError, GraphError, ShapeError
from .tensor import Tensor

_state = threading.local()


def is_grad_enabled() -> bool:
    return getattr(_state, "enabled", True)


class no_grad(ContextDecorator):
    """Context manager / decorator: nothing is recorded for backward inside it."""

    def __enter__(self):
        self._prev = is_grad_enabled()
        _state.enabled = False
        return self

    def __exit__(self, *exc):
        _state.enabled = self._prev
        return False


class enable_grad(no_grad):
    """The opposite of :class:`no_grad` (re-enables recording inside a no_grad block)."""

    def __enter__(self):
        self._prev = is_grad_enabled()
        _state.enabled = True
        return self


def sum_to(grad, shape: tuple):
    """Undo broadcasting: sum ``grad`` over the axes that were broadcast to reach it.

    This is the only place in the engine that knows about broadcasting: ops compute
    gradients in the broadcast shape, and the engine reduces them to each input's shape.
    """
    if grad.shape == shape:
        return grad
    lead = grad.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        i + lead for i, n in enumerate(shape) if n == 1 and grad.shape[i + lead] != 1
    )
    out = grad.sum(axis=axes, keepdims=True) if axes else grad
    if lead:
        out = out.reshape(out.shape[lead:])
    return out.reshape(shape)


class Context:
    """One node of the graph: what a Function call saved, and where its inputs came from."""

    __slots__ = ("fn", "xp", "needs_input_grad", "edges", "shape", "dtype", "saved", "freed", "__dict__")

    def __init__(self, fn, xp, needs_input_grad):
        self.fn = fn
        self.xp = xp
        self.needs_input_grad = needs_input_grad
        self.edges = ()
        self.saved = ()
        self.freed = False

    def save_for_backward(self, *arrays) -> None:
        self.saved = arrays


class Function:
    """An op: ``forward(ctx, *arrays, **params)`` and ``backward(ctx, grad)`` side by side.

    Both work on raw ``xp`` arrays (numpy or cupy, from ``ctx.xp``). Positional
    arguments of ``apply`` are tensors (or ``None`` for an absent optional input);
    keyword arguments are plain parameters. ``backward`` returns one gradient per
    positional input (``None`` where there is none), in the *broadcast* shape or the
    input's shape: the engine reduces it with :func:`sum_to`.

    An op with several outputs returns a tuple of arrays from ``forward``: ``apply`` then
    returns a tuple of tensors, and ``backward`` gets a tuple of their gradients (``None``
    for an output nothing used).

    A call runs the op's own code unless the speed layer registered a route for it that applies
    (:mod:`minitensor.routes`): then the route's class runs, forward and backward.
    """

    @staticmethod
    def forward(ctx, *arrays, **params):  # pragma: no cover - abstract
        raise NotImplementedError

    @staticmethod
    def backward(ctx, grad):  # pragma: no cover - abstract
        raise NotImplementedError

    @classmethod
    def apply(cls, *inputs, **params):
        """Run the op on tensors; record a graph node when an input requires grad."""
        return cls.apply_with_context(*inputs, **params)[0]

    @classmethod
    def apply_with_context(cls, *inputs, **params):
        """Like :meth:`apply`, and also return the Context (e.g. to read what forward kept on it)."""
        arrays, needs = [], []
        any_needs = False
        first = None
        for t in inputs:
            if t is None:
                arrays.append(None)
                needs.append(False)
                continue
            data = t.data
            if first is None:
                first = data
            elif type(data) is not type(first):
                devices = ", ".join(x.device for x in inputs if x is not None)
                raise DeviceError(f"{cls.__name__}: inputs are on different devices ({devices}); move them with .to(device)")
            arrays.append(data)
            r = t._requires_grad
            needs.append(r)
            any_needs = any_needs or r
        record = any_needs and is_grad_enabled()
        xp = array_module(first)
        fn = routes.choose(cls, xp, arrays, params)  # the op itself, or a faster route the speed layer registered
        ctx = Context(fn, xp, tuple(needs) if record else None)
        try:
            out = calls.forward(fn, ctx, arrays, params)
        except ShapeError:
            raise
        except ValueError as e:  # numpy's own shape complaints, made to name the op
            shapes = ", ".join(str(tuple(a.shape)) if a is not None else "None" for a in arrays)
            raise ShapeError(f"{cls.__name__}: cannot apply to inputs of shapes {shapes}: {e}") from e
        several = isinstance(out, tuple)
        if not record:
            return (tuple(Tensor._wrap(o) for o in out) if several else Tensor._wrap(out)), ctx
        ctx.edges = tuple(
            None if not n else (t._ctx if t._ctx is not None else t) for t, n in zip(inputs, needs)
        )
        if several:  # each output gets a node of its own, which hands its gradient on to this one
            ctx.shape, ctx.dtype = tuple(o.shape for o in out), tuple(o.dtype for o in out)
            return tuple(Tensor._wrap(o, Output.node(ctx, i, o)) for i, o in enumerate(out)), ctx
        result = Tensor._wrap(out, ctx)
        ctx.shape, ctx.dtype = result.data.shape, result.data.dtype
        return result, ctx


class Calls:
    """How the engine runs an op's forward, an op's backward, a whole backward walk and an
    optimizer's update: plainly. A tool that wraps them from outside (``minitensor.profile``
    times each) puts an object with the same four methods in :data:`calls` while it is open, and
    this one back afterwards."""

    @staticmethod
    def forward(fn, ctx, arrays, params):
        return fn.forward(ctx, *arrays, **params)

    @staticmethod
    def backward(node: "Context", grad):
        return node.fn.backward(node, grad)

    @staticmethod
    def walk(root: "Context", grad, retain_graph: bool) -> None:
        _walk(root, grad, retain_graph)

    @staticmethod
    def step(optimizer, update) -> None:
        """``update()``: the update of ``optimizer`` (:meth:`minitensor.optim.Optimizer.step`)."""
        update()


calls = Calls  # the engine's calls now (see Calls)


class Output(Function):
    """Output ``index`` of an op with several (``forward`` returned a tuple): its node's one edge
    is the op's node, which receives the gradients of all its outputs together, as a tuple
    (``None`` for an output nothing used)."""

    @staticmethod
    def node(op: Context, index: int, array) -> Context:
        ctx = Context(Output, op.xp, (True,))
        ctx.edges, ctx.shape, ctx.dtype, ctx.index = (op,), array.shape, array.dtype, index
        return ctx

    @staticmethod
    def backward(ctx, grad):
        slots = [None] * len(ctx.edges[0].shape)
        slots[ctx.index] = grad
        return _Slots(slots)


class _Slots(list):
    """The gradients of an op's several outputs, one slot each: summed slot by slot."""

    def __add__(self, other):
        return _Slots(b if a is None else a if b is None else a + b for a, b in zip(self, other))


def _topological_order(root: Context) -> list:
    """Nodes reachable from ``root``, every node after all nodes it feeds into (reverse postorder)."""
    order, visited = [], {id(root)}
    stack = [(root, iter(root.edges))]
    while stack:
        node, edges = stack[-1]
        for e in edges:
            if isinstance(e, Context) and id(e) not in visited:
                visited.add(id(e))
                stack.append((e, iter(e.edges)))
                break
        else:
            stack.pop()
            order.append(node)
    order.reverse()
    return order


def _freed_error() -> GraphError:
    return GraphError(
        "trying to backward through a part of the graph a second time, but its saved arrays "
        "were already freed by the first backward; pass retain_graph=True to the first backward "
        "if you need to run backward twice"
    )


def backward(tensor: Tensor, grad=None, retain_graph: bool = False) -> None:
    """Accumulate d(tensor)/d(leaf) into ``leaf.grad`` for every leaf that requires grad
    (``tensor.backward(...)``).

    ``grad`` is the cotangent (same shape as tensor); it may be omitted only for a
    single-element tensor, where it defaults to 1. Without ``retain_graph`` the saved
    arrays are freed, and a second backward through the same graph raises. A gradient has the
    dtype of the tensor it belongs to, as ``leaf.grad`` has the leaf's. The chain rule itself
    is :func:`_walk`.
    """
    if not tensor.requires_grad:
        raise GraphError("backward() on a tensor that does not require grad (nothing in its graph does)")
    if grad is None:
        if tensor.data.size != 1:
            raise GraphError(f"backward() without grad needs a single-element tensor, this one has shape {tensor.shape}")
        g = tensor.xp.ones_like(tensor.data)
    else:
        g = grad.data if isinstance(grad, Tensor) else tensor.xp.asarray(grad, dtype=tensor.dtype)
        if g.shape != tensor.data.shape:
            raise GraphError(f"backward(): grad has shape {tuple(g.shape)} but the tensor has shape {tensor.shape}")
        if backend.device_of(g) != tensor.device:
            raise DeviceError("backward(): grad is on a different device from the tensor")
    root = tensor._ctx
    if root is None:  # a leaf: its gradient is the seed itself
        _accumulate_leaf(tensor, g)
        return
    if root.freed:
        raise _freed_error()
    calls.walk(root, g, retain_graph)


def _walk(root: Context, grad, retain_graph: bool) -> None:
    """The chain rule, from ``root`` with its output gradient ``grad`` (compare needle's
    ``compute_gradient_of_variables``): in reverse topological order, each node's output
    gradient is the sum of what its consumers sent it, and its backward sends one on to each input."""
    grads = {id(root): _in_dtype(grad, root.dtype)}
    for node in _topological_order(root):
        g = grads.pop(id(node), None)
        if g is None:
            continue
        for edge, gi, owned in _input_grads(node, g, retain_graph):
            if isinstance(edge, Tensor):
                _accumulate_leaf(edge, gi, owned)
            else:
                grads[id(edge)] = gi if id(edge) not in grads else grads[id(edge)] + gi
        if not retain_graph:
            _free(node)


def _input_grads(node: Context, g, retain_graph: bool):
    """(edge, its gradient, whether the engine alone holds that array) for each input of
    ``node`` that gets a gradient, from ``node``'s backward of ``g``: each reduced to its
    input's shape (:func:`sum_to`) and dtype (an op's inputs may differ: a float16 product and
    a float32 residual). An Output's slots keep their outputs' own shapes."""
    if node.freed:
        raise _freed_error()
    out = calls.backward(node, tuple(g) if isinstance(g, _Slots) else g)
    out = out if isinstance(out, tuple) else (out,)
    for edge, gi in zip(node.edges, out):
        if edge is None or gi is None:
            continue
        if isinstance(edge, Tensor):
            # the engine's alone when the op made it for this input only (not the gradient it
            # was given, not shared with another input) and no saved graph keeps it
            owned = not retain_graph and gi is not g and sum(x is gi for x in out) == 1
            yield edge, sum_to(gi, edge.data.shape), owned
        else:
            yield edge, gi if isinstance(gi, _Slots) else _in_dtype(sum_to(gi, edge.shape), edge.dtype), False


def _in_dtype(g, dtype):
    return g if g.dtype == dtype else g.astype(dtype)


def _free(node: Context) -> None:
    """Drop what ``node`` saved: a second backward through it raises (see retain_graph)."""
    node.saved = None
    node.freed = True
    node.__dict__.clear()


def _accumulate_leaf(leaf, g, alone: bool = False) -> None:
    """leaf.grad += g (in the leaf's dtype).

    The first gradient is stored as a C-contiguous array of its own: an op may hand back a view
    or one array for two inputs, and the caller may change ``leaf.grad`` in place (clipping),
    and the optimizer reads it in flat passes. ``alone`` says nothing else holds ``g``: then
    an array that owns its memory, C-contiguous and of the leaf's dtype, is kept as it is
    (why: copying every weight's gradient each step; docs/design.md, "Gradients kept as made").
    Later ones (a weight used twice, micro-batches) make a new sum, so an array the caller
    holds is never written into.
    """
    xp, dtype = leaf.xp, leaf.data.dtype
    if leaf.grad is None:
        own = alone and g.dtype == dtype and g.base is None and g.flags.c_contiguous and g.ndim > 0
        leaf.grad = Tensor._wrap(g if own else xp.array(g, dtype=dtype, order="C"))
    else:  # (asarray: NumPy's sum of two 0-d arrays is a scalar)
        leaf.grad.data = xp.asarray(leaf.grad.data + g, dtype=dtype)
