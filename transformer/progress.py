"""Progress bars that end with a reason: a bar left at "13% 199/1500" reads as a crash, so
whatever ends a loop early (a target reached, the time budget, a signal) closes the bar and
says so in one line. Also what a training loop prints when its ``--profile N`` updates are done."""
from __future__ import annotations

import sys
from pathlib import Path

from tqdm import tqdm  # text bars everywhere: tqdm.auto warns in a notebook without ipywidgets


def bar(total: int, desc: str, show: bool, initial: int = 0) -> tqdm:
    """A progress bar over ``total`` updates (silent unless ``show``)."""
    return tqdm(total=total, initial=initial, desc=desc, disable=not show, dynamic_ncols=True)


def finish(progress: tqdm, line: str, file=None) -> None:
    """Close ``progress`` and write the one line that says why the loop ended."""
    progress.close()
    print(line, file=file or sys.stderr, flush=True)


def report_profile(prof, run_dir: Path, last_update: int) -> None:
    """The profiled updates' table (``minitensor.profile``) on stderr, above any progress bar,
    and the same rows in ``run_dir/profile.json``."""
    path = Path(run_dir) / "profile.json"
    prof.save(path)
    tqdm.write(f"profile of updates {last_update - prof.opened + 1}-{last_update} (also in {path}):\n" + prof.table(),
               file=sys.stderr)
