"""Progress bars that end with a reason: a bar left at "13% 199/1500" reads as a crash, so
whatever ends a loop early (a target reached, the time budget, a signal) closes the bar and
says so in one line. Also a training loop's ``--profile N``: which updates it times, and the
table it prints when they are done."""
from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from tqdm import tqdm  # text bars everywhere: tqdm.auto warns in a notebook without ipywidgets

import minitensor as mt


def bar(total: int, desc: str, show: bool, initial: int = 0) -> tqdm:
    """A progress bar over ``total`` updates (silent unless ``show``)."""
    return tqdm(total=total, initial=initial, desc=desc, disable=not show, dynamic_ncols=True)


def size_to_budget(progress: tqdm, done: int, seconds: float, minutes: float, most: int) -> None:
    """Size ``progress`` to the updates a time budget of ``minutes`` allows at the pace so far
    (``done`` updates in ``seconds``), at most ``most``: a bar over the step limit alone would
    show a run that stops on its clock as hours from its end."""
    if minutes > 0 and done > 0 and seconds > 0:
        progress.total = max(done, min(most, round(done * 60 * minutes / seconds)))  # shown at the next redraw


def finish(progress: tqdm, line: str, file=None) -> None:
    """Close ``progress`` and write the one line that says why the loop ended."""
    progress.close()
    print(line, file=file or sys.stderr, flush=True)


class ProfiledUpdates:
    """Updates 2 to N+1 of a training loop timed op by op (``minitensor.profile``; the first is
    left out: it allocates what later ones reuse). After the last, the table goes to stderr,
    above any progress bar, and the same rows to ``run_dir/profile.json``. ``done``: the updates
    made before the loop started (a resumed run's), so that ``update(step)`` takes run-wide numbers."""

    def __init__(self, n: int, run_dir, done: int = 0):
        self.n, self.path, self.done, self.prof = n, Path(run_dir) / "profile.json", done, mt.profile()

    @contextlib.contextmanager
    def update(self, step: int):
        """Around update number ``step`` of the run (1: its first)."""
        index = step - self.done  # 1: the loop's first update
        if not 2 <= index <= self.n + 1:
            yield
            return
        with self.prof:
            yield
        if index == self.n + 1:
            self.prof.save(self.path)
            tqdm.write(f"profile of updates {step - self.n + 1}-{step} (also in {self.path}):\n" + self.prof.table(),
                       file=sys.stderr)
