"""Masks (transformer/masks.py): the documented shapes and meaning of padding, causal and target
masks."""
import numpy as np

import minitensor as mt
from transformer import causal_mask, padding_mask, target_mask

from ..helpers import close



def test_masks_have_the_documented_shapes_and_meaning():
    ids = mt.tensor(np.array([[5, 6, 0]]))
    close(padding_mask(ids, 0), np.array([[[[True, True, False]]]]))
    close(causal_mask(3), np.tril(np.ones((3, 3), bool)))
    tm = target_mask(ids, 0).numpy()
    assert tm.shape == (1, 1, 3, 3) and not tm[0, 0, 2, 2] and tm[0, 0, 1, 0] and not tm[0, 0, 0, 1]
