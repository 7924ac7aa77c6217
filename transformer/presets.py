"""Named training set-ups: a dataset and the settings that suit it.

multi30k-cpu   a small model that trains on a 2-core CPU in about half an hour
multi30k-gpu   a larger model for one GPU
wmt14-base     the paper's base model (Table 3): ~25k source + ~25k target tokens per update,
               100k updates, warm-up 4000, average of the last 5 checkpoints, beam 4, alpha 0.6
wmt14-big      the paper's big model: d_model 1024, 16 heads, d_ff 4096, dropout 0.3, 300k updates
"""
from __future__ import annotations

PRESETS: dict[str, dict] = {
    "multi30k-cpu": dict(
        dataset="multi30k", vocab_size=8000,
        settings=dict(d_model=256, n_heads=4, d_ff=512, layers=3, dropout=0.1, max_tokens=2500, update_freq=1,
                      warmup=300, lr_factor=0.3, clip_norm=1.0, max_steps=100_000, max_minutes=28.0, eval_every=500,
                      bleu_sentences=100, save_every=250, keep_last=5, beam_size=4, alpha=0.6),
        average_last=1,  # on val the last checkpoint beat averages of 2 (-0.2) and 3 (-0.4 BLEU): too few, too far apart
    ),
    "multi30k-gpu": dict(
        dataset="multi30k", vocab_size=10000,
        settings=dict(d_model=512, n_heads=8, d_ff=2048, layers=6, dropout=0.2, max_tokens=8192, update_freq=1,
                      warmup=2000, lr_factor=1.0, max_steps=12_000, max_minutes=15.0, eval_every=1000,
                      bleu_sentences=500, save_every=1000, keep_last=5, device="cuda"),
        average_last=5,
    ),
    "wmt14-base": dict(
        dataset="wmt14", vocab_size=37000,
        settings=dict(d_model=512, n_heads=8, d_ff=2048, layers=6, dropout=0.1, max_tokens=6250, update_freq=4,
                      warmup=4000, lr_factor=1.0, max_steps=100_000, eval_every=5000, bleu_sentences=500,
                      save_every=2000, keep_last=5, device="cuda"),
        average_last=5,
    ),
    "wmt14-big": dict(
        dataset="wmt14", vocab_size=37000,
        settings=dict(d_model=1024, n_heads=16, d_ff=4096, layers=6, dropout=0.3, max_tokens=3125, update_freq=8,
                      warmup=4000, lr_factor=1.0, max_steps=300_000, eval_every=10000, bleu_sentences=500,
                      save_every=5000, keep_last=20, device="cuda"),
        average_last=20,
    ),
}
