"""Multi30k English -> German end to end: train, average the last checkpoints, score test2016.

    python examples/multi30k.py                          # CPU preset, about half an hour on 2 cores
    python examples/multi30k.py --preset multi30k-gpu    # one GPU (needs the cuda extra)
    python examples/multi30k.py --data-dir ../shared/data/multi30k   # files already on disk

The data are downloaded on first use (sha256-checked) unless --data-dir is given. Outputs go
to --run-dir: checkpoints, metrics.jsonl, loss/lr/bleu plots, evaluation.json, hypotheses.txt.
"""
import argparse
import sys

from transformer.cli import run as command
from transformer.flags import Parser
from transformer.presets import PRESETS


def run(argv=None) -> int:
    """Each step through the command line (one error line and its exit status, as there); the
    first step that fails ends the script with its status."""
    p = Parser(prog="python examples/multi30k.py", description=__doc__,
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="multi30k-cpu", choices=["multi30k-cpu", "multi30k-gpu"])
    p.add_argument("--run-dir", default=None, help="default: runs/<preset>")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--resume", action="store_true")
    a = p.parse_args(argv)
    run_dir = a.run_dir or f"runs/{a.preset}"
    data = ["--data-dir", a.data_dir] if a.data_dir else []
    status = command(["train", "--preset", a.preset, "--run-dir", run_dir, *data, *(["--resume"] if a.resume else [])])
    if status:
        return status
    device = PRESETS[a.preset]["settings"].get("device", "cpu")
    return command(["evaluate", "--run-dir", run_dir, *data, "--average", str(PRESETS[a.preset]["average_last"]),
                    "--device", device])


if __name__ == "__main__":
    sys.exit(run())
