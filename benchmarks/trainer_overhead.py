"""What the trainer adds to an update: ``Trainer.fit`` against a bare loop (forward, the loss,
backward, clipping, the schedule, Adam) on the same model, recipe and batches.

The model and recipe are the ``multi30k-cpu`` preset's, on Multi30k's training text; each
side makes the same first --updates updates of epoch 0 from the same initial weights. The
trainer's time per update is read from its own metrics (the ``seconds`` of consecutive
records: collation, logging and all), after --warmup updates; the bare loop is timed over the
same updates, its batches padded beforehand. Rounds alternate trainer, bare, trainer, ... and
the ratio is that of the medians.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/trainer_overhead.py \\
        --data-dir ../shared/data/multi30k --out benchmarks/results/trainer_overhead_<date>.json
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import minitensor as mt  # noqa: E402
from minitensor import optim  # noqa: E402
from transformer import data  # noqa: E402
from transformer.batching import collate  # noqa: E402
from transformer.loss import batch_loss  # noqa: E402
from transformer.presets import PRESETS  # noqa: E402
from transformer.tokenizer import Tokenizer, encode_cached  # noqa: E402
from transformer.train import ParallelData, Trainer, TrainSettings  # noqa: E402

from harness import environment, write_results  # noqa: E402


def trainer_seconds(settings: TrainSettings, tok, train, warmup: int) -> float:
    """Seconds per update of Trainer.fit, after ``warmup`` updates."""
    t = Trainer(settings, tok, train)
    t.fit()
    stamps = [r["seconds"] for r in t.history]
    return (stamps[-1] - stamps[warmup - 1]) / (len(stamps) - warmup)


def bare_seconds(settings: TrainSettings, tok, train, warmup: int) -> float:
    """Seconds per update of the bare loop over the same batches, after ``warmup`` updates."""
    t = Trainer(settings, tok, train)  # the same initial weights, optimizer, schedule and batches
    model, opt, sched, s = t.model, t.opt, t.sched, t.s
    batches = [collate(train.src, train.tgt, idx) for idx in t.batches.of_epoch(0)[:s.max_steps]]
    model.train()
    for i, b in enumerate(batches):
        if i == warmup:
            start = time.perf_counter()
        loss = batch_loss(model, mt.tensor(b.src), mt.tensor(b.tgt_in), b.tgt_out, t.cfg.pad_id, s.smoothing,
                          reduction="mean")
        opt.zero_grad()
        loss.backward()
        if s.clip_norm > 0:
            optim.clip_grad_norm(opt.params, s.clip_norm)
        sched.step()
        opt.step()
    return (time.perf_counter() - start) / (len(batches) - warmup)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", required=True, help="Multi30k's files (train.en.gz, train.de.gz)")
    ap.add_argument("--updates", type=int, default=40, help="updates per round and side (default 40)")
    ap.add_argument("--warmup", type=int, default=5, help="updates left out at the start of each (default 5)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, each trainer then bare (default 3)")
    ap.add_argument("--out", help="also write the JSON here")
    a = ap.parse_args()
    mt.allocator.from_environment()  # as the programs that train do: freed arrays are reused
    preset = PRESETS["multi30k-cpu"]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        en, de = data.multi30k("train", root=a.data_dir)
        tok = Tokenizer.train(en + de, tmp / "spm", vocab_size=preset["settings"]["model"].vocab_size)
        train = ParallelData(encode_cached(tok, en, tmp / "en.npz"), encode_cached(tok, de, tmp / "de.npz"))

        def settings(name: str) -> TrainSettings:
            return TrainSettings(**{**preset["settings"], "run_dir": str(tmp / name), "max_steps": a.updates,
                                    "max_minutes": 0.0, "eval_every": 10**6, "save_every": 10**6,
                                    "bleu_sentences": 0, "progress": False})

        sides = {"trainer": [], "bare": []}
        for r in range(a.rounds):
            sides["trainer"].append(trainer_seconds(settings(f"trainer{r}"), tok, train, a.warmup))
            sides["bare"].append(bare_seconds(settings(f"bare{r}"), tok, train, a.warmup))
            print(f"round {r + 1}: trainer {sides['trainer'][-1] * 1e3:.1f} ms, bare {sides['bare'][-1] * 1e3:.1f} ms "
                  "per update", file=sys.stderr)
    trainer, bare = (statistics.median(v) for v in sides.values())
    out = {"benchmark": "the trainer's cost per update against a bare loop (multi30k-cpu preset)",
           "environment": environment("cpu"), "updates": a.updates, "warmup": a.warmup,
           "trainer_ms": [round(x * 1e3, 2) for x in sides["trainer"]],
           "bare_ms": [round(x * 1e3, 2) for x in sides["bare"]],
           "ratio": round(trainer / bare, 4)}
    print(f"trainer {trainer * 1e3:.1f} ms against bare {bare * 1e3:.1f} ms per update: {trainer / bare:.3f}x")
    write_results(out, a.out)


if __name__ == "__main__":
    main()
