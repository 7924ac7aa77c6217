"""Updates per minute of the multi30k-cpu preset, for several checkouts in one sitting.

Each run is the real command, ``python -m transformer train --preset multi30k-cpu``, cut at
--minutes of training (the tokenizer and data preparation are not counted: the figure is
the run summary's steps / train_seconds). Runs alternate between the checkouts (A B A B ...)
so a drift in the machine's speed falls on both alike; each BLAS setting of
``minitensor.blas`` is its own process.

    python benchmarks/updates_per_minute.py --checkout before=/tmp/before --checkout after=. \\
        --data-dir ../shared/data/multi30k --minutes 3 --repeats 2 --out benchmarks/results/m30k_upm.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def one_run(checkout: Path, data_dir: str, minutes: float, env: dict) -> dict:
    with tempfile.TemporaryDirectory() as run_dir:
        cmd = [sys.executable, "-m", "transformer", "train", "--preset", "multi30k-cpu", "--run-dir", run_dir,
               "--data-dir", data_dir, "--max-minutes", str(minutes), "--no-progress"]
        out = subprocess.run(cmd, cwd=checkout, env={**env, "PYTHONPATH": str(checkout)}, capture_output=True,
                             text=True, check=True).stdout
        summary = json.loads(out[out.index("{"):])
    return {"steps": summary["steps"], "train_seconds": summary["train_seconds"],
            "updates_per_minute": round(60 * summary["steps"] / summary["train_seconds"], 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkout", action="append", required=True, metavar="NAME=DIR",
                   help="a name and a source tree (a git worktree of the commit to measure)")
    p.add_argument("--data-dir", required=True)
    p.add_argument("--minutes", type=float, default=3.0)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--unset-coretype", action="store_true",
                   help="run without OPENBLAS_CORETYPE (see minitensor/blas.py), for every checkout")
    p.add_argument("--out")
    a = p.parse_args()
    env = dict(os.environ)
    if a.unset_coretype:
        env.pop("OPENBLAS_CORETYPE", None)
    trees = dict(c.split("=", 1) for c in a.checkout)
    data_dir = str(Path(a.data_dir).resolve())
    runs = {name: [] for name in trees}
    for r in range(a.repeats):
        for name, tree in trees.items():
            res = one_run(Path(tree).resolve(), data_dir, a.minutes, env)
            runs[name].append(res)
            print(f"repeat {r}: {name}: {res}", file=sys.stderr, flush=True)
    out = {"minutes": a.minutes, "openblas_coretype": env.get("OPENBLAS_CORETYPE"), "runs": runs,
           "median_updates_per_minute": {n: statistics.median(x["updates_per_minute"] for x in v)
                                         for n, v in runs.items()}}
    print(json.dumps(out, indent=2))
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
