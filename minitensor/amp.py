"""Mixed precision training (Micikevicius et al., 2018, "Mixed Precision Training").

Three pieces, as the paper describes them:

* **16-bit compute.** Inside ``with autocast("float16"):`` (or ``"bfloat16"``) the matrix
  products (``F.linear``, ``F.matmul``) cast their floating inputs to that dtype, so the
  bulk of the arithmetic and of the saved activations is 16-bit. Reductions stay float32:
  layer norm, softmax and cross entropy widen 16-bit inputs before summing.
* **float32 master weights.** The parameters themselves stay float32. The cast is an op
  in the graph, so each parameter's gradient comes back through it as float32, and the
  optimizer updates float32 weights: small updates are not lost to 16-bit rounding.
* **Dynamic loss scaling.** Small gradients underflow in float16. :class:`LossScaler`
  multiplies the loss by S before backward (so every gradient is S times larger), divides
  the float32 gradients by S afterwards, and when any gradient overflowed (inf or NaN)
  skips the update and halves S; after ``growth_interval`` clean updates it doubles S.
  bfloat16 has float32's range and rarely needs it.
"""
from __future__ import annotations

import math
import threading
from contextlib import ContextDecorator

import numpy as np

from . import backend, cuda

_state = threading.local()
DTYPES = ("float16", "bfloat16")


def _dtype(name: str) -> np.dtype:
    if name == "float16":
        return np.dtype(np.float16)
    if name == "bfloat16":
        try:
            import ml_dtypes  # noqa: PLC0415 (CuPy and NumPy take bfloat16 from ml_dtypes)
        except ImportError as e:
            raise ImportError("bfloat16 needs the ml_dtypes package: pip install ml_dtypes") from e
        return np.dtype(ml_dtypes.bfloat16)
    raise ValueError(f"autocast dtype must be one of {DTYPES}, got {name!r}")


def autocast_dtype() -> np.dtype | None:
    """The dtype matrix products run in now, or None outside :class:`autocast`."""
    return getattr(_state, "dtype", None)


class autocast(ContextDecorator):
    """Run matrix products in ``dtype`` ("float16" or "bfloat16") inside the block; ``dtype=None``
    or ``enabled=False`` is a no-op, so one code path serves every precision.

    ``weights`` (e.g. ``model.parameters()``): the floating matrices among them are cast to
    ``dtype`` on entering the block, all in one launch where the kernels run
    (``minitensor/cuda/cast.cu``), and the products inside read those copies. Without it each
    weight is cast at its first product in the block, one launch each; the values are the same.
    """

    def __init__(self, dtype: str | None = "float16", enabled: bool = True, weights=None):
        self.dtype = _dtype(dtype) if enabled and dtype is not None else None
        self.weights = [] if weights is None else list(weights)

    def __enter__(self):
        self._prev = autocast_dtype(), getattr(_state, "casts", None)
        _state.dtype, _state.casts = self.dtype, {}
        if self.dtype is not None and self.weights:
            _state.casts.update(_weight_casts([w.data for w in self.weights], self.dtype))
        return self

    def __exit__(self, *exc):
        _state.dtype, _state.casts = self._prev
        return False


def _weight_casts(arrays: list, dtype) -> dict:
    """{id: (array, its copy in ``dtype``)} for the floating matrices among ``arrays``, in
    cast_once's form, so that a product's ``cast_once`` finds them."""
    arrays = [a for a in arrays if a.dtype.kind == "f" and a.ndim >= 2 and a.dtype != dtype]
    if not arrays:
        return {}
    kernel = cuda.launcher("cast") if cuda.kernels_may_run(backend.array_module(arrays[0])) else None
    if kernel is not None and kernel.applies(arrays, dtype):
        copies = kernel.cast_all(arrays, dtype)  # why: every weight's copy in one launch, not one each
    else:
        copies = [a.astype(dtype) for a in arrays]
    return {id(a): (a, c) for a, c in zip(arrays, copies)}


def cast_once(tensor, cast):
    """``cast(tensor)``, made once per tensor inside one :class:`autocast` block: the Q, K and V
    projections read one activation, and the decoder's every cross-attention the encoder's
    output, each cast once for all of them (and its gradient cast back once). Outside a block,
    ``cast(tensor)``."""
    casts = getattr(_state, "casts", None)
    if casts is None:
        return cast(tensor)
    hit = casts.get(id(tensor))
    if hit is None or hit[0] is not tensor:    # the tensor is kept with its cast: its id stays its own
        hit = casts[id(tensor)] = (tensor, cast(tensor))
    return hit[1]


class LossScaler:
    """Dynamic loss scaling around one update:

        scaler.backward(loss)             # (loss · S).backward(): every gradient S times larger
        skipped = scaler.step(optimizer)  # overflow? skip and halve S; else step with the gradients / S

    ``enabled=False`` (float32, bfloat16) makes the same two calls a plain ``loss.backward()``
    and ``optimizer.step()``, so one loop serves every precision. ``unscale_`` and ``update``
    are the two halves of ``step`` for a loop that wants the unscaled gradients themselves.
    ``skipped`` counts the updates skipped so far."""

    def __init__(self, init_scale: float = 2.0**15, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, min_scale: float = 2.0**-14, enabled: bool = True):
        if not (init_scale > 0 and growth_factor > 1 and 0 < backoff_factor < 1 and growth_interval > 0):
            raise ValueError("LossScaler: need init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1, "
                             "growth_interval > 0")
        self.enabled = enabled
        self.scale = float(init_scale) if enabled else 1.0  # S
        self.growth_factor, self.backoff_factor = growth_factor, backoff_factor
        self.growth_interval, self.min_scale = growth_interval, min_scale
        self.good_steps = 0
        self.skipped = 0

    def backward(self, loss) -> None:
        """Backpropagate ``loss · S``. Overflow in float16 is expected now and then: ``step``
        detects it, so it is not warned about here."""
        if not self.enabled:
            loss.backward()
            return
        with np.errstate(over="ignore", invalid="ignore"):
            (loss * self.scale).backward()

    def step(self, optimizer, grad_scale: float = 1.0) -> bool:
        """``optimizer.step(grad_scale / S)`` when every gradient is finite; otherwise skip it.
        Then update S (halved after an overflow). Returns whether the update was skipped.

        The division by S happens in the optimizer's own pass; the check is one launch where
        the kernels run, and the host reads its one number (it must, to know whether to step)."""
        if not self.enabled:
            optimizer.step(grad_scale)
            return False
        scale = self.scale
        finite = self.all_finite(optimizer.params)
        self.update(found_overflow=not finite)
        if finite:
            optimizer.step(grad_scale / scale)
        return not finite

    def all_finite(self, params) -> bool:
        """Whether every gradient of ``params`` is finite (no inf or NaN)."""
        return self._check([p.grad.data for p in params if p.grad is not None], 1.0)

    def overflow_count(self, params):
        """How many gradient entries of ``params`` are inf or NaN, left on the device (one int):
        for :meth:`minitensor.optim.Optimizer.update_params`'s ``skip``, where the host need not
        read it before the update (a CUDA graph's update); read it after, for :meth:`update`."""
        grads = [p.grad.data for p in params if p.grad is not None]
        kernel = LossScaler._one_launch(grads)
        if kernel is not None:
            return kernel.unscale(grads, 1.0)
        xp = backend.array_module(grads[0])
        return sum(xp.count_nonzero(~xp.isfinite(g)) for g in grads).reshape(1).astype(np.int32)

    def unscale_(self, params, extra: float = 1.0) -> bool:
        """Multiply every gradient by extra / scale in place; True when all are finite."""
        return self._check([p.grad.data for p in params if p.grad is not None], extra / self.scale)

    @staticmethod
    def _one_launch(grads: list):
        """The loss-scale kernel's launcher where it may take these gradients, else None."""
        # why: every gradient in one launch (cuda/loss_scale.cu), not three per gradient
        xp = backend.array_module(grads[0])
        if cuda.kernels_may_run(xp) and cuda.launcher("loss_scale").applies(grads):
            return cuda.launcher("loss_scale")
        return None

    @staticmethod
    def _check(grads: list, factor: float) -> bool:
        """Multiply ``grads`` by ``factor`` in place (nothing is written for 1) and say whether
        all came out finite. Where the kernels may run, one launch for all the gradients;
        otherwise one reduction per gradient. Either way one number goes to the host."""
        if not grads:
            return True
        xp = backend.array_module(grads[0])
        kernel = LossScaler._one_launch(grads)
        if kernel is not None:
            return int(kernel.unscale(grads, factor)[0]) == 0
        total = None
        with np.errstate(over="ignore", invalid="ignore"):  # non-finite values are what we look for
            for g in grads:
                if factor != 1.0:
                    g *= g.dtype.type(factor)
                s = g.sum(dtype=np.float32)  # inf or NaN anywhere makes the sum inf or NaN
                total = s if total is None else total + s
        return bool(math.isfinite(float(total))) if xp is np else bool(xp.isfinite(total).item())

    def update(self, found_overflow: bool) -> None:
        """Halve the scale after an overflow; double it after ``growth_interval`` clean steps."""
        if found_overflow:
            self.skipped += 1
            self.good_steps = 0
            self.scale = max(self.scale * self.backoff_factor, self.min_scale)
        else:
            self.good_steps += 1
            if self.good_steps >= self.growth_interval:
                self.scale *= self.growth_factor
                self.good_steps = 0

    def state_dict(self) -> dict:
        return {"scale": self.scale, "good_steps": self.good_steps, "skipped": self.skipped}

    def load_state_dict(self, sd: dict) -> None:
        self.scale, self.good_steps, self.skipped = float(sd["scale"]), int(sd["good_steps"]), int(sd["skipped"])
