"""The exercises' autograder.

    python lessons/check.py 05                  # check your lessons/exercises/05_*.py
    python lessons/check.py all                 # every exercise
    python lessons/check.py 05 --reference      # the package's own answer (it passes)
    python lessons/check.py --list

Each exercise is a stub in ``lessons/exercises/``: fill in the functions, then run the check.
It runs the package's own properties (a gradcheck, a mask's definition, a formula) on inputs
hypothesis draws; when one fails, hypothesis shrinks the input to a small failing case and
this script prints it. Exit status: 0 when every checked exercise passes, 1 otherwise.
Needs hypothesis (``pip install -e ".[lessons]"`` or ``".[test]"``).
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import traceback
import types
from pathlib import Path

from transformer.exercises import EXERCISES, reference

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


def grade(number: str, answer) -> tuple[bool, str]:
    """(passed, report) for ``answer`` (a module or namespace with the exercise's functions)."""
    ex = EXERCISES[number]
    missing = [f for f in ex.functions if not callable(getattr(answer, f, None))]
    if missing:
        return False, f"missing: {', '.join(missing)}"
    try:
        ex.check(answer)
    except NotImplementedError as e:
        return False, f"not written yet ({e})"
    except AssertionError as e:
        notes = "\n".join(getattr(e, "__notes__", []))
        return False, f"{e}\n{notes}".strip()
    except Exception as e:  # noqa: BLE001 - the learner's code raised: show where
        notes = "\n".join(getattr(e, "__notes__", []))
        tb = "".join(traceback.format_exception_only(type(e), e)).strip()
        return False, f"your code raised {tb}\n{notes}".strip()
    return True, "every case passed"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("number", nargs="?", help="exercise number (e.g. 05), or 'all'")
    ap.add_argument("--reference", action="store_true", help="check the package's reference answer instead")
    ap.add_argument("--file", help="check this file instead of lessons/exercises/NN_*.py")
    ap.add_argument("--list", action="store_true", help="list the exercises")
    args = ap.parse_args(argv)
    if args.list or not args.number:
        for number, ex in EXERCISES.items():
            print(f"{number}  {ex.title:<48} {stub_path(number).relative_to(HERE.parent.parent)}")
        return 0
    numbers = list(EXERCISES) if args.number == "all" else [args.number.zfill(2)]
    ok_all = True
    for number in numbers:
        if number not in EXERCISES:
            raise SystemExit(f"no exercise {number}: see python lessons/check.py --list")
        answer = reference(number) if args.reference else load(Path(args.file) if args.file else stub_path(number))
        ok, report = grade(number, answer)
        ok_all &= ok
        print(f"exercise {number} — {EXERCISES[number].title}: {'PASS' if ok else 'FAIL'}")
        if not ok:
            print("  " + report.replace("\n", "\n  "))
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
