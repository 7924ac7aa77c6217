"""Attention masks (bool, True = may attend), shaped to broadcast against scores (B, h, Tq, Tk)."""
from __future__ import annotations

import minitensor as mt
from minitensor.backend import xp_for


def padding_mask(ids: mt.Tensor, pad_id: int) -> mt.Tensor:
    """(B, T) token ids -> (B, 1, 1, T): every query may attend to the keys that are not padding."""
    return mt.from_array((ids.data != pad_id)[:, None, None, :])


def causal_mask(size: int, device: str = "cpu", offset: int = 0) -> mt.Tensor:
    """(T, offset + T) lower-triangular: query i may attend to keys j <= offset + i (Section 3.2.3).

    ``offset`` > 0 is for incremental decoding: T new positions follow ``offset`` earlier
    ones, which every new position may see.
    """
    xp = xp_for(device)
    return mt.from_array(xp.tril(xp.ones((size, offset + size), dtype=bool), k=offset))


def target_mask(ids: mt.Tensor, pad_id: int) -> mt.Tensor:
    """(B, T) target ids -> (B, 1, T, T): causal and not padding."""
    causal = causal_mask(ids.shape[1], ids.device).data
    return mt.from_array((ids.data != pad_id)[:, None, None, :] & causal)
