"""The same Transformer in PyTorch, for side-by-side timings (not part of the package).

It mirrors transformer/ layer for layer: post-norm, sinusoidal positions, one shared
embedding scaled by sqrt(d_model) and tied to the output projection, four d x d
projections per attention, a ReLU feed-forward. Only used by the benchmarks, and only when
PyTorch is installed (a separate environment: pip install torch==2.13.0).
"""
from __future__ import annotations

import math
import re

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from transformer.embedding import sinusoidal_table


class TorchMHA(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h, self.dk = h, d // h
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d, d) for _ in range(4))

    def forward(self, q, k, v, mask):
        B, Tq, d = q.shape
        Tk = k.shape[1]
        q = self.w_q(q).view(B, Tq, self.h, self.dk).transpose(1, 2)
        k = self.w_k(k).view(B, Tk, self.h, self.dk).transpose(1, 2)
        v = self.w_v(v).view(B, Tk, self.h, self.dk).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.w_o(out.transpose(1, 2).reshape(B, Tq, d))


class TorchLayer(nn.Module):
    def __init__(self, d, h, ff, dropout, cross):
        super().__init__()
        self.self_attn = TorchMHA(d, h)
        self.cross_attn = TorchMHA(d, h) if cross else None
        self.ffn = nn.Sequential(nn.Linear(d, ff), nn.ReLU(), nn.Linear(ff, d))
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(3 if cross else 2))
        self.drop = nn.Dropout(dropout)

    def forward(self, x, mask, memory=None, mem_mask=None):
        x = self.norms[0](x + self.drop(self.self_attn(x, x, x, mask)))
        if self.cross_attn is not None:
            x = self.norms[1](x + self.drop(self.cross_attn(x, memory, memory, mem_mask)))
        return self.norms[-1](x + self.drop(self.ffn(x)))


class TorchTransformer(nn.Module):
    def __init__(self, vocab, d, h, ff, n_layers, dropout=0.0, max_len=512, pad_id=0):
        super().__init__()
        self.d, self.pad = d, pad_id
        self.emb = nn.Embedding(vocab, d)
        nn.init.normal_(self.emb.weight, std=d**-0.5)
        self.register_buffer("pe", torch.from_numpy(sinusoidal_table(max_len, d)))
        self.enc = nn.ModuleList(TorchLayer(d, h, ff, dropout, False) for _ in range(n_layers))
        self.dec = nn.ModuleList(TorchLayer(d, h, ff, dropout, True) for _ in range(n_layers))
        self.drop = nn.Dropout(dropout)
        for m in self.modules():  # the same init as minitensor's nn.Linear: Xavier uniform, zero bias
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)

    def embed(self, ids):
        return self.drop(self.emb(ids) * math.sqrt(self.d) + self.pe[: ids.shape[1]])

    def encode(self, src):
        mask = (src != self.pad)[:, None, None, :]
        x = self.embed(src)
        for layer in self.enc:
            x = layer(x, mask)
        return x, mask

    def decode(self, tgt, memory, src_mask):
        T = tgt.shape[1]
        mask = (tgt != self.pad)[:, None, None, :] & torch.tril(torch.ones(T, T, dtype=torch.bool, device=tgt.device))
        y = self.embed(tgt)
        for layer in self.dec:
            y = layer(y, mask, memory, src_mask)
        return y @ self.emb.weight.T

    def forward(self, src, tgt_in):
        memory, src_mask = self.encode(src)
        return self.decode(tgt_in, memory, src_mask)


def torch_name(name: str) -> str:
    """The name in TorchTransformer of the minitensor Transformer's parameter ``name``."""
    name = name.replace("tgt_embed.weight", "emb.weight")
    name = name.replace("encoder.layers.", "enc.").replace("decoder.layers.", "dec.")
    name = name.replace("ffn.w_1.", "ffn.0.").replace("ffn.w_2.", "ffn.2.")
    return re.sub(r"sub(\d)\.norm\.", lambda m: f"norms.{int(m.group(1)) - 1}.", name)


@torch.no_grad()
def load_minitensor_weights(model: TorchTransformer, named_arrays) -> None:
    """Start ``model`` from a minitensor Transformer's weights (``(name, array)`` pairs, e.g.
    from ``named_parameters()``), so that two runs differ only in their arithmetic.
    minitensor stores a Linear weight as (in, out), PyTorch as (out, in)."""
    params = dict(model.named_parameters())
    done = set()
    for name, array in named_arrays:
        key = torch_name(name)
        array = np.asarray(array)
        if array.ndim == 2 and key != "emb.weight":
            array = array.T
        if params[key].shape != array.shape:
            raise ValueError(f"{name} -> {key}: shape {array.shape}, PyTorch has {tuple(params[key].shape)}")
        params[key].copy_(torch.from_numpy(np.ascontiguousarray(array)))
        done.add(key)
    missing = set(params) - done
    if missing:
        raise ValueError(f"no minitensor weights for {sorted(missing)}")


@torch.no_grad()
def torch_greedy(model, src, max_len, bos=1, eos=2, pad=0):
    model.eval()
    memory, mask = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos, dtype=torch.long)
    done = torch.zeros(src.shape[0], dtype=torch.bool)
    for _ in range(max_len):
        nxt = model.decode(ys, memory, mask)[:, -1].argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, pad), nxt)
        ys = torch.cat([ys, nxt[:, None]], 1)
        done |= nxt == eos
        if bool(done.all()):
            break
    model.train()
    return ys[:, 1:].numpy()
