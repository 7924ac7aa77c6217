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


def _run_all():
    import importlib.util

    spec = importlib.util.spec_from_file_location("run_all", LESSONS[0].parent / "run_all.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_lessons_readme_shows_exactly_the_recorded_full_runs():
    """The generated part of lessons/README.md (run times, findings with their numbers) is what
    `run_all.py --full --update` renders from lessons/results/: nothing typed by hand, nothing stale."""
    run_all = _run_all()
    assert run_all.README.read_text() == run_all.rendered_readme(), "regenerate: python lessons/run_all.py --full --update"
    records = run_all.recorded()
    assert [r["lesson"] for r in records] == [p.name[:2] for p in LESSONS], "every lesson has a recorded full run"
    assert all(r["mode"] == "full" for r in records)
    for r in records:   # findings come only from lessons that record what they measure
        if 'Results("' not in (LESSONS[0].parent / r["file"]).read_text():
            assert not r["findings"] and not r["numbers"], r["file"]
