"""The benchmarks' own arithmetic, where a wrong count would mislead a reader: the matrix
products' floor (benchmarks/matmul_floor.py) must count exactly the products a Linear layer
computes."""
import importlib.util
from pathlib import Path

import numpy as np

import minitensor as mt
from minitensor.ops.linalg import Linear
from transformer import Transformer, TransformerConfig, label_smoothed_loss

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _matmul_floor(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # it imports harness from beside it
    spec = importlib.util.spec_from_file_location("matmul_floor", BENCHMARKS / "matmul_floor.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_product_counter_counts_every_linear_product_of_an_update(monkeypatch):
    """One training update of a small Transformer counts 3x the forward's Linear FLOPs
    (forward, dx and dW of every layer: the embeddings are trained, so every input needs
    its gradient), worked out here layer by layer from the paper's shapes; and leaving the
    counter puts Linear back as it was."""
    floor = _matmul_floor(monkeypatch)
    d, f, V, B, Ts, Tt = 16, 24, 13, 3, 5, 4
    cfg = TransformerConfig(vocab_size=V, d_model=d, n_heads=2, d_ff=f, n_encoder_layers=2, n_decoder_layers=1,
                            dropout=0.0)
    model = Transformer(cfg)
    rng = np.random.default_rng(0)
    src, tgt = rng.integers(3, V, (B, Ts)), rng.integers(3, V, (B, Tt + 1))  # no padding
    plain_forward = Linear.forward
    with floor.ProductCounter() as counter:
        loss = label_smoothed_loss(model(mt.tensor(src), mt.tensor(tgt[:, :-1])), mt.tensor(tgt[:, 1:]), 0, 0.1)
        loss.backward()
        counter.update_done(0.0)
    assert Linear.forward is plain_forward
    rows_s, rows_t = B * Ts, B * Tt
    encoder = rows_s * (4 * d * d + 2 * d * f)                       # Q, K, V, output; the two FFN layers
    decoder = rows_t * (4 * d * d + 2 * d * d + 2 * d * f) + rows_s * 2 * d * d  # + cross Q, out; cross K, V
    forward = 2 * (2 * encoder + decoder + rows_t * d * V)          # multiply-adds x 2; the tied projection
    assert counter.updates[0]["product_flops"] == 3 * forward
    # the shapes timed for the floor hold the same FLOPs
    assert sum(fl for fl, _ in counter.shapes()) == 3 * forward
