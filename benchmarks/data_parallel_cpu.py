"""Time per update: 1 process against 2 MPI ranks, at the same global batch (CPU, Multi30k).

Two pairs of runs, each pair making the same updates:
- global batch ``2 x T``: 1 process accumulates 2 batches of T tokens (--update-freq 2); 2 ranks
  take one batch of T each and all-reduce;
- global batch ``T`` (by default the ``multi30k-cpu`` preset's): 1 process takes batches of T;
  2 ranks take T/2 each (``--max-tokens T/2``), which is how a recipe tuned on 1 process keeps
  its batch.
The ranks share the cores on their own (``distributed.share_cores``: 1 BLAS thread each on 2
cores). Seconds per update are read from each run's metrics.jsonl (steady state: the first
--skip updates are dropped), and the pairs' runs alternate.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/data_parallel_cpu.py \\
        --data-dir ../shared/data/multi30k [--out benchmarks/results/data_parallel_cpu_<date>.json]
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from harness import environment, like_prepared, seconds_per_update

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from transformer.presets import PRESETS  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", required=True)
    p.add_argument("--steps", type=int, default=25)
    p.add_argument("--skip", type=int, default=5)
    p.add_argument("--max-tokens", type=int, default=PRESETS["multi30k-cpu"]["settings"]["max_tokens"],
                   help="T (default: the multi30k-cpu preset's)")
    p.add_argument("--out", help="write the figures here as JSON")
    a = p.parse_args()
    mpiexec = Path(sys.executable).parent / "mpiexec"
    mpiexec = str(mpiexec) if mpiexec.exists() else shutil.which("mpiexec")
    common = ["-m", "transformer", "train", "--preset", "multi30k-cpu", "--data-dir", a.data_dir, "--max-steps",
              str(a.steps), "--eval-every", "100000", "--save-every", "100000", "--max-minutes", "0", "--no-progress"]
    t, half = a.max_tokens, a.max_tokens // 2
    one = [sys.executable, *common]
    two = [mpiexec, "-n", "2", sys.executable, *common, "--distributed"]
    pairs = {
        f"global batch 2 x {t}": {f"1 process, --update-freq 2, --max-tokens {t}": one + ["--update-freq", "2", "--max-tokens", str(t)],
                                  f"2 MPI ranks, --max-tokens {t} each": two + ["--max-tokens", str(t)]},
        f"global batch {t}": {f"1 process, --max-tokens {t}": one + ["--max-tokens", str(t)],
                              f"2 MPI ranks, --max-tokens {half} each": two + ["--max-tokens", str(half)]},
    }
    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "prep"
        # prepare the BPE model and caches once, then copy them into each run
        subprocess.run([sys.executable, *common, "--run-dir", str(base), "--max-steps", "1"], check=True,
                       capture_output=True)
        for k, (pair, runs) in enumerate(pairs.items()):
            results[pair] = {}
            for name, cmd in runs.items():
                run = like_prepared(base, Path(tmp) / f"run{k}_{len(results[pair])}")
                subprocess.run([*cmd, "--run-dir", str(run)], check=True, capture_output=True)
                results[pair][name] = round(seconds_per_update(run, a.skip) * 1000, 1)
                print(f"{pair}: {name}: {results[pair][name]:.0f} ms/update", flush=True)
            first, second = results[pair].values()
            results[pair]["speedup_2_ranks_over_1_process"] = round(first / second, 3)
    out = {"benchmark": "data parallel on CPUs: ms per update, 1 process against 2 MPI ranks",
           "environment": environment("cpu"), "steps": a.steps, "skip": a.skip, "ms_per_update": results}
    print(json.dumps(results, indent=2))
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
