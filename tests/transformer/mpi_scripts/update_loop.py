"""Under mpiexec: the trainer's loop and the old update (tests/transformer/old_update.py) on 2
ranks, from the same start; each rank writes the weights that differ, or "same", into
``<folder>/update_loop_rank<r>.txt`` (a file each: the launcher may interleave the ranks' output)."""
import sys
from pathlib import Path

from minitensor import distributed
from tests.transformer.old_update import run_both
from tests.transformer.test_update_loop import load_small, settings

folder = Path(sys.argv[1])
comm = distributed.init()
tok, train = load_small(folder)
differ = run_both(settings, tok, train, folder / f"runs-{comm.world_size}", comm=comm)
(folder / f"update_loop_rank{comm.rank}.txt").write_text(", ".join(differ) if differ else "same")
