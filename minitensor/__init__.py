"""minitensor: a small reverse-mode autograd engine over NumPy (CPU) and CuPy (CUDA) arrays.

    import minitensor as mt
    import minitensor.functional as F
    from minitensor import nn, optim
"""
from . import allocator, amp, cuda, functional, nn, optim, profiler, routes, speed
from .speed import gpu as _kernel_routes, products as _product_routes, cpu as _numpy_routes  # noqa: F401, I001
# (importing them registers the routes, in the order they are tried: the kernels', the products', NumPy's)
from .autograd import Function, enable_grad, is_grad_enabled, no_grad
from .errors import DeviceError, GraphError, ShapeError
from .gradcheck import GradcheckError, gradcheck
from .profiler import profile
from .random import get_rng_state, manual_seed, set_rng_state
from .tensor import (Tensor, arange, from_array, from_dlpack, full, ones, ones_like, rand, randn, tensor, zeros,
                     zeros_like)

DISTRIBUTION = "minitensor-transformer"  # the name pip knows the project by (pyproject.toml)


def __getattr__(name: str):
    """``minitensor.__version__``: the installed distribution's version, written once, in
    pyproject.toml (looked up when asked: reading the package metadata is not free)."""
    if name != "__version__":
        raise AttributeError(f"module 'minitensor' has no attribute {name!r}")
    import importlib.metadata  # noqa: PLC0415
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:  # a checkout on the path that was never installed
        return "0+unknown"

functional.bind_tensor_methods()  # a + b, x.sum(), x == y, ...: the functions of F (functional.TENSOR_METHODS)

__all__ = [
    "Tensor", "tensor", "from_array", "from_dlpack", "zeros", "ones", "full", "zeros_like", "ones_like", "arange",
    "randn", "rand",
    "no_grad", "enable_grad", "is_grad_enabled", "manual_seed", "get_rng_state", "set_rng_state",
    "gradcheck", "GradcheckError", "Function", "ShapeError", "GraphError", "DeviceError",
    "functional", "nn", "optim", "cuda", "amp", "allocator", "profile", "profiler", "routes", "speed",
]
