"""The kernel routes: the reference ops on the hand-written CUDA kernels of ``minitensor/cuda/``,
where the kernels may run (CuPy arrays with the kernels on, or NumPy arrays under
``minitensor.cuda.emulate``) and each kernel applies to the arrays at hand.

Each implementation is the op's subclass beside its kernel's launcher, named here and imported
when first taken. They are registered before the NumPy routes, so that under the emulator the
kernels' routes are tried first. ``tests/minitensor/cuda/`` proves each equal to its op.
"""
from __future__ import annotations

from .. import cuda, optim, routes
from ..ops import attention, dropout, loss, norm


def _kernels(xp) -> bool:
    return cuda.kernels_may_run(xp)


def _layer_norm(xp, arrays, params) -> bool:
    """One read of x each way (the kernels take a weight and bias of x's width, up to 1024)."""
    x, weight, bias = arrays
    return _kernels(xp) and cuda.launcher("layer_norm").applies(x, weight, bias)


def _cross_entropy(xp, arrays, params) -> bool:
    """One pass over the logits each way."""
    logits = arrays[0]
    return _kernels(xp) and cuda.launcher("cross_entropy").applies(logits.dtype, logits.shape)


def _dropout(xp, arrays, params) -> bool:
    """The mask drawn in the kernel and drawn again by the backward: none kept, one launch each way."""
    return _kernels(xp) and cuda.launcher("dropout").applies(arrays[0].dtype, params.get("p", 0.5))


def _flash(xp, arrays, params) -> bool:
    """The flash kernels, which never form the weights: no dropout on them and the weights not
    asked for; with ``minitensor.cuda.attention_mode()`` "flash", or "auto" where they win: the
    tensor-core kernels (16-bit, or float32 in TF32) up to ``FLASH_TC_SHORT_KEYS`` keys and from
    ``FLASH_TC_MIN_KEYS`` on, the CUDA-core ones from ``FLASH_MIN_KEYS`` keys on."""
    q, k, v, _ = arrays
    if not _kernels(xp) or len(attention.scores_shape(q, k)) > 4 or params.get("need_weights"):
        return False
    if (params.get("training") and params.get("dropout_p", 0.0) > 0) or cuda.attention_mode() == "fused":
        return False
    flash = cuda.launcher("flash_attention")
    if not flash.applies(q, k, v):
        return False
    keys = k.shape[-2]
    wins = (keys <= cuda.FLASH_TC_SHORT_KEYS or keys >= cuda.FLASH_TC_MIN_KEYS) \
        if flash.tensor_cores(q, flash.tf32_route(q)) else keys >= cuda.FLASH_MIN_KEYS
    return cuda.attention_mode() == "flash" or wins


def _fused_softmax(xp, arrays, params) -> bool:
    """The same products around the fused mask + softmax kernel, each pass reading the scores once."""
    q, k, _, _ = arrays
    shape = attention.scores_shape(q, k)
    return _kernels(xp) and len(shape) <= 4 and cuda.launcher("softmax").applies(q.dtype, shape)


ROUTES = [
    routes.register(norm.LayerNorm, "minitensor.cuda.layer_norm:FusedLayerNorm", _layer_norm),
    routes.register(loss.CrossEntropy, "minitensor.cuda.cross_entropy:FusedCrossEntropy", _cross_entropy),
    routes.register(dropout.Dropout, "minitensor.cuda.dropout:FusedDropout", _dropout),
    routes.register(attention.ScaledDotProductAttention, "minitensor.cuda.flash_attention:FlashAttention", _flash),
    routes.register(attention.ScaledDotProductAttention, "minitensor.cuda.softmax:FusedSoftmaxAttention",
                    _fused_softmax),
    routes.register(optim.Adam, "minitensor.cuda.adam:FusedAdam", lambda xp, arrays, params: _kernels(xp)),
]
