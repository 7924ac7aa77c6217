"""The lesson kit: what the lessons in ``lessons/`` share and the library does not need.

- :func:`smoke`: smoke mode (``--smoke`` or ``LESSON_SMOKE=1``), every lesson in seconds (a lesson
  refuses any other flag: :func:`check_arguments`);
- :func:`figure_dir`, :func:`show` and :func:`show_saved`: where a lesson's figures go, saved
  as PNG and, in a notebook, shown inline as well;
- :class:`Results` and :func:`spread`: what a lesson measured, and each check it made with
  the values it saw and the bound it held them to;
- :func:`multi30k`: the Multi30k corpus, from where the command line keeps it;
- ``lessonkit.checks`` (the properties the lessons check), ``lessonkit.toy`` (a table of
  next-token probabilities posing as a model), and the exercise track: ``lessonkit.track``
  (importing a learner's track), ``lessonkit.exercises`` (what each exercise is graded on),
  ``lessonkit.grader`` (running the cases, the report) and ``lessonkit.capstone`` (the copy
  task on the learner's engine).

A lesson's prose describes what to look at; the numbers come from its own run.
``lessons/run_all.py --full --update`` copies the full-mode results to ``lessons/results/``
and regenerates ``lessons/README.md`` from them, so no number there is typed by hand.

The lessons import this package as ``lessonkit``: a script run as ``python lessons/NN_*.py``
and a notebook opened from ``lessons/`` both have ``lessons/`` on their import path.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def in_notebook() -> bool:
    """True inside a Jupyter kernel (a notebook, or the book being built)."""
    shell = sys.modules.get("IPython") and sys.modules["IPython"].get_ipython()
    return shell is not None and hasattr(shell, "kernel")


if not in_notebook() and "MPLBACKEND" not in os.environ:
    import matplotlib

    matplotlib.use("Agg")   # a script draws to files only: no window, no display needed

if hasattr(sys.stdout, "reconfigure"):
    # each line shows as it is printed, also piped into a log or a pager: a lesson that runs for
    # minutes says how far it is between seeds, rather than all at once at the end
    sys.stdout.reconfigure(line_buffering=True)


def smoke() -> bool:
    """True with ``--smoke`` on the command line or ``LESSON_SMOKE=1``: every lesson then runs in seconds."""
    return "--smoke" in sys.argv or os.environ.get("LESSON_SMOKE", "") not in ("", "0")


def lesson_script() -> Path | None:
    """The lesson file being run as a script (``python lessons/NN_*.py``), or None: in a notebook,
    or when something else (a test, the book) imports the kit."""
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    if main is None or in_notebook():
        return None
    path = Path(main).resolve()
    return path if path.parent == ROOT / "lessons" and path.name[:2].isdigit() else None


def check_arguments() -> None:
    """A lesson takes one flag, ``--smoke``. Anything else stops it with one line, where a typo
    such as ``--smok`` would otherwise start the full lesson without a word; ``--help`` says so."""
    script = lesson_script()
    if script is None:
        return
    others = [a for a in sys.argv[1:] if a != "--smoke"]
    usage = f"usage: python lessons/{script.name} [--smoke]"
    if others and others[0] in ("-h", "--help"):
        print(f"{usage}\n\n  --smoke  every experiment shrunk to run in seconds (or set LESSON_SMOKE=1);\n"
              "           without it, the full lesson, whose results lessons/README.md shows")
        raise SystemExit(0)
    if others:
        print(f"{usage}\nerror: a lesson takes one flag, --smoke; got {' '.join(others)}", file=sys.stderr)
        raise SystemExit(2)


check_arguments()


def figure_dir(lesson: str) -> Path:
    """``$LESSON_OUT/<lesson>`` (default: ``runs/lessons/<lesson>`` in the checkout), created."""
    path = Path(os.environ.get("LESSON_OUT") or ROOT / "runs" / "lessons") / lesson
    path.mkdir(parents=True, exist_ok=True)
    return path


def show(fig, lesson: str, name: str) -> None:
    """Save ``fig`` as ``figure_dir(lesson)/name`` and show it (:func:`show_saved`)."""
    import matplotlib.pyplot as plt  # noqa: PLC0415

    path = figure_dir(lesson) / name
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    show_saved(path)


def show_saved(path) -> None:
    """Show a saved PNG: under the cell in a notebook, else print where it is. (Nothing is
    returned, so a notebook shows no path after the figure.)"""
    if in_notebook():
        from IPython.display import Image, display  # noqa: PLC0415

        display(Image(filename=str(path)))
    else:
        print("saved", path)


def multi30k(split: str) -> tuple[list[str], list[str]]:
    """(English, German) sentences of a Multi30k split, read where ``python -m transformer``
    keeps them: ``$MULTI30K_DIR`` when set, else the download cache (fetched on first use).
    Without the files and without a network, one line says what to set."""
    from transformer import data, download  # noqa: PLC0415

    try:
        return data.multi30k(split)
    except (data.DataError, download.DownloadError) as e:
        raise SystemExit(f"this lesson needs Multi30k: {e}") from None


# ---------------------------------------------------------------- what a lesson measured
def _plain(value):
    """JSON-ready: NumPy scalars and arrays to Python numbers and lists, infinities to None."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return _plain(value.tolist())
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


_current: "Results | None" = None


def note_check(what: str, **record) -> None:
    """Called by ``lessonkit.checks``: keep what a passing check saw in the lesson's results."""
    if _current is not None:
        _current.checks[what] = _plain(record)
        _current._write()


class Results:
    """What lesson ``lesson`` measured: ``results["name"] = value`` records a number (or a
    list, or a dict of them) and ``results.finding("...")`` a sentence for the README. Every
    check from ``lessonkit.checks`` made after this is created records the values it saw and
    its bound. All of it is printed or written at once to ``results.json`` beside the
    lesson's figures, with the mode (smoke or full) and the seconds since the lesson began."""

    def __init__(self, lesson: str):
        global _current
        self.lesson = lesson
        self.path = figure_dir(lesson) / "results.json"
        self.start = time.perf_counter()
        self.numbers: dict = {}
        self.checks: dict = {}
        self.findings: list[str] = []
        _current = self
        self._write()

    def __setitem__(self, name: str, value) -> None:
        self.numbers[name] = _plain(value)
        self._write()

    def __getitem__(self, name: str):
        return self.numbers[name]

    def finding(self, sentence: str) -> None:
        print("finding:", sentence)
        self.findings.append(sentence)
        self._write()

    def _write(self) -> None:
        data = {"lesson": self.lesson, "mode": "smoke" if smoke() else "full",
                "seconds": round(time.perf_counter() - self.start, 1), "numbers": self.numbers,
                "checks": self.checks, "findings": self.findings}
        self.path.write_text(json.dumps(data, indent=1, allow_nan=False) + "\n")


def spread(values) -> str:
    """"mean (min–max)" of several seeds' values, three significant digits."""
    v = np.asarray(values, dtype=float)
    return f"{v.mean():.3g} ({v.min():.3g}–{v.max():.3g})"
