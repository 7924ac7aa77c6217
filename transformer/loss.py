"""The training loss: label-smoothed cross entropy (Section 5.4), normalised by the number
of non-pad target tokens."""
from __future__ import annotations

import minitensor as mt
import minitensor.functional as F


def label_smoothed_loss(logits: mt.Tensor, target: mt.Tensor, pad_id: int, smoothing: float = 0.1,
                        reduction: str = "mean") -> mt.Tensor:
    """logits (B, T, V), target (B, T) -> the loss per non-pad token ("mean") or summed ("sum").

    The smoothed target puts 1-ε+ε/V on the true token and ε/V on every token (PyTorch's
    definition); pad positions contribute nothing and are not counted.
    """
    return F.cross_entropy(logits, target, ignore_index=pad_id, label_smoothing=smoothing, reduction=reduction)
