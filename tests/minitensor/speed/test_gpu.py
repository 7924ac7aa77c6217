"""The kernel routes (minitensor/speed/gpu.py) are taken where the kernels may run and apply, and
nowhere else: under the emulator each op reaches its kernel's class, which is a subclass of the
op; with the kernels off, the routes off or on plain NumPy, it does not. (That each kernel route
computes what its op computes is proved in tests/minitensor/cuda/.)"""
import numpy as np
import pytest

from minitensor import cuda, optim, routes
from minitensor.ops import attention, dropout, loss, norm
from minitensor.speed import cpu, gpu

rng = np.random.default_rng(0)
CALLS = {  # op -> (arrays, params, the class of its kernel route for them)
    "layer norm": (norm.LayerNorm, [rng.standard_normal((4, 8)), np.ones(8), np.zeros(8)], {},
                   "minitensor.cuda.layer_norm.FusedLayerNorm"),
    "cross entropy": (loss.CrossEntropy, [rng.standard_normal((4, 7)), rng.integers(0, 7, 4)], {},
                      "minitensor.cuda.cross_entropy.FusedCrossEntropy"),
    "dropout": (dropout.Dropout, [rng.standard_normal((4, 8))], {"p": 0.1}, "minitensor.cuda.dropout.FusedDropout"),
    "attention": (attention.ScaledDotProductAttention, [rng.standard_normal((1, 2, 5, 8))] * 3 + [None],
                  {"need_weights": True}, "minitensor.cuda.softmax.FusedSoftmaxAttention"),
    "adam": (optim.Adam, [rng.standard_normal((4, 8)), rng.standard_normal(3)], {}, "minitensor.cuda.adam.FusedAdam"),
}


def name(cls) -> str:
    return f"{cls.__module__}.{cls.__name__}"


@pytest.mark.parametrize("what", CALLS)
def test_under_the_emulator_each_op_takes_its_kernel_route_a_subclass_of_the_op(what):
    op, arrays, params, kernel = CALLS[what]
    with cuda.emulate():
        chosen = routes.choose(op, np, arrays, params)
        assert name(chosen) == kernel and issubclass(chosen, op)
        with routes.off():
            assert routes.choose(op, np, arrays, params) is op
        with cuda.use_kernels(False):
            assert not name(routes.choose(op, np, arrays, params)).startswith("minitensor.cuda.")
    with cuda.emulate(False):
        assert not name(routes.choose(op, np, arrays, params)).startswith("minitensor.cuda.")


def test_a_kernel_route_does_not_apply_where_its_kernel_does_not():
    """The weights asked for: no flash kernel; a LayerNorm without its weight: the NumPy route;
    attention with dropout in training: the fused softmax, never the flash kernels."""
    q = rng.standard_normal((1, 2, 5, 8))
    with cuda.emulate(), _mode("flash"):
        assert routes.choose(attention.ScaledDotProductAttention, np, [q, q, q, None], {}).__name__ == "FlashAttention"
        for params in ({"need_weights": True}, {"dropout_p": 0.1, "training": True}):
            chosen = routes.choose(attention.ScaledDotProductAttention, np, [q, q, q, None], params)
            assert chosen.__name__ == "FusedSoftmaxAttention"
        x = rng.standard_normal((4, 2000))       # wider than the LayerNorm kernels take
        assert routes.choose(norm.LayerNorm, np, [x, np.ones(2000), np.zeros(2000)], {}) is cpu.LayerNorm


class _mode:
    """cuda.set_attention(mode) inside the block, "auto" again after it."""

    def __init__(self, mode):
        self.mode = mode

    def __enter__(self):
        cuda.set_attention(self.mode)

    def __exit__(self, *exc):
        cuda.set_attention("auto")


def test_the_kernel_routes_are_tried_before_the_numpy_routes_of_the_same_op():
    for op in {r.op for r in gpu.ROUTES}:
        kinds = [isinstance(r.implementation, str) and r.implementation.startswith("minitensor.cuda.")
                 or name(r.implementation).startswith("minitensor.cuda.") for r in routes.routes_of(op)]
        assert kinds == sorted(kinds, reverse=True), op.__name__
