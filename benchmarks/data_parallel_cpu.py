"""Time per update: 1 process vs 2 MPI ranks on the same global batch (CPU, Multi30k).

Both make identical updates: 1 process accumulates 2 batches (--update-freq 2); 2 ranks take
one batch each and all-reduce. Seconds per update are read from each run's metrics.jsonl
(steady state: the first --skip updates are dropped).

    python benchmarks/data_parallel_cpu.py --data-dir ../shared/data/multi30k
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path




def seconds_per_update(run: Path, skip: int) -> float:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    t = [r["seconds"] for r in rows]
    return (t[-1] - t[skip - 1]) / (len(t) - skip)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", required=True)
    p.add_argument("--steps", type=int, default=25)
    p.add_argument("--skip", type=int, default=5)
    p.add_argument("--max-tokens", type=int, default=2500)
    a = p.parse_args()
    mpiexec = Path(sys.executable).parent / "mpiexec"
    mpiexec = str(mpiexec) if mpiexec.exists() else shutil.which("mpiexec")
    common = ["-m", "transformer", "train", "--preset", "multi30k-cpu", "--data-dir", a.data_dir, "--max-steps",
              str(a.steps), "--max-tokens", str(a.max_tokens), "--eval-every", "100000", "--save-every", "100000",
              "--max-minutes", "0", "--no-progress"]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "prep"
        # prepare the BPE model and caches once, then copy them into each run
        subprocess.run([sys.executable, *common, "--run-dir", str(base), "--max-steps", "1"], check=True,
                       capture_output=True)
        runs = {
            "1 process, update-freq 2, 2 BLAS threads": ([sys.executable, *common, "--update-freq", "2"], {}),
            "2 MPI ranks, 1 BLAS thread each": ([mpiexec, "-n", "2", sys.executable, *common, "--distributed"],
                                                {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}),
        }
        for name, (cmd, env) in runs.items():
            run = Path(tmp) / name.split(",")[0].replace(" ", "_")
            run.mkdir()
            for f in ("spm.model",):
                shutil.copy(base / f, run / f)
            shutil.copytree(base / "cache", run / "cache")
            subprocess.run([*cmd, "--run-dir", str(run)], check=True, capture_output=True, env={**os.environ, **env})
            results[name] = seconds_per_update(run, a.skip)
            print(f"{name}: {results[name] * 1000:.0f} ms/update", flush=True)
    one, two = results.values()
    print(json.dumps({"ms_per_update": {k: round(v * 1000, 1) for k, v in results.items()},
                      "speedup_2_ranks_over_1_process": round(one / two, 3)}, indent=2))



if __name__ == "__main__":
    main()
