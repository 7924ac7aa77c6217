"""The capstone: the copy task trained on the learner's own engine and model.

``python lessons/check.py capstone`` runs :func:`run` on the learner's track
(``lessons/exercises/``): exercise 14's Transformer, 04's loss, 05's Adam, 16's schedule and
15's greedy decoding, with the recipe and target of ``examples/copy_task.py``
(``transformer.copytask.CopyTaskSettings``: the same model size, batches, schedule, validation
set and exact-match target), in float32. The data (random sequences, ``make_batch``) and the
scoring (``score``) are the package's, so that both engines face the same task. It then times
minitensor's own update on the first batches, and prints the two times per update side by side.
``benchmarks/capstone_vs_minitensor.py`` times the two in alternating rounds.
"""
from __future__ import annotations

import time

import numpy as np

from transformer.copytask import BOS, EOS, PAD, CopyTaskSettings, make_batch, score

from . import track

NEEDS = ("01", "02", "04", "05", "14", "15", "16")


def learner_update(t: dict, s: CopyTaskSettings):
    """(model, update): the learner's model of exercise 14 and one update of it on a batch
    (forward, 04's loss, backward, 16's schedule, 05's Adam), returning the loss."""
    missing = [n for n in NEEDS if n not in t]
    if missing:
        raise FileNotFoundError(f"the capstone needs exercises {', '.join(missing)}")
    cfg = s.model
    model = t["14"].Transformer(s.vocab, d_model=cfg.d_model, h=cfg.n_heads, d_ff=cfg.d_ff,
                                n_layers=cfg.n_encoder_layers, p_drop=cfg.dropout, max_len=s.max_length + 2,
                                pad=PAD, seed=s.seed).astype(np.float32)
    opt = t["05"].Adam(model.parameters(), lr=0.0, betas=(0.9, 0.98), eps=1e-9)
    sched = t["16"].Noam(opt, cfg.d_model, s.warmup, s.lr_factor)

    def update(batch) -> float:
        src, tgt_in, tgt_out = batch
        loss = t["04"].cross_entropy(model(src, tgt_in), tgt_out, s.smoothing, PAD)
        opt.zero_grad()
        loss.backward()
        sched.step()
        opt.step()
        return loss.item()
    return model, update


def minitensor_update(s: CopyTaskSettings):
    """(model, update): ``examples/copy_task.py``'s model and update on minitensor."""
    import minitensor as mt
    from transformer.copytask import build_model
    from transformer.loss import label_smoothed_loss
    from transformer.schedule import NoamSchedule, paper_adam

    mt.manual_seed(s.seed)
    model = build_model(s)
    opt = paper_adam(model.parameters())
    sched = NoamSchedule(opt, s.model.d_model, s.warmup, s.lr_factor)

    def update(batch) -> float:
        src, tgt_in, tgt_out = batch
        loss = label_smoothed_loss(model(mt.tensor(src), mt.tensor(tgt_in)), mt.tensor(tgt_out), PAD, s.smoothing)
        opt.zero_grad()
        loss.backward()
        sched.step()
        opt.step()
        return loss.item()
    return model, update


def seconds_per_update(update, batches: list) -> float:
    """The median wall time of ``update`` over ``batches``."""
    times = []
    for batch in batches:
        t0 = time.perf_counter()
        update(batch)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def run(directory=track.LEARNER, settings: CopyTaskSettings | None = None, say=print, compare: bool = True) -> dict:
    """Train the copy task on the track in ``directory``; return a summary (exact match on
    validation and on fresh test sequences, updates, seconds per update of both engines)."""
    s = settings or CopyTaskSettings()
    t = track.load_all(directory)
    model, update = learner_update(t, s)
    rng = np.random.default_rng(s.seed)
    val = make_batch(np.random.default_rng(s.seed + 1), s.eval_size, s)

    def evaluate(data):
        src, _, tgt_out = data
        model.eval()
        pred = t["15"].greedy_decode(model, src, tgt_out.shape[1], BOS, EOS, PAD)
        model.train()
        return score(np.asarray(pred), tgt_out)

    cfg = s.model
    say(f"the copy task on your engine: {cfg.n_encoder_layers}+{cfg.n_decoder_layers} layers, d_model {cfg.d_model}, "
        f"batches of {s.batch}, at most {s.steps} updates, target {s.stop_at:.0%} exact match on {s.eval_size} "
        "validation sequences")
    seconds, exact, step, first = [], 0.0, 0, []
    for step in range(1, s.steps + 1):
        batch = make_batch(rng, s.batch, s)
        if len(first) < 20:
            first.append(batch)
        t0 = time.perf_counter()
        value = update(batch)
        seconds.append(time.perf_counter() - t0)
        if not np.isfinite(value):
            raise FloatingPointError(f"the loss became {value} at update {step}")
        if step % s.eval_every == 0 or step == s.steps:
            exact, tokens = evaluate(val)
            say(f"update {step:5d}  loss {value:.4f}  validation exact match {exact:.1%}  "
                f"token accuracy {tokens:.1%}  ({np.median(seconds) * 1e3:.0f} ms per update)")
            if s.stop_at is not None and exact >= s.stop_at:
                break
    test_exact, test_tokens = evaluate(make_batch(np.random.default_rng(s.seed + 12345), s.test_size, s))
    summary = {"updates": step, "val_exact_match": exact, "test_exact_match": test_exact,
               "test_token_accuracy": test_tokens, "reached": s.stop_at is None or exact >= s.stop_at,
               "seconds_per_update": float(np.median(seconds))}
    say(f"{'reached' if summary['reached'] else 'did not reach'} the target after {step} updates; "
        f"fresh test sequences: {test_exact:.1%} exact match, {test_tokens:.1%} of tokens")
    if compare:
        summary["minitensor_seconds_per_update"] = seconds_per_update(minitensor_update(s)[1], first)
        ratio = summary["seconds_per_update"] / summary["minitensor_seconds_per_update"]
        say(f"time per update (median): your engine {summary['seconds_per_update'] * 1e3:.1f} ms, "
            f"minitensor {summary['minitensor_seconds_per_update'] * 1e3:.1f} ms "
            f"on the same first {len(first)} batches: "
            f"{ratio:.2f}x minitensor's")
    return summary
