"""Every lesson runs (in smoke mode) as a plain script and saves its figures."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

LESSONS = sorted((Path(__file__).resolve().parents[1] / "lessons").glob("[0-9][0-9]_*.py"))


def test_the_lessons_are_numbered_in_order_without_gaps():
    numbers = [int(p.name[:2]) for p in LESSONS]
    assert numbers == list(range(1, len(LESSONS) + 1)) and len(numbers) >= 19


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.stem)
def test_lesson_runs_in_smoke_mode_and_saves_figures(lesson, tmp_path):
    env = {**os.environ, "LESSON_SMOKE": "1", "LESSON_OUT": str(tmp_path), "MPLBACKEND": "Agg"}
    proc = subprocess.run([sys.executable, str(lesson)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert list(tmp_path.rglob("*.png")), "the lesson saved no figure"


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.stem)
def test_lesson_is_literate_and_imports_the_package(lesson):
    text = lesson.read_text()
    assert text.startswith("# %% [markdown]\n# # Lesson ")
    assert "sys.path" not in text
    if not lesson.name.startswith("01_"):  # lesson 1 builds its own scalar engine first, on purpose
        assert "import minitensor" in text or "from transformer" in text
