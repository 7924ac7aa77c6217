"""Modules (minitensor/nn/module.py): registration, parameters, state_dict round trips with clear
errors, train and eval modes, moving between devices, ModuleList and Sequential."""
import numpy as np
import pytest

import minitensor as mt
from minitensor import nn

from ...helpers import close


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(5, 4)
        self.blocks = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])
        self.norm = nn.LayerNorm(4)
        self.drop = nn.Dropout(0.5)
        self.out = nn.Linear(4, 5, bias=False)
        self.out.weight = self.emb.weight  # shapes differ in use, but sharing is what is tested
        self.register_buffer("table", mt.tensor(np.arange(3.0)))
        self.register_buffer("scratch", mt.tensor(np.zeros(2)), persistent=False)

    def forward(self, ids):
        h = self.emb(ids)
        for b in self.blocks:
            h = b(h).relu()
        return self.drop(self.norm(h))


def test_parameters_are_registered_by_attribute_and_shared_ones_listed_once():
    m = Tiny()
    names = [n for n, _ in m.named_parameters()]
    assert names == ["emb.weight", "blocks.0.weight", "blocks.0.bias", "blocks.1.weight", "blocks.1.bias",
                     "norm.weight", "norm.bias"]
    assert len(m.parameters()) == 7
    assert m.num_parameters() == 5 * 4 + 2 * (16 + 4) + 8
    assert "out.weight" in m.state_dict()  # every name is in the state dict


def test_state_dict_round_trip_restores_outputs():
    mt.manual_seed(0)
    a = Tiny().eval()
    mt.manual_seed(1)
    b = Tiny().eval()
    ids = mt.tensor(np.array([[1, 2, 3]]))
    assert not np.allclose(a(ids).numpy(), b(ids).numpy())
    b.load_state_dict({k: v.numpy() for k, v in a.state_dict().items()})
    close(a(ids), b(ids).numpy())
    assert "scratch" not in a.state_dict() and "table" in a.state_dict()


def test_load_state_dict_copies_rather_than_aliasing():
    a, b = Tiny(), Tiny()
    b.load_state_dict(a.state_dict())
    b.emb.weight.data += 1
    assert not np.allclose(a.emb.weight.numpy(), b.emb.weight.numpy())


def test_load_state_dict_reports_missing_unexpected_and_shape_mismatch():
    m = Tiny()
    sd = {k: v.numpy() for k, v in m.state_dict().items()}
    del sd["norm.bias"]
    sd["extra"] = np.zeros(1)
    with pytest.raises(KeyError, match=r"missing keys \['norm.bias'\].*unexpected keys \['extra'\]"):
        m.load_state_dict(sd)
    m.load_state_dict(sd, strict=False)
    sd = {k: v.numpy() for k, v in m.state_dict().items()}
    sd["norm.weight"] = np.zeros(7)
    with pytest.raises(ValueError, match=r"norm.weight: checkpoint \(7,\) vs model \(4,\)"):
        m.load_state_dict(sd)


def test_train_and_eval_switch_every_submodule_and_dropout_obeys():
    m = Tiny()
    ids = mt.tensor(np.array([[0, 1, 2, 3]]))
    m.eval()
    assert all(not x.training for x in m.modules())
    close(m(ids), m(ids).numpy())  # deterministic in eval
    m.train()
    assert all(x.training for x in m.modules())


def test_forgetting_super_init_gives_a_clear_error():
    class Bad(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(np.zeros(2, np.float32))

    with pytest.raises(AttributeError, match="super"):
        Bad()


def test_reassigning_attribute_unregisters_parameter():
    lin = nn.Linear(2, 3)
    lin.bias = None
    assert [n for n, _ in lin.named_parameters()] == ["weight"]
    close(lin(mt.ones(1, 2)), (np.ones((1, 2), np.float32) @ lin.weight.numpy()))


def test_sequential_chains_modules_and_is_gradcheckable():
    mt.manual_seed(0)
    seq = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).astype(np.float64)
    x = mt.tensor(np.random.default_rng(0).standard_normal((5, 3)), requires_grad=True)
    ref = np.maximum(x.numpy() @ seq[0].weight.numpy() + seq[0].bias.numpy(), 0) @ seq[2].weight.numpy() + seq[2].bias.numpy()
    close(seq(x), ref)
    assert mt.gradcheck(lambda u, *ps: seq(u), [x] + seq.parameters())
    assert len(seq) == 3


def test_module_to_moves_parameters_and_buffers(device):
    m = Tiny().to(device)
    assert all(p.device == device for p in m.parameters())
    assert m.table.device == device
    m.to("cpu")
    assert all(p.device == "cpu" for p in m.parameters())
