"""Small helpers shared by the tests."""
import json
import os
from pathlib import Path

import numpy as np
import pytest

import minitensor as mt


def leaf(array, device="cpu", grad=True):
    """A float64 (or given-dtype) leaf tensor on ``device``."""
    return mt.tensor(np.asarray(array), requires_grad=grad, device=device)


def close(tensor, expected, atol=1e-10, rtol=1e-7):
    np.testing.assert_allclose(tensor.numpy() if isinstance(tensor, mt.Tensor) else tensor, expected, atol=atol, rtol=rtol)


def translation_batch(rng, B=5, S=11, T=9, V=37):
    """(src, tgt_in, tgt_out) token ids for a vocabulary of V, with some padding (id 0)."""
    src = rng.integers(3, V, (B, S))
    tgt = rng.integers(3, V, (B, T + 1))
    src[1, 7:] = 0
    tgt[2, 6:] = 0
    return src, tgt[:, :-1], tgt[:, 1:]


# The Multi30k files the tests read: $MULTI30K_DIR (conftest.py points it at ../shared/data/multi30k
# when that exists), else that folder; tests that need them skip when it is missing
MULTI30K = Path(os.environ.get("MULTI30K_DIR") or Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k")
needs_multi30k = pytest.mark.skipif(not (MULTI30K / "train.en.gz").exists(),
                                    reason=f"no Multi30k files in {MULTI30K}: set MULTI30K_DIR")


def require(condition: bool, reason: str) -> None:
    """Skip the test when ``condition`` is false, except in CI (``MINITENSOR_STRICT_TESTS=1``,
    set by .ci/run), where what CI installs must be there: there it fails instead."""
    if condition:
        return
    if os.environ.get("MINITENSOR_STRICT_TESTS") == "1":
        pytest.fail(f"required in CI: {reason}")
    pytest.skip(reason)


def strict_json(text: str):
    """json.loads that refuses NaN and Infinity, as strict readers (jq, browsers) do."""
    def refuse(name):
        raise ValueError(f"{name} is not JSON")
    return json.loads(text, parse_constant=refuse)
