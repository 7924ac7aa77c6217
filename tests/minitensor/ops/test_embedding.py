"""embedding (minitensor/ops/embedding.py): rows picked by id, and gradcheck with repeated ids."""
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import minitensor as mt
import minitensor.functional as F
from minitensor.testing import arrays, shapes

from ...helpers import close, leaf


@given(data=st.data())
def test_embedding_picks_rows_and_gradcheck_with_repeated_ids(data, device):
    V, D = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 4))
    ids_shape = data.draw(shapes(min_dims=1, max_dims=2, max_side=4))
    ids = np.random.default_rng(data.draw(st.integers(0, 99))).integers(0, V, ids_shape)
    w = data.draw(arrays((V, D)))
    tw = leaf(w, device)
    tid = mt.tensor(ids, device=device)
    close(F.embedding(tid, tw), w[ids])
    assert mt.gradcheck(lambda u: F.embedding(tid, u), [tw])
