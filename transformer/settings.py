"""The settings of a training run: :class:`TrainSettings`, one plain dataclass that holds the
model's :class:`~transformer.config.TransformerConfig` and the recipe; each setting's range and
help, and the flag that names it in messages; and what tells two runs apart
(:func:`run_differences`)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import minitensor as mt

from .config import TransformerConfig, check_config
from .decoding import MAX_BEAM
from .flags import Boolean, Choice, Real, Text, Whole
from .presets import DEFAULT_PRESET, PRESETS


class SettingsError(ValueError):
    """A training setting is out of its range; the message names the flag and the range."""



PRECISIONS = {"fp32": None, "fp16": "float16", "bf16": "bfloat16"}


# the flag that sets a TransformerConfig field, where it is not the field's own name: --layers
# sets both stacks' N (Table 3). The command line maps each flag to its setting (cli.py).
MODEL_FIELD_FLAGS = {"n_encoder_layers": "--layers", "n_decoder_layers": "--layers"}


def flag(name: str) -> str:
    """The command-line flag of a setting or of a model field: max_tokens -> --max-tokens,
    d_model -> --d-model, n_encoder_layers -> --layers."""
    return MODEL_FIELD_FLAGS.get(name, "--" + name.replace("_", "-"))


# what a resumed run may change: its budget, its bookkeeping and the hardware it runs on (with
# update_freq, the same batches per update on another number of processes); every other setting
# shapes the weights or the recipe
FREE_ON_RESUME = frozenset({"run_dir", "max_steps", "max_epochs", "max_minutes", "eval_every", "bleu_sentences",
                            "beam_size", "alpha", "save_every", "keep_last", "device", "tf32", "fused", "memory_every",
                            "profile", "progress", "update_freq", "tensorboard", "cuda_graphs"})


# a run's data settings (stored in each checkpoint as meta["data"]): how each is named when it differs
DATA_NAMES = {"preset": "--preset", "dataset": "--dataset", "src_lang": "--src-lang", "tgt_lang": "--tgt-lang",
              "limit": "--limit", "max_words": "--max-words", "max_ratio": "--max-ratio", "vocab_size": "--vocab-size",
              "train_sha256": "the training text's SHA-256"}


def run_differences(a: dict, b: dict, labels: tuple[str, str] = ("in the run", "now")) -> list[str]:
    """One line per difference between two runs' identities, "--flag: A in the run, B now": the
    model, the recipe (every setting but those :data:`FREE_ON_RESUME`), the data settings, the
    vocabulary and the id the run was given at its start. ``a`` and ``b`` are checkpoint
    metadata, or the same keys for settings not yet trained ("settings": ``asdict(TrainSettings)``,
    "data", "vocab_sha256", "run_id"); a key either lacks (a checkpoint written before it was
    recorded) is not compared."""
    lines: dict[str, str] = {}

    def differ(name: str, x, y) -> None:
        if x != y:
            lines.setdefault(name, f"{name}: {_short(x)} {labels[0]}, {_short(y)} {labels[1]}")

    sa, sb = _record(a.get("settings")), _record(b.get("settings"))
    ma, mb = _record(sa.get("model")), _record(sb.get("model"))
    for name in ma.keys() & mb.keys() - {"vocab_size"}:  # the vocabulary is compared as the tokenizer's hash
        differ(flag(name), ma[name], mb[name])
    for name in sa.keys() & sb.keys() - FREE_ON_RESUME - {"model"}:
        differ(flag(name), sa[name], sb[name])
    da, db = _record(a.get("data")), _record(b.get("data"))
    for name in da.keys() & db.keys():
        differ(DATA_NAMES.get(name, name), da[name], db[name])
    if a.get("vocab_sha256") and b.get("vocab_sha256"):
        differ("the vocabulary (spm.model's SHA-256)", a["vocab_sha256"], b["vocab_sha256"])
    if a.get("run_id") and b.get("run_id"):
        differ("the run (its id, from run.json)", a["run_id"], b["run_id"])
    return [lines[k] for k in sorted(lines)]


def _record(value) -> dict:
    """A part of a run's identity as a dict (a part that is missing or altered compares as unknown)."""
    return value if isinstance(value, dict) else {}


def _short(value) -> str:
    """A value as a difference shows it: a hash or an id by its first 12 digits."""
    return f"{value[:12]}..." if isinstance(value, str) and len(value) >= 32 else str(value)


# each training setting's kind and range (the command line parses its flags with these); the
# upper bounds lie far past any real run and keep a mistyped number from failing deep inside
_MANY = 10**9
RANGES = {"max_tokens": Whole(1, 2**31 - 1), "update_freq": Whole(1, 10**6), "smoothing": Real(0, 1, high_open=True),
          "warmup": Whole(1, _MANY), "lr_factor": Real(0, 100, low_open=True), "clip_norm": Real(0, 1e6),
          "cooldown": Real(0, 1), "max_steps": Whole(1, _MANY), "max_epochs": Whole(1, _MANY),
          "max_minutes": Real(0, 1e7), "eval_every": Whole(1, _MANY), "bleu_sentences": Whole(0, _MANY),
          "beam_size": Whole(1, MAX_BEAM), "alpha": Real(0, 100), "save_every": Whole(1, _MANY),
          "keep_last": Whole(1, 10**6), "seed": Whole(0, 2**32 - 1), "device": Text("device"),
          "precision": Choice(tuple(sorted(PRECISIONS))), "tf32": Boolean(), "fused": Boolean(),
          "memory_every": Whole(0, _MANY),
          "profile": Whole(0, 10**6), "progress": Boolean(), "tensorboard": Boolean(), "cuda_graphs": Boolean(),
          "run_dir": Text("folder")}


# each training flag's --help (its kind and range are appended from RANGES); "the preset's" is the
# --preset's value, or TrainSettings' default where the preset sets none
_PRESET = "default: the preset's"
HELP = {
    "d_model": f"the model's width, d_model (Section 3; {_PRESET})",
    "n_heads": f"attention heads, h: d_model must divide by it ({_PRESET})",
    "d_ff": f"the feed-forward sub-layer's inner width, d_ff ({_PRESET})",
    "layers": f"layers in the encoder and, as many, in the decoder, N ({_PRESET})",
    "dropout": f"dropout on each sub-layer's output and on the embeddings, P_drop ({_PRESET})",
    "attention_dropout": f"dropout on the attention weights, not in the paper ({_PRESET}, else 0)",
    "norm_first": f"false: LayerNorm after each residual sum, as in the paper; true: before each sub-layer ({_PRESET})",
    "positional": f"sinusoidal positions (Section 3.5) or learned ones (Table 3, row E) ({_PRESET})",
    "max_tokens": f"padded tokens per batch, of its longer side ({_PRESET})",
    "update_freq": f"batches whose gradients are summed into one update ({_PRESET}, else 1)",
    "smoothing": f"label smoothing, epsilon_ls (Section 5.4; {_PRESET})",
    "warmup": f"the learning rate's warm-up updates, warmup_steps of Equation 3 ({_PRESET})",
    "lr_factor": f"multiplies Equation 3's learning rate ({_PRESET})",
    "clip_norm": f"clip the gradients' global norm to this ({_PRESET}; 0: no clipping)",
    "cooldown": ("the last fraction of the run (of --max-minutes when set, else of --max-steps) over which the "
                 f"learning rate falls linearly to 0 (0: Equation 3 throughout; {_PRESET}, else 0); a run resumed "
                 "with a larger budget follows the new one's line, so its rate rises again"),
    "max_steps": f"stop after this many updates ({_PRESET})",
    "max_epochs": f"stop after this many passes over the training data ({_PRESET})",
    "max_minutes": f"stop (and save) after this many minutes of training ({_PRESET}; 0: no time limit)",
    "eval_every": f"validate (NLL, and BLEU on --bleu-sentences) every N updates ({_PRESET})",
    "bleu_sentences": f"validation sentences translated for BLEU at each validation ({_PRESET}; 0: none)",
    "beam_size": f"the beam of those validation translations (translate and evaluate take --beam; {_PRESET})",
    "alpha": f"the length penalty of those validation translations ({_PRESET})",
    "save_every": f"save a checkpoint every N updates ({_PRESET}); one is saved at the end too",
    "keep_last": f"keep the newest N of the run's checkpoints, deleting older ones ({_PRESET})",
    "seed": f"the random seed of the weights, the batch order and dropout ({_PRESET})",
    "device": f"cpu or cuda (cuda:N) ({_PRESET})",
    "precision": ("fp32; fp16 (16-bit products, float32 weights, dynamic loss scaling); bf16 (bfloat16 products, "
                  f"float32's exponent range, so no loss scaling; needs ml_dtypes) ({_PRESET}, else fp32)"),
    "tf32": f"let float32 products use TF32 tensor cores, GPU only ({_PRESET}, else false)",
    "fused": ("the model's sub-layers in their fused forms: Q, K and V in one product, bias + ReLU and dropout + "
              "residual + LayerNorm each one kernel on a GPU (transformer/fused.py); false: as the paper writes them, "
              "the same values (default true)"),
    "memory_every": f"on the GPU, record the peak memory of every N-th update in metrics.jsonl ({_PRESET}, else 50; "
                    "0: never)",
    "profile": ("time every op of N updates (after the run's first) with minitensor.profile: a table on stderr and "
                "profile.json (default 0: off)"),
    "tensorboard": ("also write the metrics as TensorBoard event files in <run-dir>/tensorboard/ "
                    "(tensorboard --logdir <run-dir>; default false)"),
    "cuda_graphs": ("on a GPU, capture the update of each batch shape into a CUDA graph when the shape comes again, "
                    "and replay it: one launch where the update makes hundreds, the same bits; pays where shapes "
                    "repeat; one process, with --clip-norm 0 and --profile 0 (default false)"),
}


def default_model() -> TransformerConfig:
    """The paper's base shape; its vocab_size is a placeholder the trainer replaces with the tokenizer's."""
    return TransformerConfig(vocab_size=8000, max_len=1024)


@dataclass
class TrainSettings:
    """Everything about a training run except the data (saved beside it as settings.json): the
    model to train, ``model`` (its vocab_size is replaced by the tokenizer's), and the recipe.
    A plain dataclass, checked once when made: a setting out of range raises
    :class:`SettingsError` naming its command-line flag and the range."""

    run_dir: str = "runs/translate"
    model: TransformerConfig = field(default_factory=default_model)
    # optimisation
    max_tokens: int = 4096          # padded tokens per batch (the larger of source/target side)
    update_freq: int = 1            # batches per update (gradient accumulation)
    smoothing: float = 0.1
    warmup: int = 4000
    lr_factor: float = 1.0
    clip_norm: float = 0.0          # 0: no clipping
    cooldown: float = 0.0           # the last fraction of the run over which the rate falls to 0 (0: Equation 3)
    max_steps: int = 100_000
    max_epochs: int = 1000
    max_minutes: float = 0.0        # 0: no time limit; else stop (and save) after this much training
    # validation and checkpoints
    eval_every: int = 1000
    bleu_sentences: int = 200       # validation sentences translated for BLEU (0: none)
    beam_size: int = 4
    alpha: float = 0.6
    save_every: int = 1000
    keep_last: int = 5
    seed: int = 1
    device: str = "cpu"
    precision: str = "fp32"         # fp32, fp16 (with dynamic loss scaling) or bf16: see minitensor.amp
    tf32: bool = False              # float32 matrix products on TF32 tensor cores (GPU only)
    fused: bool = True              # the sub-layers in their fused forms (transformer/fused.py)
    memory_every: int = 50          # on the GPU, record the peak memory of every N-th update (0: never)
    profile: int = 0                # time every op of N updates (after the run's first): a table and profile.json
    progress: bool = True
    tensorboard: bool = False       # the metrics also as TensorBoard event files, in <run_dir>/tensorboard/
    cuda_graphs: bool = False       # replay each batch shape's update from a CUDA graph (transformer/graphed.py)

    def __post_init__(self):
        """Each setting's range is declared once, in :data:`RANGES` (the model checks its own
        fields when it is made: :data:`transformer.config.RANGES`)."""
        if not isinstance(self.model, TransformerConfig):
            raise SettingsError(f"TrainSettings: model must be a TransformerConfig, got {type(self.model).__name__}")
        try:
            for name, kind in RANGES.items():
                kind.check(flag(name), getattr(self, name))
            device = mt.backend.normalize_device(self.device)
        except (ValueError, mt.DeviceError) as e:
            raise SettingsError(f"--device: {e}" if isinstance(e, mt.DeviceError) else str(e)) from None
        if self.tf32 and device != "cuda":
            raise SettingsError("--tf32 is a GPU setting: use it with --device cuda")
        if self.cuda_graphs:
            # what a graph cannot replay: the host's own reads inside an update
            why = ("it is a GPU setting: use it with --device cuda" if device != "cuda" else
                   "--clip-norm reads the gradients' norm on the host inside each update" if self.clip_norm > 0 else
                   "--profile times each op of an update, and a replay runs none of them on the host"
                   if self.profile > 0 else None)
            if why:
                raise SettingsError(f"--cuda-graphs: {why}")

    def model_config(self, vocab_size: int) -> TransformerConfig:
        """``model`` with the tokenizer's vocabulary."""
        return dataclasses.replace(self.model, vocab_size=vocab_size)


def model_with(model: TransformerConfig, **fields) -> TransformerConfig:
    """``model`` with some fields changed, checked first with each field named by its flag
    (:class:`SettingsError`)."""
    values = {**dataclasses.asdict(model), **fields}
    try:
        check_config(values, flag)
    except ValueError as e:
        raise SettingsError(str(e)) from None
    return TransformerConfig(**values)


@dataclass(frozen=True)
class DataSettings:
    """Where a run's parallel text comes from and which pairs it keeps: what
    :func:`transformer.corpus.prepare` reads. ``dataset`` "multi30k" reads Multi30k's files from
    ``data_dir`` (downloaded there when None); "wmt14" reads a folder ``data wmt14`` prepared
    (``data_dir``), or the files ``train_src``/``train_tgt`` (comma-separated lists of files
    allowed), ``valid_src``/``valid_tgt`` and, optionally, ``test_src``/``test_tgt``. Pairs with
    a side longer than ``max_words`` words or a length ratio above ``max_ratio`` are dropped;
    ``limit`` keeps only the first pairs; ``vocab_size`` is the joint BPE vocabulary's."""

    dataset: str = "multi30k"
    data_dir: str | None = None
    src_lang: str = "en"
    tgt_lang: str = "de"
    vocab_size: int = 8000
    limit: int | None = None
    max_words: int = 250
    max_ratio: float = 3.0
    train_src: str | None = None
    train_tgt: str | None = None
    valid_src: str | None = None
    valid_tgt: str | None = None
    test_src: str | None = None
    test_tgt: str | None = None


# a run's data settings beside its preset: kind, default (None: the preset's) and help. The parser
# leaves them None, so that a resumed run keeps its own
DATA_SETTINGS = {
    "preset": (Choice(tuple(sorted(PRESETS))), None,
               f"the data, model and recipe (transformer/presets.py; default {DEFAULT_PRESET}, or a resumed run's own)"),
    "dataset": (Choice(("multi30k", "wmt14")), None, "multi30k (Multi30k task 1) or wmt14 (a folder `data wmt14` "
                                                      "prepared, or --train-src and the other files) (default: the "
                                                      "preset's)"),
    "src_lang": (Text("language code"), "en", "the source side's language code (default en)"),
    "tgt_lang": (Text("language code"), "de", "the target side's language code (default de)"),
    "vocab_size": (Whole(5, 2**20), None, "joint BPE vocabulary: 4 special pieces and at least one more (default: the "
                                          "preset's)"),
    "limit": (Whole(1, 10**12), None, "use only the first N training pairs (for quick trials)"),
    "max_words": (Whole(1, 10**6), 250, "drop training pairs with a longer side (default 250)"),
    "max_ratio": (Real(1, 1e6), 3.0, "drop training pairs with a larger length ratio (default 3)"),
}
