"""Small helpers shared by the lessons in ``lessons/``: smoke mode and where figures go."""
from __future__ import annotations

import os
import sys
from pathlib import Path


def smoke() -> bool:
    """True with ``--smoke`` on the command line or ``LESSON_SMOKE=1``: every lesson then runs in seconds."""
    return "--smoke" in sys.argv or os.environ.get("LESSON_SMOKE", "") not in ("", "0")


def figure_dir(lesson: str) -> Path:
    """``$LESSON_OUT/<lesson>`` (default ``runs/lessons/<lesson>``), created."""
    path = Path(os.environ.get("LESSON_OUT", "runs/lessons")) / lesson
    path.mkdir(parents=True, exist_ok=True)
    return path
