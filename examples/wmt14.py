"""WMT 2014 English -> German with the paper's settings, from download to BLEU on newstest2014.

    python examples/wmt14.py                                   # wmt14-base on one GPU, data in data/wmt14
    python examples/wmt14.py --preset wmt14-big --from ~/archives   # the archives already on disk

Prepares --data-dir with ``python -m transformer data wmt14`` when it is not prepared yet
(about 1.7 GB of archives, SHA-256 checked), trains, then averages the last checkpoints and
scores newstest2014 with sacreBLEU. wmt14-base: joint BPE of 37000, ~25k source + ~25k target
tokens per update (6250 padded tokens x 4 accumulated batches), 100k updates, warm-up 4000,
the last 5 checkpoints averaged, beam 4, alpha 0.6 (Sections 5 and 6.1). wmt14-big: d_model
1024, 16 heads, dropout 0.3, 300k updates, the last 20 averaged. Both expect a GPU (--device cuda).
"""
import argparse
import sys

from transformer.cli import run as command
from transformer.flags import Parser
from transformer.presets import PRESETS
from transformer.wmt14 import is_prepared


def run(argv=None) -> int:
    """Each step through the command line (one error line and its exit status, as there); the
    first step that fails ends the script with its status."""
    p = Parser(prog="python examples/wmt14.py", description=__doc__,
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="wmt14-base", choices=["wmt14-base", "wmt14-big"])
    p.add_argument("--data-dir", default="data/wmt14", help="the prepared folder (prepared here if it is not)")
    p.add_argument("--from", dest="from_dir", help="a folder holding the four archives (no download)")
    p.add_argument("--run-dir", default=None, help="default: runs/<preset>")
    p.add_argument("--device", default="cuda")
    p.add_argument("--resume", action="store_true")
    a = p.parse_args(argv)
    if not is_prepared(a.data_dir):
        status = command(["data", "wmt14", "--out", a.data_dir, *(["--from", a.from_dir] if a.from_dir else [])])
        if status:
            return status
    run_dir = a.run_dir or f"runs/{a.preset}"
    status = command(["train", "--preset", a.preset, "--data-dir", a.data_dir, "--run-dir", run_dir, "--device",
                      a.device, *(["--resume"] if a.resume else [])])
    if status:
        return status
    return command(["evaluate", "--run-dir", run_dir, "--data-dir", a.data_dir, "--device", a.device,
                    "--average", str(PRESETS[a.preset]["average_last"])])


if __name__ == "__main__":
    sys.exit(run())
