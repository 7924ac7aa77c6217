"""``train --preset wmt14-base``'s time per update against the base-step benchmark at the same
tokens, and the hours that the paper's 100k updates take at that pace.

1. A WMT-shaped corpus of --pairs pairs is synthesised (:func:`wmt_scale.synthesise`).
2. The command line trains on it as a user runs it, with the preset's own batches (the plan it
   logs at start is kept): ``python -m transformer train --preset wmt14-base --data-dir <corpus>
   --device <device> --max-steps <updates> ...`` plus --train-args. Its time per update is read
   from ``metrics.jsonl`` (the ``seconds`` of consecutive records: collation, logging and all),
   after --warmup updates.
3. ``base_step_vs_torch.py`` times the bare step (forward, loss, backward, Adam) of the same
   model on --batch x --length tokens in the same precision, minitensor alone.

The ratio is (2) over (3). The trainer's batches hold at most --max-tokens padded tokens (25,000
on one large GPU), the base step's 400 x 64 = 25,600, so a ratio of 1 means the trainer loses
nothing to its loop.

    python benchmarks/wmt_update.py --device cuda --precision tf32 --out benchmarks/results/wmt_update_<card>_<date>.json
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from cpu_session import run_script  # noqa: E402
from harness import environment, seconds_per_update, write_results  # noqa: E402
from wmt_scale import synthesise  # noqa: E402

PAPER_UPDATES = 100_000
PRECISION_FLAGS = {"fp32": [], "tf32": ["--tf32", "true"], "fp16": ["--precision", "fp16"],
                   "bf16": ["--precision", "bf16"]}


def trainer_run(folder: Path, run_dir: Path, a) -> dict:
    """Train with the command line; seconds per update after the warm-up, from its metrics."""
    cmd = [sys.executable, "-m", "transformer", "train", "--preset", "wmt14-base", "--data-dir", str(folder),
           "--run-dir", str(run_dir), "--device", a.device, "--max-steps", str(a.updates),
           "--eval-every", str(10**6), "--save-every", str(10**6), "--bleu-sentences", "0", "--no-progress",
           *PRECISION_FLAGS[a.precision], *shlex.split(a.train_args)]
    print("$ " + " ".join(cmd[1:]), file=sys.stderr, flush=True)
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE.parent)
    if out.returncode:
        raise SystemExit(f"the command line failed ({out.returncode}):\n{out.stderr[-4000:]}")
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    timed = a.updates - a.warmup
    per_update = seconds_per_update(run_dir, a.warmup)
    plan = [line for line in out.stderr.splitlines() if line.startswith("batches:")]
    return {"command": " ".join(cmd[1:]), "wall_seconds": round(time.perf_counter() - start, 1),
            "batches": plan[0] if plan else None, "updates_timed": timed,
            "seconds_per_update": round(per_update, 4),
            "peak_memory_mib": max((r["peak_memory_mib"] for r in records if "peak_memory_mib" in r), default=None),
            "first_and_last_loss": [records[0]["loss"], records[-1]["loss"]]}


def step_run(a) -> dict:
    """The base-step benchmark, minitensor alone, in the same precision."""
    args = ["--device", a.device, "--batch", str(a.batch), "--length", str(a.length), "--steps", str(a.steps),
            "--warmup", "3", "--precisions", a.precision, "--no-torch"]
    print("$ base_step_vs_torch.py " + " ".join(args), file=sys.stderr, flush=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE.parent), os.environ.get("PYTHONPATH")]))}
    mine = run_script("base_step_vs_torch.py", args, env)["results"][a.precision]["minitensor"]  # the checkout's packages
    return {"command": "base_step_vs_torch.py " + " ".join(args), "seconds_per_step": round(mine["ms_per_step"] / 1e3, 4),
            "tokens_per_step": a.batch * a.length, "peak_memory_gib": mine.get("peak_memory_gib")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    p.add_argument("--precision", default="tf32", choices=list(PRECISION_FLAGS))
    p.add_argument("--pairs", type=int, default=200_000, help="synthetic training pairs (default 200,000)")
    p.add_argument("--data-dir", default=str(HERE.parent.parent / "shared" / "data" / "multi30k"),
                   help="Multi30k's files, which the synthetic corpus recombines")
    p.add_argument("--updates", type=int, default=40, help="the trainer's updates (default 40)")
    p.add_argument("--warmup", type=int, default=10, help="updates left out of its timing (default 10)")
    p.add_argument("--train-args", default="", help="further `train` flags, e.g. '--max-tokens 6250'")
    p.add_argument("--batch", type=int, default=400, help="the base step's sentences (default 400)")
    p.add_argument("--length", type=int, default=64, help="the base step's tokens per sentence (default 64)")
    p.add_argument("--steps", type=int, default=10, help="the base step's timed steps (default 10)")
    p.add_argument("--work", help="where the corpus and the run go (default: a temporary folder)")
    p.add_argument("--out", help="also write the JSON here")
    a = p.parse_args()
    if not 0 < a.warmup < a.updates:
        p.error("--warmup must lie between 0 and --updates")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(a.work or tmp)
        folder = work / f"corpus_{a.pairs}"
        if not (folder / "manifest.json").exists():
            t = time.perf_counter()
            synthesise(folder, a.pairs, Path(a.data_dir))
            print(f"{a.pairs:,} pairs synthesised in {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)
        trainer = trainer_run(folder, Path(tempfile.mkdtemp(dir=work)) / "run", a)
        print(f"trainer: {trainer['seconds_per_update'] * 1e3:.1f} ms per update ({trainer['batches']})",
              file=sys.stderr, flush=True)
        step = step_run(a)
    ratio = trainer["seconds_per_update"] / step["seconds_per_step"]
    hours = PAPER_UPDATES * trainer["seconds_per_update"] / 3600
    out = {"benchmark": "train --preset wmt14-base per update against the base step at the same tokens",
           "environment": environment(a.device), "precision": a.precision, "pairs": a.pairs,
           "trainer": trainer, "base_step": step, "ratio_trainer_over_step": round(ratio, 3),
           "paper_run_hours": round(hours, 2)}
    print(f"{a.precision}: trainer {trainer['seconds_per_update'] * 1e3:.1f} ms per update, base step "
          f"{step['seconds_per_step'] * 1e3:.1f} ms: {ratio:.3f}x; {PAPER_UPDATES:,} updates: {hours:.2f} h")
    write_results(out, a.out)


if __name__ == "__main__":
    main()
