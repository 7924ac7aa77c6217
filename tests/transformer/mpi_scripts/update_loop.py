"""Under mpiexec: the trainer's loop and the old update (tests/transformer/old_update.py) on 2
ranks, from the same start; each rank prints the weights that differ, or "same"."""
import sys
from pathlib import Path

from minitensor import distributed
from tests.transformer.old_update import run_both
from tests.transformer.test_update_loop import load_small, settings

folder = Path(sys.argv[1])
comm = distributed.init()
tok, train = load_small(folder)
differ = run_both(settings, tok, train, folder / f"runs-{comm.world_size}", comm=comm)
print(f"rank {comm.rank}: " + (", ".join(differ) if differ else "same"), flush=True)
