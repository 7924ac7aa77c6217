"""The training loss: label-smoothed cross entropy (Section 5.4), normalised by the number
of non-pad target tokens."""
from __future__ import annotations

import numpy as np

import minitensor as mt
import minitensor.functional as F


def label_smoothed_loss(logits: mt.Tensor, target: mt.Tensor, pad_id: int, smoothing: float = 0.1,
                        reduction: str = "mean", overwrite: bool = False) -> mt.Tensor:
    """logits (B, T, V), target (B, T) -> the loss per non-pad token ("mean") or summed ("sum").

    The smoothed target puts 1-ε+ε/V on the true token and ε/V on every token (PyTorch's
    definition); pad positions contribute nothing and are not counted. ``overwrite``: the
    logits are a temporary, whose memory the loss may reuse (see ``F.cross_entropy``).
    """
    return F.cross_entropy(logits, target, ignore_index=pad_id, label_smoothing=smoothing, reduction=reduction,
                           overwrite=overwrite)


def batch_loss(model, src, tgt_in, tgt_out, pad_id: int, smoothing: float = 0.1, reduction: str = "sum") -> mt.Tensor:
    """The loss of one batch: ``label_smoothed_loss(model(src, tgt_in), tgt_out, pad_id, smoothing, reduction)``.

    The value and every gradient are those of that composition (a test checks it). ``tgt_out``
    is read on the host (the trainer's batches are NumPy arrays); on a device it is copied over once.
    """
    rows, target = target_rows(tgt_out, pad_id)
    return rows_loss(model, src, tgt_in, rows, target, pad_id, smoothing, reduction)


def target_rows(tgt_out, pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, target): the positions of the B·Tt flattened targets that are not padding, and those
    targets (host arrays)."""
    target = (tgt_out.numpy() if isinstance(tgt_out, mt.Tensor) else np.asarray(tgt_out)).reshape(-1)
    rows = np.flatnonzero(target != pad_id)
    return rows, target[rows]


def rows_loss(model, src, tgt_in, rows, target, pad_id: int, smoothing: float = 0.1,
              reduction: str = "sum") -> mt.Tensor:
    """:func:`batch_loss` from :func:`target_rows`' two arrays (on the host, or already on the
    model's device: a CUDA graph's update reads them there)."""
    # why rows and overwrite: pad targets get no logits (a tenth of them, with length-sorted
    # batches), and the logits, the softmax and its gradient (each tokens x V) share one array
    logits = model(src, tgt_in, rows=rows)
    target = target if isinstance(target, mt.Tensor) else mt.tensor(target, device=logits.device)
    return label_smoothed_loss(logits, target, pad_id, smoothing, reduction, overwrite=True)
