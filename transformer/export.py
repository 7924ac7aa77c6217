"""A model's weights for other tools: the safetensors format, and the same model in PyTorch.

**safetensors** (the format the field shares weights in; read by the ``safetensors`` library,
PyTorch, JAX, Hugging Face tools): an 8-byte little-endian length N, N bytes of JSON naming each
array's dtype, shape and byte range (``data_offsets``, from the end of the header) plus string
``__metadata__``, then the arrays' bytes, C order, little-endian, one after the other.
:func:`write_safetensors` writes that whole or not at all (:class:`transformer.files.Output`),
with a SHA-256 of the arrays in the metadata (the format has no check of its own);
:func:`read_safetensors` reads it back and refuses a file whose header and bytes disagree, or
whose arrays are not those the hash was made of (a file altered at the same size).

Two layouts of the names (``python -m transformer export --layout``):

- ``minitensor``: this project's own parameter names and shapes (a linear layer's weight is
  (in, out), the paper's x W + b); the model's configuration rides in the metadata, so
  :func:`model_from_safetensors` rebuilds the model from the file alone.
- ``torch``: the names and shapes of :func:`torch_transformer`, a PyTorch module built from
  ``torch.nn.TransformerEncoderLayer`` / ``TransformerDecoderLayer`` (whose attention holds
  W^Q, W^K, W^V as one ``in_proj_weight``, and whose linear weights are (out, in)), with the
  embedding, positions and tied output projection of the paper around them, so that
  ``module.load_state_dict(safetensors.torch.load_file(path))`` loads it. Its logits equal this
  model's (``tests/transformer/test_export.py``).

PyTorch is never a dependency: :func:`torch_transformer` imports it when called.
"""
from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import numpy as np

from .checkpoint import arrays_sha256
from .config import TransformerConfig
from .files import Output

# safetensors' dtype names
DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
          "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
_NAMES = {np.dtype(v): k for k, v in DTYPES.items()}
LAYOUTS = ("minitensor", "torch")
MAX_HEADER = 100 << 20  # a header past this is not a header (the safetensors library's own bound)


class SafetensorsError(ValueError):
    """A file that is not safetensors, or whose header does not describe its bytes."""


def write_safetensors(path: str | Path, arrays: dict, metadata: dict | None = None, flag: str = "--out") -> Path:
    """Write ``arrays`` ({name: array}) and ``metadata`` ({str: str}) to ``path`` as safetensors,
    whole or not at all, the arrays' hash (:func:`transformer.checkpoint.arrays_sha256`) added to
    the metadata as ``sha256``. bfloat16 arrays are written as "BF16"."""
    arrays = {name: np.asarray(a, order="C") for name, a in arrays.items()}  # (ascontiguousarray makes 0-d 1-d)
    metadata = {**(metadata or {}), "sha256": arrays_sha256(arrays)}
    header, offset, parts = {}, 0, []
    for name, a in arrays.items():
        dtype = "BF16" if a.dtype.name == "bfloat16" else _NAMES.get(a.dtype)
        if dtype is None:
            raise ValueError(f"{name}: safetensors has no type for {a.dtype}")
        data = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(data)]}
        parts.append(data)
        offset += len(data)
    header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the arrays start on an 8-byte boundary
    with Output(path, binary=True, flag=flag) as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for data in parts:
            f.write(data)
    return Path(path)


def read_safetensors(path: str | Path) -> tuple[dict, dict]:
    """({name: array}, metadata) of a safetensors file; :class:`SafetensorsError` naming the file
    when it is not one, or when its header and its bytes disagree (truncated, overlapping or
    gapped ranges, a shape that does not fit its range), or when the arrays differ from the
    ``sha256`` in its metadata (files of other tools carry none, and are read unchecked)."""
    raw = Path(path).read_bytes()
    if len(raw) < 8:
        raise SafetensorsError(f"{path}: not a safetensors file (only {len(raw)} bytes)")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > min(MAX_HEADER, len(raw) - 8):
        raise SafetensorsError(f"{path}: not a safetensors file (a header of {n} bytes in a file of {len(raw)})")
    try:
        header = json.loads(raw[8:8 + n])
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{path}: not a safetensors file (its header is not JSON: {e})") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: not a safetensors file (its header is not a JSON object)")
    metadata = header.pop("__metadata__", None) or {}
    body, arrays, end = memoryview(raw)[8 + n:], {}, 0
    try:
        for name, entry in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
            begin, stop = entry["data_offsets"]
            dtype = _dtype(entry["dtype"])
            shape = tuple(int(s) for s in entry["shape"])
            if begin != end or stop < begin or stop - begin != math.prod(shape) * dtype.itemsize:
                raise SafetensorsError(f"{path}: {name}'s bytes [{begin}, {stop}) do not follow the array before "
                                       f"it (which ends at {end}) or do not hold its shape {list(shape)}")
            arrays[name] = np.frombuffer(body[begin:stop], dtype=dtype).reshape(shape).astype(dtype.newbyteorder("="))
            end = stop
    except (KeyError, TypeError, ValueError) as e:
        if isinstance(e, SafetensorsError):
            raise
        raise SafetensorsError(f"{path}: its header does not describe arrays ({type(e).__name__}: {e})") from None
    if end != len(body):
        raise SafetensorsError(f"{path}: {len(body)} bytes of arrays where its header describes {end}")
    if "sha256" in metadata and arrays_sha256(arrays) != metadata["sha256"]:
        raise SafetensorsError(f"{path} is damaged: its arrays do not match the hash written with them")
    return arrays, metadata


def _dtype(name: str) -> np.dtype:
    if name == "BF16":
        import ml_dtypes  # noqa: PLC0415 (an optional package: only bfloat16 files need it)
        return np.dtype(ml_dtypes.bfloat16).newbyteorder("<")
    if name not in DTYPES:
        raise SafetensorsError(f"unknown safetensors dtype {name!r}")
    return np.dtype(DTYPES[name]).newbyteorder("<")


# ---------------------------------------------------------------------------- this model's weights
def weights_of(model) -> dict:
    """{name: array} of a Transformer's parameters and persistent buffers, a shared weight under
    its first name only (safetensors keeps each array once)."""
    out, seen = {}, set()
    for name, t in model.state_dict().items():
        if id(t.data) not in seen:
            out[name] = t.numpy()
            seen.add(id(t.data))
    return out


def metadata_of(cfg: TransformerConfig, layout: str, meta: dict | None = None) -> dict:
    """The strings a file carries beside its arrays: what wrote it, the layout, the model's
    configuration (JSON), and where the weights came from."""
    meta = meta or {}
    out = {"format": "minitensor-transformer", "layout": layout, "config": json.dumps(cfg.to_dict())}
    for key in ("kind", "step", "vocab_sha256", "averaged"):
        if meta.get(key) is not None:
            out[key] = json.dumps(meta[key])
    return out


def export(model, path: str | Path, layout: str = "minitensor", meta: dict | None = None,
           flag: str = "--out") -> Path:
    """Write ``model``'s weights to ``path`` as safetensors in ``layout`` (:data:`LAYOUTS`)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    weights = weights_of(model)
    if layout == "torch":
        weights = torch_state_dict(weights, model.cfg)
    return write_safetensors(path, weights, metadata_of(model.cfg, layout, meta), flag=flag)


def model_from_safetensors(path: str | Path):
    """The Transformer a ``minitensor``-layout file holds, rebuilt from its metadata."""
    from .model import Transformer  # noqa: PLC0415

    arrays, metadata = read_safetensors(path)
    if metadata.get("layout") != "minitensor" or "config" not in metadata:
        raise SafetensorsError(f"{path}: not a minitensor-layout export of this tool (layout "
                               f"{metadata.get('layout')!r}); export with --layout minitensor")
    model = Transformer(TransformerConfig.from_dict(json.loads(metadata["config"])))
    model.load_state_dict(arrays)
    return model


# ---------------------------------------------------------------------------- the same model in PyTorch
def torch_state_dict(weights: dict, cfg: TransformerConfig) -> dict:
    """This model's weights ({name: array}, as :func:`weights_of`) under the names and shapes of
    :func:`torch_transformer`: each linear weight transposed to (out, in), the three projections
    of each attention stacked into ``in_proj_weight`` [W^Q; W^K; W^V] (3 d_model, d_model)."""
    out = {"tgt_embed.weight": weights["tgt_embed.weight"]}
    if not cfg.share_embeddings:
        out["src_embed.weight"] = weights["src_embed.weight"]
    if cfg.positional == "learned":
        out["src_pos"], out["tgt_pos"] = weights["src_pos.table"], weights["tgt_pos.table"]

    def linear(ours: str, theirs: str) -> None:
        out[f"{theirs}.weight"] = np.ascontiguousarray(weights[f"{ours}.weight"].T)
        out[f"{theirs}.bias"] = weights[f"{ours}.bias"]

    def attention(ours: str, theirs: str) -> None:
        out[f"{theirs}.in_proj_weight"] = np.concatenate([weights[f"{ours}.w_{p}.weight"].T for p in "qkv"])
        out[f"{theirs}.in_proj_bias"] = np.concatenate([weights[f"{ours}.w_{p}.bias"] for p in "qkv"])
        linear(f"{ours}.w_o", f"{theirs}.out_proj")

    def norm(ours: str, theirs: str) -> None:
        out[f"{theirs}.weight"], out[f"{theirs}.bias"] = weights[f"{ours}.weight"], weights[f"{ours}.bias"]

    for stack, n in (("encoder", cfg.n_encoder_layers), ("decoder", cfg.n_decoder_layers)):
        for i in range(n):
            ours = theirs = f"{stack}.layers.{i}"
            attention(f"{ours}.self_attn", f"{theirs}.self_attn")
            if stack == "decoder":
                attention(f"{ours}.cross_attn", f"{theirs}.multihead_attn")
            linear(f"{ours}.ffn.w_1", f"{theirs}.linear1")
            linear(f"{ours}.ffn.w_2", f"{theirs}.linear2")
            for k in range(1, 4 if stack == "decoder" else 3):
                norm(f"{ours}.sub{k}.norm", f"{theirs}.norm{k}")
        if cfg.norm_first:
            norm(f"{stack}.norm", f"{stack}.norm")
    return out


def torch_transformer(cfg: TransformerConfig, weights: dict | None = None):
    """This Transformer as a PyTorch module, in evaluation mode: ``torch.nn.TransformerEncoder``
    and ``TransformerDecoder`` of ``TransformerEncoderLayer`` / ``TransformerDecoderLayer``
    (``batch_first``, post-norm or pre-norm as ``cfg``), between the scaled shared embedding
    with its positions and the tied output projection. ``module(src, tgt_in)`` takes token ids
    (B, T) and gives logits (B, T_tgt, V), pad positions masked as here. ``weights``: this
    model's ({name: array}), loaded through :func:`torch_state_dict`."""
    import torch  # noqa: PLC0415 (never a dependency of the project)
    from torch import nn  # noqa: PLC0415

    d, eps = cfg.d_model, cfg.layer_norm_eps

    class PaperTransformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.tgt_embed = nn.Embedding(cfg.target_vocab_size, d)
            # shared: one matrix, under one name (no alias in the state dict)
            self.src_embed = None if cfg.share_embeddings else nn.Embedding(cfg.vocab_size, d)
            if cfg.positional == "learned":
                self.src_pos = nn.Parameter(torch.zeros(cfg.max_len, d))
                self.tgt_pos = nn.Parameter(torch.zeros(cfg.max_len, d))
            else:
                from .embedding import sinusoidal_table  # noqa: PLC0415
                table = torch.from_numpy(sinusoidal_table(cfg.max_len, d))
                self.register_buffer("src_pos", table, persistent=False)
                self.register_buffer("tgt_pos", table, persistent=False)
            common = dict(d_model=d, nhead=cfg.n_heads, dim_feedforward=cfg.d_ff, dropout=0.0, batch_first=True,
                          norm_first=cfg.norm_first, layer_norm_eps=eps)
            self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(**common), cfg.n_encoder_layers,
                                                 norm=nn.LayerNorm(d, eps) if cfg.norm_first else None,
                                                 enable_nested_tensor=False)
            self.decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(**common), cfg.n_decoder_layers,
                                                 norm=nn.LayerNorm(d, eps) if cfg.norm_first else None)

        def forward(self, src, tgt_in):
            scale = math.sqrt(d)
            src_pad, tgt_pad = src == cfg.pad_id, tgt_in == cfg.pad_id  # True: a key no query may see
            T = tgt_in.shape[1]
            later = torch.triu(torch.ones(T, T, dtype=torch.bool, device=tgt_in.device), diagonal=1)
            src_embed = self.tgt_embed if self.src_embed is None else self.src_embed
            memory = self.encoder(src_embed(src) * scale + self.src_pos[:src.shape[1]],
                                  src_key_padding_mask=src_pad)
            h = self.decoder(self.tgt_embed(tgt_in) * scale + self.tgt_pos[:T], memory, tgt_mask=later,
                             tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad)
            return h @ self.tgt_embed.weight.T  # the tied pre-softmax projection h E^T

    module = PaperTransformer()
    if weights is not None:
        module.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v))
                                for k, v in torch_state_dict(weights, cfg).items()})
    return module.eval()
