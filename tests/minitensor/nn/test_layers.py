"""Layers (minitensor/nn/layers.py): their weights' layout and initialisation."""
import numpy as np

import minitensor as mt
from minitensor import nn

from ...helpers import close


def test_linear_weight_is_in_by_out_with_xavier_bound():
    mt.manual_seed(0)
    lin = nn.Linear(100, 50)
    assert lin.weight.shape == (100, 50) and lin.bias.shape == (50,)
    bound = np.sqrt(6 / 150)
    w = lin.weight.numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
    close(lin.bias, np.zeros(50))
