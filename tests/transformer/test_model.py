"""The whole model (transformer/model.py): the loss gradient-checked through a tiny Transformer,
padding content ignored, causality, and an encoder without positions permutation-equivariant."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import minitensor as mt
from minitensor import routes
from transformer import Transformer, label_smoothed_loss
from transformer.model import Encoder

from ..helpers import close
from .helpers import f64, tiny_config



def loss_passes_gradcheck(seed, Ts, Tt, smoothing, device="cpu") -> bool:
    mt.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = f64(Transformer(tiny_config())).to(device)
    src = rng.integers(3, 7, (2, Ts))
    src[1, -1] = 0  # some padding
    tgt = rng.integers(3, 7, (2, Tt + 1))
    tgt[0, -1] = 0
    s, ti, to = (mt.tensor(a, device=device) for a in (src, tgt[:, :-1], tgt[:, 1:]))
    loss = lambda *ps: label_smoothed_loss(model(s, ti), to, pad_id=0, smoothing=smoothing)  # noqa: E731
    return mt.gradcheck(loss, model.parameters())


@given(seed=st.integers(0, 999), Ts=st.integers(2, 4), Tt=st.integers(2, 4), smoothing=st.sampled_from([0.0, 0.1]))
@settings(max_examples=3)
def test_whole_tiny_transformer_loss_gradcheck(seed, Ts, Tt, smoothing, device):
    assert loss_passes_gradcheck(seed, Ts, Tt, smoothing, device)


def test_the_reference_engine_alone_passes_the_whole_transformer_gradcheck(monkeypatch):
    """With the speed layer's routes off, the model's gradient is the reference ops' alone, and right."""
    chosen = []
    choose = routes.choose
    monkeypatch.setattr(routes, "choose", lambda *call: chosen.append(choose(*call)) or chosen[-1])
    with routes.off():
        assert loss_passes_gradcheck(seed=7, Ts=4, Tt=3, smoothing=0.1)
    assert chosen and all(fn.__module__.startswith("minitensor.ops.") for fn in chosen)


def test_padding_content_does_not_change_the_real_positions():
    model = Transformer(tiny_config()).eval()
    a = model.encode(mt.tensor(np.array([[3, 4, 0, 0]]))).numpy()
    mask = mt.tensor(np.array([[True, True, False, False]]))[:, None, None, :]
    b = model.encoder(model.src_pos(model.src_embed(mt.tensor(np.array([[3, 4, 6, 5]])))), mask).numpy()
    close(a[:, :2], b[:, :2], atol=1e-6)


def test_causal_decoder_output_at_t_ignores_later_tokens():
    rng = np.random.default_rng(1)
    model = Transformer(tiny_config(n_decoder_layers=2)).eval()
    src = rng.integers(3, 7, (2, 5))
    tgt = rng.integers(3, 7, (2, 6))
    base = model(src, tgt).numpy()
    for t in range(5):
        changed = tgt.copy()
        changed[:, t + 1:] = rng.integers(3, 7, changed[:, t + 1:].shape)
        out = model(src, changed).numpy()
        close(out[:, : t + 1], base[:, : t + 1], atol=1e-5)
        assert not np.allclose(out[:, t + 1:], base[:, t + 1:])  # and later positions do see the change


def test_encoder_without_positions_is_permutation_equivariant():
    rng = np.random.default_rng(2)
    enc = Encoder(tiny_config(n_encoder_layers=2)).eval()
    x = rng.standard_normal((2, 6, 8)).astype(np.float32)
    perm = rng.permutation(6)
    out = enc(mt.tensor(x), None).numpy()
    out_perm = enc(mt.tensor(x[:, perm]), None).numpy()
    close(out_perm, out[:, perm], atol=1e-5)
