"""Small helpers shared by the tests."""
import numpy as np

import minitensor as mt


def leaf(array, device="cpu", grad=True):
    """A float64 (or given-dtype) leaf tensor on ``device``."""
    return mt.tensor(np.asarray(array), requires_grad=grad, device=device)


def close(tensor, expected, atol=1e-10, rtol=1e-7):
    np.testing.assert_allclose(tensor.numpy() if isinstance(tensor, mt.Tensor) else tensor, expected, atol=atol, rtol=rtol)
