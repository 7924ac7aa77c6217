"""Turning a trained model into output sequences."""
from __future__ import annotations

import numpy as np

import minitensor as mt

from .masks import padding_mask


@mt.no_grad()
def greedy_decode(model, src, max_len: int | None = None, bos_id: int | None = None,
                  eos_id: int | None = None) -> np.ndarray:
    """Pick the most likely next token at every step until eos (or ``max_len`` tokens).

    src: ids (B, Ts). Returns an int64 array (B, L) of generated tokens without the leading
    bos; after a sequence's eos the rest of its row is pad. ``max_len`` defaults to
    Ts + 50 (the paper's limit, Section 6.1). The model is put in eval mode.
    """
    cfg = model.cfg
    bos = cfg.bos_id if bos_id is None else bos_id
    eos = cfg.eos_id if eos_id is None else eos_id
    model.eval()
    src = model.as_ids(src)
    B, Ts = src.shape
    max_len = Ts + 50 if max_len is None else max_len
    src_mask = padding_mask(src, cfg.pad_id)
    memory = model.encode(src, src_mask)
    xp = src.xp
    ys = xp.full((B, 1), bos, dtype=np.int64)
    done = xp.zeros(B, dtype=bool)
    for _ in range(max_len):
        h = model.decode(mt.Tensor._wrap(ys), memory, src_mask)
        logits = model.generator(h[:, -1])
        nxt = logits.data.argmax(axis=-1)
        nxt = xp.where(done, cfg.pad_id, nxt)
        ys = xp.concatenate([ys, nxt[:, None]], axis=1)
        done |= nxt == eos
        if bool(done.all()):
            break
    out = ys[:, 1:]
    return out.get() if hasattr(out, "get") else out
