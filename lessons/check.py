"""The exercises' autograder.

    python lessons/check.py 07                  # check your lessons/exercises/07_*.py
    python lessons/check.py all                 # every exercise
    python lessons/check.py 07 --reference      # the package's own answer (it passes)
    python lessons/check.py 07 --file mine.py   # check another file
    python lessons/check.py --list              # number, title and file of each exercise

Each exercise is a stub in ``lessons/exercises/``, numbered like its lesson: fill in the
functions, then run the check. An exercise has a fixed list of cases, smallest first; they
run in order and the check stops at the first one your code gets wrong, so the case it
reports is the smallest that fails. The report shows that case's input, what was expected
and what your code gave, the entries that differ (or a wrong shape or dtype), and, when your
answer is one the grader knows as a common mistake, a one-line hint. Code that raises is
reported with the exception and your line that raised it. The expected values come from the
package's own code; ``lessonkit/exercises.py`` says where exactly, case by case.

Exit status: 0 when every checked exercise passes, 1 otherwise.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import types
from pathlib import Path

from lessonkit.exercises import EXERCISES, grade, reference

HERE = Path(__file__).resolve().parent / "exercises"


def stub_path(number: str) -> Path:
    found = sorted(HERE.glob(f"{number}_*.py"))
    if not found:
        raise SystemExit(f"no exercise {number}: see python lessons/check.py --list")
    return found[0]


def load(path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(f"exercise_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _answer(number: str, args) -> tuple[object, str | None]:
    """(the answer to grade, None), or (None, why it could not be loaded)."""
    if args.reference:
        return reference(number), None
    path = Path(args.file) if args.file else stub_path(number)
    try:
        return load(path), None
    except Exception as e:  # noqa: BLE001 - a file that does not load is a failure, said in one line
        if isinstance(e, SyntaxError):
            return None, f"{path.name} does not load: {type(e).__name__}, line {e.lineno}: {e.msg}"
        return None, f"{path.name} does not load: {type(e).__name__}: {e}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("number", nargs="?", help="exercise number (e.g. 07), or 'all'")
    ap.add_argument("--reference", action="store_true", help="check the package's reference answer instead")
    ap.add_argument("--file", help="check this file instead of lessons/exercises/NN_*.py")
    ap.add_argument("--list", action="store_true", help="list the exercises")
    args = ap.parse_args(argv)
    if args.list or not args.number:
        for number, ex in EXERCISES.items():
            print(f"{number}  {ex.title:<54} {stub_path(number).relative_to(HERE.parent.parent)}")
        return 0
    numbers = list(EXERCISES) if args.number == "all" else [args.number.zfill(2)]
    ok_all = True
    for number in numbers:
        if number not in EXERCISES:
            raise SystemExit(f"no exercise {number}: see python lessons/check.py --list")
        answer, problem = _answer(number, args)
        ok, report = (False, problem) if problem else grade(number, answer)
        ok_all &= ok
        print(f"exercise {number} — {EXERCISES[number].title}: {'PASS' if ok else 'FAIL'}")
        print("  " + report.replace("\n", "\n  "))
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
