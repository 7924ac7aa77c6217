"""TransformerConfig: every size and switch of the model in one place, with the paper's presets."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from .flags import Boolean, Choice, Real, Whole

POSITIONAL = ("sinusoidal", "learned")  # Section 3.5's encoding, or learned embeddings (Table 3, row E)
_PROBABILITY = Real(0, 1, high_open=True)  # 1 would drop everything: attention must keep something to renormalise
# each field's kind and range; the upper bounds lie far past any model one machine can hold,
# and keep a mistyped size from failing deep inside NumPy
RANGES = {"vocab_size": Whole(1, 2**22), "d_model": Whole(1, 2**16), "n_heads": Whole(1, 2**10),
          "d_ff": Whole(1, 2**18), "n_encoder_layers": Whole(1, 1024), "n_decoder_layers": Whole(1, 1024),
          "max_len": Whole(1, 2**20), "dropout": _PROBABILITY, "attention_dropout": _PROBABILITY,
          "positional": Choice(POSITIONAL), "norm_first": Boolean(), "share_embeddings": Boolean(),
          "layer_norm_eps": Real(0, 1, low_open=True)}


def check_heads(d_model: int, n_heads: int, name=str) -> None:
    """Raise ValueError unless the d_model columns split evenly into n_heads heads of d_k."""
    if d_model % n_heads:
        raise ValueError(f"{name('d_model')} ({d_model}) must be divisible by {name('n_heads')} ({n_heads})")


def check_config(values: dict, name=str) -> None:
    """Raise ValueError for the first of a config's ``values`` (field -> value) out of range.

    Every model setting is checked here; ``name`` turns a field's name into the one the
    message shows (the trainer passes its command-line flags).
    """
    for field, kind in RANGES.items():
        kind.check(name(field), values[field])
    if values["tgt_vocab_size"] is not None:
        RANGES["vocab_size"].check(name("tgt_vocab_size"), values["tgt_vocab_size"])
    check_heads(values["d_model"], values["n_heads"], name)
    if values["tgt_vocab_size"] is not None and values["share_embeddings"]:
        raise ValueError("a separate tgt_vocab_size needs share_embeddings=False")
    vocab = min(values["vocab_size"], values["tgt_vocab_size"] or values["vocab_size"])
    for field in ("pad_id", "bos_id", "eos_id"):
        if not 0 <= values[field] < vocab:
            raise ValueError(f"{field}={values[field]} is outside the vocabulary")


@dataclass
class TransformerConfig:
    """Hyper-parameters of the encoder-decoder Transformer (paper defaults: Table 3, "base").

    vocab_size: the (joint) vocabulary; with ``share_embeddings`` (Section 3.4) the source
        embedding, target embedding and pre-softmax projection are one matrix.
    tgt_vocab_size: a separate target vocabulary (then ``share_embeddings`` must be False;
        the target embedding is still tied to the pre-softmax projection).
    positional: "sinusoidal" (Section 3.5) or "learned" (Table 3, row E).
    norm_first: False = post-norm, LayerNorm(x + Sublayer(x)) as in the paper; True = pre-norm,
        x + Sublayer(LayerNorm(x)) with a final LayerNorm after each stack.
    dropout: residual and embedding dropout P_drop (Section 5.4); attention_dropout: dropout on
        the attention weights (not in the paper; off by default).
    """

    vocab_size: int
    d_model: int = 512
    n_heads: int = 8
    d_ff: int = 2048
    n_encoder_layers: int = 6
    n_decoder_layers: int = 6
    dropout: float = 0.1
    attention_dropout: float = 0.0
    max_len: int = 1024
    positional: str = "sinusoidal"
    norm_first: bool = False
    share_embeddings: bool = True
    tgt_vocab_size: int | None = None
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    layer_norm_eps: float = 1e-5

    def __post_init__(self):
        check_config(dataclasses.asdict(self))

    @property
    def target_vocab_size(self) -> int:
        return self.tgt_vocab_size if self.tgt_vocab_size is not None else self.vocab_size

    @property
    def d_k(self) -> int:
        return self.d_model // self.n_heads

    def num_parameters(self) -> int:
        """The number of trained weights of :class:`transformer.Transformer` with this config.

        Per encoder layer: 4 attention projections (d²+d each), the FFN (2·d·d_ff + d_ff + d)
        and 2 LayerNorms (2d each); a decoder layer has 2 attentions and 3 LayerNorms; the
        shared embedding is V·d (counted once); learned positions add max_len·d per side.
        """
        d, f = self.d_model, self.d_ff
        attention = 4 * (d * d + d)
        ffn = 2 * d * f + f + d
        norm = 2 * d
        total = self.n_encoder_layers * (attention + ffn + 2 * norm)
        total += self.n_decoder_layers * (2 * attention + ffn + 3 * norm)
        if self.norm_first:
            total += 2 * norm  # the final LayerNorm of each stack
        total += self.target_vocab_size * d + (0 if self.share_embeddings else self.vocab_size * d)
        if self.positional == "learned":
            total += 2 * self.max_len * d
        return total

    # ------------------------------------------------------------------ presets
    @classmethod
    def base(cls, vocab_size: int, **overrides) -> "TransformerConfig":
        """Transformer (base), Table 3: N=6, d_model=512, d_ff=2048, h=8, P_drop=0.1.

        ``TransformerConfig.base(37000).num_parameters()`` is 63,082,496 (63.1M): 44.1M in
        the 12 layers and 18.9M in the one shared 37000 x 512 embedding. Table 3 lists 65M.
        The paper does not itemise its count; the 1.9M (3%) gap is about what 3,800 more
        vocabulary entries would add (each costs 512 weights), and the real size of the
        paper's "about 37000" BPE vocabulary is not given, so we do not pad the model to
        match. Nothing in the architecture of Section 3 is left out here.
        """
        return cls(vocab_size, **overrides)

    @classmethod
    def big(cls, vocab_size: int, **overrides) -> "TransformerConfig":
        """Transformer (big), Table 3: N=6, d_model=1024, d_ff=4096, h=16, P_drop=0.3 (0.1 for EN-FR)."""
        kw = dict(d_model=1024, n_heads=16, d_ff=4096, dropout=0.3)
        kw.update(overrides)
        return cls(vocab_size, **kw)

    @classmethod
    def tiny(cls, vocab_size: int, **overrides) -> "TransformerConfig":
        """A laptop-sized model for toy tasks and tests: 2+2 layers, d_model=64, 4 heads."""
        kw = dict(d_model=64, n_heads=4, d_ff=256, n_encoder_layers=2, n_decoder_layers=2, dropout=0.1, max_len=256)
        kw.update(overrides)
        return cls(vocab_size, **kw)

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict) -> "TransformerConfig":
        return from_dict(cls, d)


def from_dict(cls, d: dict):
    """Build the dataclass ``cls`` from a dict (e.g. read from JSON), naming any unknown keys."""
    unknown = set(d) - {f.name for f in dataclasses.fields(cls)}
    if unknown:
        raise ValueError(f"unknown {cls.__name__} fields: {sorted(unknown)}")
    return cls(**d)
