"""Small helpers shared by the lessons in ``lessons/``: smoke mode, where figures go, and the
record of what a lesson measured.

A lesson's prose describes what to look at; the numbers come from its own run. Each lesson
keeps them in a :class:`Results` (written to ``$LESSON_OUT/<lesson>/results.json`` as they
come), with its findings as sentences built from those numbers. ``lessons/run_all.py --full``
copies the full-mode results to ``lessons/results/`` and regenerates ``lessons/README.md``
from them, so no number there is typed by hand.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np


def smoke() -> bool:
    """True with ``--smoke`` on the command line or ``LESSON_SMOKE=1``: every lesson then runs in seconds."""
    return "--smoke" in sys.argv or os.environ.get("LESSON_SMOKE", "") not in ("", "0")


def figure_dir(lesson: str) -> Path:
    """``$LESSON_OUT/<lesson>`` (default ``runs/lessons/<lesson>``), created."""
    path = Path(os.environ.get("LESSON_OUT", "runs/lessons")) / lesson
    path.mkdir(parents=True, exist_ok=True)
    return path


def multi30k_dir() -> Path:
    """Where the lessons read Multi30k from: ``$MULTI30K_DIR``, else the checkout's
    ``../shared/data/multi30k`` when it is there (a notebook has no ``__file__`` to start from)."""
    if os.environ.get("MULTI30K_DIR"):
        return Path(os.environ["MULTI30K_DIR"])
    return Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"


def _plain(value):
    """JSON-ready: NumPy scalars and arrays to Python numbers and lists."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return _plain(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    return value


class Results:
    """What lesson ``lesson`` measured: ``results["name"] = value`` records a number (or a
    list, or a dict of them) and ``results.finding("...")`` a sentence for the README. Both
    are printed and written at once to ``results.json`` beside the lesson's figures, with the
    mode (smoke or full) and the seconds since the lesson started."""

    def __init__(self, lesson: str):
        self.lesson = lesson
        self.path = figure_dir(lesson) / "results.json"
        self.start = time.perf_counter()
        self.numbers: dict = {}
        self.findings: list[str] = []
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
                "findings": self.findings}
        self.path.write_text(json.dumps(data, indent=1) + "\n")


def spread(values) -> str:
    """"mean (min–max)" of several seeds' values, three significant digits."""
    v = np.asarray(values, dtype=float)
    return f"{v.mean():.3g} ({v.min():.3g}–{v.max():.3g})"
