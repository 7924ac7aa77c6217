"""Weight initialisers (minitensor/nn/init.py): each fills its tensor in place, in its dtype, from
the generator ``manual_seed`` seeds, with the moments and bounds its formula gives."""
import numpy as np
import pytest

import minitensor as mt
from minitensor import nn


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_each_initialiser_fills_in_place_keeping_shape_and_dtype(dtype):
    for fill in (nn.init.uniform_, nn.init.normal_, nn.init.zeros_, nn.init.ones_, nn.init.xavier_uniform_):
        t = mt.tensor(np.full((30, 20), 7.0, dtype))
        assert fill(t) is t
        assert t.shape == (30, 20) and t.dtype == dtype and not np.any(t.numpy() == 7.0)


def test_zeros_and_ones_are_constant():
    t = mt.tensor(np.full((3, 4), 7.0))
    np.testing.assert_array_equal(nn.init.zeros_(t).numpy(), np.zeros((3, 4)))
    np.testing.assert_array_equal(nn.init.ones_(t).numpy(), np.ones((3, 4)))


def test_uniform_and_normal_have_the_asked_range_and_moments():
    mt.manual_seed(0)
    u = nn.init.uniform_(mt.tensor(np.zeros((200, 200))), -2.0, 3.0).numpy()
    assert u.min() >= -2.0 and u.max() < 3.0
    assert abs(u.mean() - 0.5) < 0.03 and abs(u.var() - 25 / 12) < 0.05   # U(a, b): (a+b)/2, (b-a)²/12
    n = nn.init.normal_(mt.tensor(np.zeros((200, 200))), 1.5, 0.5).numpy()
    assert abs(n.mean() - 1.5) < 0.01 and abs(n.std() - 0.5) < 0.01


def test_xavier_bound_follows_fan_in_plus_fan_out_and_gain():
    mt.manual_seed(1)
    for shape, gain in (((100, 50), 1.0), ((20, 300), 2.0)):
        a = gain * np.sqrt(6 / (shape[0] + shape[1]))
        w = nn.init.xavier_uniform_(mt.tensor(np.zeros(shape)), gain).numpy()
        assert np.abs(w).max() <= a and np.abs(w).max() > 0.95 * a
        assert abs(w.var() - a * a / 3) < 0.05 * a * a   # U(-a, a) has variance a²/3


def test_the_same_seed_gives_the_same_weights_and_another_seed_others():
    def draw(seed):
        mt.manual_seed(seed)
        return nn.init.normal_(mt.tensor(np.zeros((4, 5)))).numpy()

    np.testing.assert_array_equal(draw(3), draw(3))
    assert not np.array_equal(draw(3), draw(4))
