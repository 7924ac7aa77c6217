"""Named training set-ups: a dataset and the settings that suit it (the model's vocab_size is
the size of the BPE vocabulary the run trains, unless --vocab-size says otherwise).

multi30k-cpu   a small model that trains on a 2-core CPU in about half an hour
multi30k-gpu   a larger model for one GPU
wmt14-base     the paper's base model (Table 3): ~25k source + ~25k target tokens per update,
               100k updates, warm-up 4000, average of the last 5 checkpoints, beam 4, alpha 0.6
wmt14-big      the paper's big model: d_model 1024, 16 heads, d_ff 4096, dropout 0.3, 300k updates

Batches of the WMT presets. They give an update the paper's ~25k tokens (Section 5.1), as
``tokens_per_update``, and :func:`plan_batches` cuts them for the hardware at the start of a
run: on N devices 25k / N each, in one batch per device where its memory holds one (by
:func:`training_bytes`' estimate), else in as few equal batches as fit, summed into one update
(``update_freq``). A batch that fits is never split. ``--max-tokens`` and ``--update-freq``
override the plan (either alone keeps the 25k).

Checkpoint cadence of the WMT presets (``save_every``). Section 6.1 averages the last 5 (base)
or 20 (big) checkpoints "written at 10-minute intervals", and Section 5.2 gives the step
times on 8 P100s: about 0.4 s (base) and 1.0 s (big). Ten minutes are therefore about
600 / 0.4 = 1500 updates for base and 600 / 1.0 = 600 updates for big, and the averages span
the last 7,500 and 12,000 updates of 100k and 300k. ``save_every`` is set in updates, not in
minutes, so that the averaged window is the paper's whatever the hardware: on a slower
machine the same updates simply take longer (a cadence in minutes would average over fewer
updates there, and over more on a faster one).
"""
from __future__ import annotations

import math

from .config import TransformerConfig

# Section 5.2: seconds per training step of the paper's models on 8 P100 GPUs
PAPER_STEP_SECONDS = {"base": 0.4, "big": 1.0}
CHECKPOINT_MINUTES = 10  # Section 6.1: checkpoints written at 10-minute intervals


def paper_cadence(model: str) -> int:
    """Updates between two of the paper's checkpoints: 10 minutes at the paper's step time."""
    return round(60 * CHECKPOINT_MINUTES / PAPER_STEP_SECONDS[model])


def vocab_size(preset: str) -> int:
    """The BPE vocabulary a preset trains: its model's."""
    return PRESETS[preset]["settings"]["model"].vocab_size

PRESETS: dict[str, dict] = {
    "multi30k-cpu": dict(
        dataset="multi30k",
        # chosen on validation (docs/performance.md, "Toward 38"): batches of 1250 tokens, lr_factor 0.6
        # and the learning rate falling linearly to 0 over the last 30% of the 28 minutes
        settings=dict(model=TransformerConfig(8000, d_model=256, n_heads=4, d_ff=512, n_encoder_layers=3,
                                             n_decoder_layers=3, dropout=0.1),
                      max_tokens=1250, update_freq=1,
                      warmup=600, lr_factor=0.6, cooldown=0.3, clip_norm=1.0, max_steps=100_000, max_minutes=28.0,
                      eval_every=1000, bleu_sentences=100, save_every=500, keep_last=5, beam_size=4, alpha=0.6),
        # on val the average of the last 3 checkpoints (500 updates apart, inside the cool-down on a
        # machine that makes 2000 or more updates) beat the last alone by 0.47 BLEU; 4 and 5 were no better
        average_last=3,
    ),
    "multi30k-gpu": dict(
        dataset="multi30k",
        settings=dict(model=TransformerConfig(10000, dropout=0.2), max_tokens=8192, update_freq=1,
                      warmup=2000, lr_factor=1.0, max_steps=12_000, max_minutes=15.0, eval_every=1000,
                      bleu_sentences=500, save_every=1000, keep_last=5, device="cuda"),
        average_last=5,
    ),
    "wmt14-base": dict(
        dataset="wmt14",
        tokens_per_update=25_000,
        settings=dict(model=TransformerConfig.base(37000),
                      warmup=4000, lr_factor=1.0, max_steps=100_000, eval_every=5000, bleu_sentences=500,
                      save_every=paper_cadence("base"), keep_last=5, device="cuda"),
        average_last=5,
    ),
    "wmt14-big": dict(
        dataset="wmt14",
        tokens_per_update=25_000,
        settings=dict(model=TransformerConfig.big(37000),
                      warmup=4000, lr_factor=1.0, max_steps=300_000, eval_every=10000, bleu_sentences=500,
                      save_every=paper_cadence("big"), keep_last=20, device="cuda"),
        average_last=20,
    ),
}


# the share of a device's memory a plan may fill (the rest: the allocator's slack, the library's own)
MEMORY_SHARE = 0.8
# the key length an estimate assumes for the attention weights a layer keeps (longer runs use the
# flash kernel, which keeps none)
ESTIMATE_KEYS = 128


def training_bytes(cfg: TransformerConfig, tokens: int) -> int:
    """An upper estimate of the memory one training batch of ``tokens`` padded tokens a side
    takes, in float32: the weights, gradients and Adam's two moments (4 copies), and what the
    backward keeps per token: per encoder layer about 12·d + 2·d_ff numbers (the inputs of its
    products, Q, K and V, the norms' inputs and outputs, the dropout masks) and h·T attention
    weights; per decoder layer 20·d + 2·d_ff and 2·h·T; and the V logits of each target token."""
    d, f, h, t = cfg.d_model, cfg.d_ff, cfg.n_heads, ESTIMATE_KEYS
    per_token = (cfg.n_encoder_layers * (12 * d + 2 * f + h * t) + cfg.n_decoder_layers * (20 * d + 2 * f + 2 * h * t)
                 + cfg.vocab_size + d)
    return 4 * (4 * cfg.num_parameters() + per_token * tokens)


def plan_batches(tokens_per_update: int, world_size: int, memory: int | None, cfg: TransformerConfig,
                 max_tokens: int | None = None, update_freq: int | None = None) -> tuple[int, int, str]:
    """``(max_tokens, update_freq, why)`` for updates of ``tokens_per_update`` tokens over
    ``world_size`` devices of ``memory`` bytes each: each device takes its share in the fewest
    equal batches whose :func:`training_bytes` fit in :data:`MEMORY_SHARE` of its memory (one
    where one fits; memory None: unknown, one). A ``max_tokens`` or ``update_freq`` given stands,
    and the other is made to keep the tokens per update."""
    share = math.ceil(tokens_per_update / world_size)
    where = f"{tokens_per_update:,} tokens per update over {world_size} device(s)"
    if max_tokens is not None or update_freq is not None:
        update_freq = update_freq or math.ceil(share / max_tokens)
        max_tokens = max_tokens or math.ceil(share / update_freq)
        return max_tokens, update_freq, f"{where}: --max-tokens/--update-freq as given"
    if memory is None:
        return share, 1, f"{where}: one batch of {share:,} each (the device's memory is unknown)"
    budget = MEMORY_SHARE * memory
    splits = 1
    while training_bytes(cfg, math.ceil(share / splits)) > budget and math.ceil(share / splits) > 1:
        splits += 1
    batch = math.ceil(share / splits)
    need = training_bytes(cfg, batch) / 2**30
    what = (f"one batch of {batch:,} each" if splits == 1 else
            f"{splits} batches of {batch:,} each, summed ({share:,} at once would need "
            f"~{training_bytes(cfg, share) / 2**30:.1f} GiB)")
    return batch, splits, f"{where}: {what}, ~{need:.1f} GiB of the device's {memory / 2**30:.1f} GiB (estimated)"


DEFAULT_PRESET = "multi30k-cpu"
