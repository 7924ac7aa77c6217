"""The training loss: label-smoothed cross entropy (Section 5.4), normalised by the number
of non-pad target tokens."""
from __future__ import annotations

import numpy as np

import minitensor as mt
import minitensor.functional as F


def label_smoothed_loss(logits: mt.Tensor, target: mt.Tensor, pad_id: int, smoothing: float = 0.1,
                        reduction: str = "mean") -> mt.Tensor:
    """logits (B, T, V), target (B, T) -> the loss per non-pad token ("mean") or summed ("sum").

    The smoothed target puts 1-ε+ε/V on the true token and ε/V on every token (PyTorch's
    definition); pad positions contribute nothing and are not counted.
    """
    return F.cross_entropy(logits, target, ignore_index=pad_id, label_smoothing=smoothing, reduction=reduction)


def batch_loss(model, src, tgt_in, tgt_out, pad_id: int, smoothing: float = 0.1, reduction: str = "sum") -> mt.Tensor:
    """The loss of one batch, ``label_smoothed_loss(model(src, tgt_in), tgt_out, ...)`` computed
    without the logits of pad targets: the model projects only the positions that count.

    The value and every gradient are those of the plain composition (a test checks it); what
    is saved is the pre-softmax projection and the softmax over V at each pad position, about
    a tenth of both with length-sorted token batches. ``tgt_out`` is read on the host (the
    trainer's batches are NumPy arrays); on a device it is copied over once.
    """
    host = tgt_out.numpy() if isinstance(tgt_out, mt.Tensor) else np.asarray(tgt_out)
    flat = host.reshape(-1)
    rows = np.flatnonzero(flat != pad_id)
    logits = model(src, tgt_in, rows=rows)
    target = mt.tensor(flat[rows], device=logits.device)
    # why overwrite: the logits, the softmax and its gradient (each tokens x V) share one array
    return F.cross_entropy(logits, target, label_smoothing=smoothing, reduction=reduction, overwrite=True)
