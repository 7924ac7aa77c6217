"""What a loop shows of itself. Progress bars that end with a reason: a bar left at "13%
199/1500" reads as a crash, so whatever ends a loop early (a target reached, the time budget, a
signal) closes the bar and says so in one line. A training run's log (:class:`RunLog`:
``metrics.jsonl``, its lines and its curves, and with ``tensorboard`` the same records as
TensorBoard event files); the lines it writes on stderr kept in the run directory
(:func:`stderr_copied_to`). A training loop's ``--profile N``: which updates it times, and the
table it prints when they are done."""
from __future__ import annotations

import contextlib
import json
import re
import sys
import time
from pathlib import Path

from tqdm import tqdm  # text bars everywhere: tqdm.auto warns in a notebook without ipywidgets

import minitensor as mt

from .plots import plot_curves
from .signals import close_stdout
from .tensorboard import EventWriter


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


_BAR = re.compile(r"^([^:\n]*:)?\s*\d+%\|")  # a tqdm bar's line: "training:  13%|█▎   | 199/1500 ..."
_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class _Copied:
    """A text stream that writes to ``stream`` and keeps each whole line for ``path``, stamped with
    the time: the lines a reader meets (notes, warnings, the line a loop ends with), not a progress
    bar's redraws (the text after a line's last carriage return, escapes removed). The lines are
    held until :meth:`keep` (a start that is refused leaves the file as it was), then appended and
    flushed as they come (a crash loses none)."""

    def __init__(self, stream, path: Path):
        self.stream, self.path, self.pending, self.held, self.file = stream, path, "", [], None

    def write(self, text: str) -> int:
        written = self.stream.write(text)
        self.pending += text
        *lines, last = self.pending.split("\n")
        self.pending = last[last.rfind("\r") + 1:]  # a redraw replaces the line: a bar's redraws never pile up
        for line in lines:
            shown = _ESCAPES.sub("", line.rsplit("\r", 1)[-1]).rstrip()
            if shown and not _BAR.match(shown):
                self.note(shown)
        return written

    def note(self, line: str) -> None:
        stamped = f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}\n"
        if self.file is None:
            self.held.append(stamped)
        else:
            self.file.write(stamped)
            self.file.flush()

    def keep(self) -> None:
        """From now on the lines go to the file: those held so far first."""
        if self.file is None:
            self.file = open(self.path, "a", encoding="utf-8")
            self.file.writelines(self.held)
            self.file.flush()
            self.held = []

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name):  # isatty, fileno, encoding, ...: the stream's
        return getattr(self.stream, name)


@contextlib.contextmanager
def stderr_copied_to(path: Path):
    """While the block runs, every line written on stderr is also kept for ``path``; the block
    calls ``keep()`` on what this yields once its start is accepted, and from then on the lines
    are appended to ``path`` as they come. An exception that ends a kept block is its last line."""
    before = sys.stderr
    copied = sys.stderr = _Copied(before, path)
    try:
        yield copied
    except BaseException as e:
        why = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        copied.note(f"ended by {why}")
        raise
    finally:
        sys.stderr = before
        if copied.file is not None:
            copied.file.close()


class RunFileError(ValueError):
    """A file of the run directory (its metrics log, say) is damaged; the message names file and line."""


VALIDATION = ("valid_nll", "valid_ppl", "valid_bleu")  # what a validation step adds to its record


def _wrong_numbers(record: dict) -> list[str]:
    """The fields of a metrics record that the plots read and that are not numbers: its loss (null
    for a skipped fp16 update), its learning rate, and what validation measured, where it ran."""
    may_be_null = {"loss": True, "lr": False, **{k: False for k in VALIDATION if k in record}}
    number = lambda x: isinstance(x, (int, float)) and not isinstance(x, bool)  # noqa: E731
    return [k for k, null in may_be_null.items() if not (number(record.get(k)) or (null and k in record
                                                                                   and record[k] is None))]


def read_metrics(path: Path, warn=None) -> list[dict]:
    """The records of a run's ``metrics.jsonl``. An unfinished last line (a crash during an
    append leaves one) is dropped, saying so through ``warn``; any other line that is not a
    record with a step, a loss and a learning rate (and numbers for what validation measured)
    raises :class:`RunFileError` naming the file and the line."""
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if not (isinstance(record, dict) and isinstance(record.get("step"), int)):
                raise ValueError("not a record with a step")
            if wrong := _wrong_numbers(record):
                raise ValueError(f"{', '.join(wrong)}: not a number")
        except ValueError as e:
            if number == len(lines):  # no line ending after it: the write was cut off
                if warn is not None:
                    warn(f"note: {path}:{number}: an unfinished last line (a crash during a write) was dropped")
                continue
            raise RunFileError(f"{path}:{number}: not a metrics record ({e}); mend or delete that line, then "
                               "--resume again") from None
        records.append(record)
    return records


def ranges(steps: list[int]) -> str:
    """Sorted whole numbers as runs: [3, 4, 5, 9] -> "3-5, 9"."""
    runs: list[list[int]] = []
    for x in steps:
        if runs and x == runs[-1][1] + 1:
            runs[-1][1] = x
        else:
            runs.append([x, x])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


class RunLog:
    """A training run's record of its updates: ``metrics.jsonl`` (a JSON line per update, written
    by rank 0 alone and flushed at once), ``history`` (the same records, those of a resumed run's
    earlier updates first), the progress bar sized to the time budget, a plain line every 50
    updates and at each validation when the bar is off, and the curves (:meth:`plot`). A closed
    stdout (``train ... | head``) calls ``closed_stdout()``, which asks training to stop."""

    def __init__(self, run: Path, settings, main: bool, step: int, history: list, closed_stdout):
        self.run, self.s, self.main, self.history, self.closed_stdout = run, settings, main, history, closed_stdout
        self.file = open(run / "metrics.jsonl", "a") if main else None
        self.events = EventWriter(run / "tensorboard") if main and settings.tensorboard else None
        self.bar = bar(settings.max_steps, "training", settings.progress and main, initial=step)

    def write(self, record: dict, step: int, seconds: float) -> None:
        """Log one update's ``record`` (``step`` updates made in ``seconds``: the bar's pace)."""
        if self.main:
            self.file.write(json.dumps(record, allow_nan=False) + "\n")
            self.file.flush()
        if self.events is not None:  # valid_nll -> valid/nll, loss -> train/loss: TensorBoard groups by prefix
            self.events.add(record["step"], {(k.replace("valid_", "valid/", 1) if k.startswith("valid_") else
                                              f"train/{k}"): v for k, v in record.items() if k != "step"})
        self.history.append(record)
        self.bar.update(1)
        size_to_budget(self.bar, step, seconds, self.s.max_minutes, self.s.max_steps)
        self.bar.set_postfix({k: f"{record[k]:.3g}" for k in ("loss", "valid_nll", "valid_bleu") if record.get(k) is not None})
        if self.main and not self.s.progress and ("valid_nll" in record or record["step"] % 50 == 0):
            self.say(" ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in record.items()))

    def say(self, line: str) -> None:
        """A log line on stdout; a closed stdout is closed for good and asks training to stop."""
        try:
            print(line, flush=True)
        except BrokenPipeError:
            close_stdout()
            self.closed_stdout()

    def close(self) -> None:
        self.bar.close()
        if self.file:
            self.file.close()
        if self.events is not None:
            self.events.close()

    def plot(self) -> None:
        """loss.png, lr.png and (where validation measured BLEU) bleu.png from the history."""
        h = self.history
        if not h:
            return
        steps = [r["step"] for r in h]
        plot_curves(self.run / "loss.png", steps, {"train (label-smoothed)": [r["loss"] for r in h],
                                                   "valid NLL": [(r["step"], r["valid_nll"]) for r in h if "valid_nll" in r]},
                    title="learning curves", ylabel="loss per target token")
        plot_curves(self.run / "lr.png", steps, {"learning rate": [r["lr"] for r in h]}, title="Noam schedule",
                    ylabel="learning rate")
        bleus = [(r["step"], r["valid_bleu"]) for r in h if "valid_bleu" in r]
        if bleus:
            plot_curves(self.run / "bleu.png", steps, {"valid BLEU": bleus}, title="validation BLEU", ylabel="BLEU")
