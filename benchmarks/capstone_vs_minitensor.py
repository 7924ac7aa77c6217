"""The capstone's engine against minitensor: one copy-task update, timed in alternating rounds.

The exercise track's reference solutions (``tests/lessons/solutions/``) are the engine a learner
who passes every exercise has written: plain NumPy, one Function per operation. This times its
update of the copy task's model (``lessonkit.capstone.learner_update``: forward, loss, backward,
schedule, Adam) against minitensor's update of the same model on the same batches
(``lessonkit.capstone.minitensor_update``), in rounds that alternate the two, and prints the
median of each and their ratio. Pass ``--dir`` to time another track (your own
``lessons/exercises``).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/capstone_vs_minitensor.py
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lessons"))

from harness import environment, write_results  # noqa: E402

from lessonkit import capstone, track  # noqa: E402
from transformer.copytask import CopyTaskSettings, make_batch  # noqa: E402


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=str(track.SOLUTIONS), help="the track to time (default: the reference solutions)")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds (default 5)")
    ap.add_argument("--updates", type=int, default=10, help="updates per engine per round (default 10)")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args(argv)
    s = CopyTaskSettings(show_progress=False)
    rng = np.random.default_rng(s.seed)
    batches = [make_batch(rng, s.batch, s) for _ in range(a.updates)]
    engines = {"track": capstone.learner_update(track.load_all(a.dir), s)[1],
               "minitensor": capstone.minitensor_update(s)[1]}
    for update in engines.values():          # warm-up: first calls allocate and import
        update(batches[0])
    rounds = {name: [] for name in engines}
    for r in range(a.rounds):
        for name, update in engines.items():
            rounds[name].append(capstone.seconds_per_update(update, batches))
        print(f"round {r + 1}: track {rounds['track'][-1] * 1e3:.1f} ms, "
              f"minitensor {rounds['minitensor'][-1] * 1e3:.1f} ms per update", flush=True)
    median = {name: float(np.median(v)) for name, v in rounds.items()}
    ratio = median["track"] / median["minitensor"]
    print(f"copy-task update (batch {s.batch}, d_model {s.model.d_model}, 2+2 layers, float32): track "
          f"{median['track'] * 1e3:.1f} ms, minitensor {median['minitensor'] * 1e3:.1f} ms: "
          f"the track takes {ratio:.2f}x")
    out = {"benchmark": "capstone_vs_minitensor", "environment": environment("cpu"), "rounds": rounds,
           "median_seconds": median, "ratio_track_to_minitensor": ratio, "updates_per_round": a.updates}
    write_results(out, a.json)
    return out


if __name__ == "__main__":
    main()
