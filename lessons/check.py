"""The exercises' autograder, and the capstone.

    python lessons/check.py --list              # number, title and file of each exercise
    python lessons/check.py 01                  # check your lessons/exercises/ex01_*.py
    python lessons/check.py all                 # every exercise, in order
    python lessons/check.py capstone            # train the copy task on your engine

Install the lessons' extras first (pip install -e ".[lessons]"): hypothesis draws the cases
that follow the fixed ones.

The exercises form one track: ``lessons/exercises/exNN_*.py``, one per lesson, in which you
build an engine of your own, each file importing your earlier ones (exercise 09's attention
uses your exercise 08, which uses your Tensor of exercise 01). Fill in what a file marks with
``raise NotImplementedError("exercise NN: write ...")``, then run the check.

An exercise has a fixed list of cases, smallest first; they run in order and the check stops
at the first one your code gets wrong, so the case it reports is the smallest that fails. The
report shows that case's input, what was expected (minitensor's answer, in float64) and what
your code gave, the entries that differ (or a wrong shape or dtype), and, when your answer is
one the grader knows as a common mistake, a one-line hint. Code that raises is reported with
the exception and your line that raised it. Once the fixed cases pass, every exercise but
17 and 25 (whose inputs are a loss and a program) tries 40 more inputs drawn by hypothesis
(the same ones every run) and reports the smallest failing one it finds. When an exercise
fails and an earlier one it builds on fails too, the report says so: fix the earlier one
first.

With exercises 01–16 passed, ``capstone`` trains the copy task of ``examples/copy_task.py`` on
your engine and model (same model size, batches, schedule and exact-match target) and prints
your engine's time per update beside minitensor's.

Exit status: 0 when every checked exercise passes (or the capstone reaches its target), 1 otherwise;
2 for a number that names no exercise; 141, quietly, when the reader of the output went away
(``--list | head``), as the ``transformer`` command line does.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lessonkit import track
from lessonkit.exercises import EXERCISES
from lessonkit.grader import grade
from transformer.signals import closed_pipe

CAPSTONE_NEEDS = [n for n in EXERCISES if n <= "16"]   # the engine and the model the copy task trains


def load(directory: Path, number: str):
    """(the module of exercise ``number``, None), or (None, why it does not load, in one line)."""
    file = track.path(directory, number)
    if file is None:
        return None, f"no file ex{number}_*.py in {directory}"
    try:
        return track.load(directory, number), None
    except Exception as e:  # noqa: BLE001 - a file that does not load is a failure, said in one line
        if isinstance(e, SyntaxError):
            return None, f"{Path(e.filename or file).name} does not load: SyntaxError, line {e.lineno}: {e.msg}"
        return None, f"{file.name} does not load: {type(e).__name__}: {e}{_learner_line(e)}"


def _learner_line(e: BaseException) -> str:
    """' (ex14_transformer.py, in forward, line 61: ...)' for the learner's line that raised ``e``, or ''."""
    at = track.where(e)
    return f" ({at})" if at else ""


def check(directory: Path, number: str, draw: bool = True) -> tuple[bool, str]:
    answer, problem = load(directory, number)
    return (False, problem) if problem else grade(EXERCISES[number], answer, draw)


def earlier_failing(directory: Path, number: str) -> list:
    """The earlier exercises that exercise ``number`` builds on (imports, directly or not) and
    that fail their fixed cases: enough to say which to fix first."""
    return [n for n in track.builds_on(directory, number, EXERCISES[number].reaches)
            if n in EXERCISES and not check(directory, n, draw=False)[0]]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("number", nargs="?", help="an exercise number (e.g. 07), 'all', or 'capstone'")
    ap.add_argument("--list", action="store_true", help="list the exercises")
    ap.add_argument("--dir", default=str(track.LEARNER),
                    help="the track to check (default lessons/exercises; the test suite checks its solutions)")
    args = ap.parse_args(argv)
    directory = Path(args.dir)
    if args.list or not args.number:
        for number, ex in EXERCISES.items():
            file = track.path(directory, number)
            print(f"{number}  {ex.title:<72} {file.name if file else '(no file)'}")
        print("capstone  the copy task on your engine (needs exercises 01–16)")
        return 0
    if args.number == "capstone":
        failing = [n for n in CAPSTONE_NEEDS if not check(directory, n)[0]]
        if failing:
            print(f"the capstone needs exercises {CAPSTONE_NEEDS[0]}–{CAPSTONE_NEEDS[-1]} to pass; these do not yet: "
                  f"{', '.join(failing)} (python lessons/check.py {failing[0]})")
            return 1
        from lessonkit import capstone
        try:
            summary = capstone.run(directory, say=lambda line: print(line, flush=True))
        except Exception as e:  # noqa: BLE001 - a run that stops is reported in one line, with the learner's line
            print(f"the capstone stopped: {type(e).__name__}: {e}{_learner_line(e)}")
            return 1
        return 0 if summary["reached"] else 1
    numbers = list(EXERCISES) if args.number == "all" else [args.number.zfill(2)]
    if numbers[0] not in EXERCISES:
        print(f"error: no exercise {numbers[0]}: see python lessons/check.py --list", file=sys.stderr)
        return 2
    ok_all = True
    for number in numbers:
        ok, report = check(directory, number)
        ok_all &= ok
        print(f"exercise {number} — {EXERCISES[number].title}: {'PASS' if ok else 'FAIL'}", flush=True)
        print("  " + report.replace("\n", "\n  "))
        if not ok and args.number != "all":
            before = earlier_failing(directory, number)
            if before:
                print(f"  note: exercise {number} uses your earlier exercises, and {', '.join(before)} "
                      f"fail{'s' if len(before) == 1 else ''} {'its' if len(before) == 1 else 'their'} own check: "
                      f"fix {'it' if len(before) == 1 else 'them'} first (python lessons/check.py {before[0]})")
    return 0 if ok_all else 1


if __name__ == "__main__":
    try:
        status = main()
        sys.stdout.flush()
    except BrokenPipeError:  # `--list | head`: the reader has what it wanted
        status = closed_pipe()
    sys.exit(status)
