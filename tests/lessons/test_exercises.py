"""The exercise track and its grader. There are 25 exercises, one per lesson, each a stub in
``lessons/exercises/`` made from its reference solution in ``tests/lessons/solutions/`` with
the pieces to write cut out. Every reference passes; every stub, dropped into the solved track,
is "not written yet"; every known mistake, planted in the reference, fails with a report that
shows the input, expected against got, where they differ and the mistake's hint; the command
line grades a track and runs the capstone, which trains the copy task on the reference engine
to its target."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lessonkit import capstone, grader, track
from lessonkit.exercises import EXERCISES

LESSONS = Path(__file__).resolve().parents[2] / "lessons"
SOLUTIONS = Path(__file__).resolve().parent / "solutions"
MISTAKES = [(number, k) for number, ex in EXERCISES.items() for k in range(len(ex.mistakes))]
LESSON_FILES = sorted(p.name for p in LESSONS.glob("[0-9][0-9]_*.py"))


def test_one_exercise_per_lesson_each_a_stub_made_from_its_solution():
    assert sorted(EXERCISES) == [name[:2] for name in LESSON_FILES] and len(EXERCISES) == 25
    stubs = sorted(p.name for p in track.LEARNER.glob("*.py"))
    assert stubs == sorted(p.name for p in SOLUTIONS.glob("ex*.py")) == \
        [track.path(SOLUTIONS, n).name for n in EXERCISES]
    for number, ex in EXERCISES.items():
        solution = track.path(SOLUTIONS, number).read_text()
        stub = track.path(track.LEARNER, number).read_text()
        assert stub == track.stub_text(solution, number), f"ex{number}: run lessonkit.track.write_stubs()"
        assert stub.startswith(f'"""Exercise {number} (lesson {int(number)}) — '), number
        assert f"Check it with:  python lessons/check.py {number}" in stub, number
        blanks = re.findall(rf'raise NotImplementedError\("exercise {number}: write ([\w.]+)"\)', stub)
        assert sorted(blanks) == sorted(ex.functions), (number, blanks)   # the grader asks for what the stub cuts out
        assert len(ex.mistakes) >= 2, number


def test_each_exercise_builds_on_the_earlier_ones_not_on_minitensor():
    for number in EXERCISES:
        text = track.path(SOLUTIONS, number).read_text()
        imports = re.findall(r"^(?:from|import) (\w+)", text, re.M)
        assert not {"minitensor", "transformer", "lessonkit"} & set(imports), (number, imports)
        for name in imports:
            m = track.NAME.match(name)
            assert m is None or m.group(1) < number, (number, name)
    assert "from ex01_tensor import" in track.path(SOLUTIONS, "02").read_text()
    assert "from ex14_transformer import" in track.path(SOLUTIONS, "15").read_text()


@pytest.mark.parametrize("number", sorted(EXERCISES))
def test_the_reference_passes_every_case(number):
    ok, report = grader.grade(EXERCISES[number], track.load(SOLUTIONS, number))
    assert ok, report
    drawn = f", and {grader.DRAWN} more drawn by hypothesis" if EXERCISES[number].drawn else ""
    assert report == f"all {len(EXERCISES[number].cases())} cases pass{drawn}"


@pytest.mark.parametrize("number", sorted(EXERCISES))
def test_the_reference_passes_with_only_the_exercises_it_builds_on_written(number, tmp_path):
    """A failing exercise's note names the earlier ones to fix first from ``track.builds_on``
    (the files' imports, and the exercises the cases call into): with every other exercise left
    a stub, the reference still passes, so that list leaves none out."""
    needs = set(track.builds_on(SOLUTIONS, number, EXERCISES[number].reaches)) | {number}
    for n in EXERCISES:
        shutil.copy(track.path(SOLUTIONS if n in needs else track.LEARNER, n), tmp_path)
    ok, report = grader.grade(EXERCISES[number], track.load(tmp_path, number))
    assert ok, report


@pytest.mark.parametrize("number", sorted(EXERCISES))
def test_the_stub_in_the_solved_track_is_not_written_yet(number, tmp_path):
    for p in SOLUTIONS.glob("ex*.py"):
        shutil.copy(p, tmp_path)
    shutil.copy(track.path(track.LEARNER, number), tmp_path)
    ok, report = grader.grade(EXERCISES[number], track.load(tmp_path, number))
    assert not ok and report.startswith(f"not written yet (exercise {number}: write "), report


def test_an_exercise_that_stops_at_an_unwritten_earlier_one_names_it():
    ok, report = grader.grade(EXERCISES["22"], track.load(track.LEARNER, "22"))   # the stubs as shipped
    assert not ok and report == "not written yet: this exercise uses your exercise 10, whose sinusoidal_table is " \
                                "not written yet (python lessons/check.py 10)", report


@pytest.mark.parametrize("number,k", MISTAKES)
def test_a_known_mistake_fails_with_a_report_that_teaches(number, k):
    ex = EXERCISES[number]
    mistake = ex.mistakes[k]
    ok, report = grader.grade(ex, grader.mistaken(number, mistake))
    assert not ok, f"the mistake passes every case: {mistake.hint}"
    case = ex.cases()[int(re.match(r"case (\d+) of \d+", report).group(1)) - 1]
    assert f"  {case.call} with\n" in report, report
    for name in case.inputs:    # the input, every parameter of the call included
        assert re.search(rf"^    {re.escape(name)} +=", report, re.M), (name, report)
    if "your code raised" not in report:
        assert re.search(r"^ +expected ", report, re.M), report
        assert re.search(r"^ +got", report, re.M), report
        assert re.search(r"off in|off by|off: |wrong shape|wrong dtype|got nothing|missing: |not expected: |not in the same order", report), report
    assert f"  hint: {mistake.hint}\n" in report + "\n", report
    for word in ("Hypothesis", "Falsifying", "Traceback", 'File "', "lessonkit", "exercises.py", "grader.py"):
        assert word not in report, (word, report)


def test_a_wrong_list_of_names_is_reported_by_what_is_missing_what_is_not_expected_or_the_order():
    assert grader._compare_names(["a", "b"], ["a", "b"]) == []
    assert grader._compare_names(["a"], ["a", "b"]) == ["missing: b"]
    assert grader._compare_names(["a", "c", "b"], ["a", "b"]) == ["not expected: c"]
    assert grader._compare_names(["c"], ["a"]) == ["missing: a", "not expected: c"]
    assert grader._compare_names(["b", "a"], ["a", "b"]) == ["the same names, but not in the same order (or one repeated)"]
    assert grader._compare_names(["a", "a"], ["a"]) == ["the same names, but not in the same order (or one repeated)"]
    many = [f"n{i}" for i in range(10)]
    assert grader._compare_names([], many) == ["missing: n0, n1, n2, n3, n4, n5 … (10 in all)"]


def test_a_wrong_answer_the_grader_does_not_know_fails_without_a_hint():
    answer = grader.mistaken("16", grader.Mistake("", {"noam_lr": lambda step, d_model, warmup, factor=1.0: 1e-3}))
    ok, report = grader.grade(EXERCISES["16"], answer)
    assert not ok and report.startswith("case 1 of ") and "hint:" not in report, report
    assert "expected 0.25\n" in report and "got      0.001\n" in report and "off by 0.249" in report, report


@pytest.mark.parametrize("number,k", MISTAKES)
def test_the_reported_case_is_the_smallest_failing_one(number, k):
    ex = EXERCISES[number]
    wrong = grader.mistaken(number, ex.mistakes[k])
    cases = ex.cases()
    first = 1 + next(i for i, c in enumerate(cases) if not grader._passes(c, wrong))
    ok, report = grader.grade(ex, wrong)
    assert report.startswith(f"case {first} of {len(cases)}: "), report
    assert first == 1 or f"(cases 1–{first - 1} of {len(cases)} pass)" in report or \
        f"(case 1 of {len(cases)} passes)" in report, report


def test_once_the_fixed_cases_pass_hypothesis_draws_more_and_reports_the_smallest_failing_one():
    # a sum_to that is wrong only from three axes down to one, which no fixed case asks for
    answer = grader.mistaken("02", grader.Mistake("", {"sum_to": ThreeToOneWrong()}))
    ex = EXERCISES["02"]
    assert all(grader._passes(c, answer) for c in ex.cases())
    ok, report = grader.grade(ex, answer)
    assert not ok, report
    assert report.startswith("a case drawn by hypothesis, the smallest it found that fails: sum_to\n"), report
    assert f"(all {len(ex.cases())} fixed cases pass)" in report, report
    grad = re.search(r"grad  = (.*?)\n    shape", report, re.S).group(1)
    assert grad.count("[") == 3 and set(re.findall(r"-?\d+\.\d*", grad)) <= {"0.", "0.0"}, report   # shrunk: zeros
    for word in ("Hypothesis", "Falsifying", "Traceback", 'File "'):
        assert word not in report, (word, report)


class ThreeToOneWrong(grader.Using):
    def __init__(self):
        def make(module):
            right = module.sum_to
            return lambda grad, shape: right(grad, shape) + (1.0 if grad.ndim == 3 and len(shape) == 1 else 0.0)
        super().__init__(make)


def _solved_but(tmp_path, number: str, old: str, new: str):
    """The reference track copied to ``tmp_path``, exercise ``number``'s ``old`` text replaced
    by ``new``: that exercise, loaded as the grader loads a learner's."""
    for p in SOLUTIONS.glob("ex*.py"):
        shutil.copy(p, tmp_path)
    mine = tmp_path / track.path(SOLUTIONS, number).name
    text = mine.read_text()
    assert text.count(old) == 1, old
    mine.write_text(text.replace(old, new))
    return track.load(tmp_path, number)


def test_code_that_raises_is_reported_with_its_file_line_and_the_input(tmp_path):
    answer = _solved_but(tmp_path, "08", "    scores = q @ k.transpose() / np.sqrt(q.shape[-1])\n",
                         "    raise ValueError('not like this')\n")
    ok, report = grader.grade(EXERCISES["08"], answer)
    assert not ok, report
    assert "your code raised ValueError: not like this\n" in report, report
    assert "ex08_attention.py, in attention, line" in report and ": raise ValueError('not like this')" in report, report
    assert re.search(r"\(cases 1–\d+ of \d+ pass\)", report), report     # softmax and the masks pass


def test_an_import_inside_a_learners_function_finds_their_own_earlier_exercise(tmp_path):
    """A learner may import inside a function; run while graded, the import must give the track's
    own module (the one the grader loaded), not fail or load another copy."""
    old = "    scores = q @ k.transpose() / np.sqrt(q.shape[-1])\n"
    answer = _solved_but(tmp_path, "08", old, "    from ex01_tensor import Tensor\n    assert isinstance(q, Tensor)\n" + old)
    ok, report = grader.grade(EXERCISES["08"], answer, draw=False)
    assert ok, report


def _run(*args, cwd=None):
    return subprocess.run([sys.executable, str(LESSONS / "check.py"), *args], capture_output=True, text=True, cwd=cwd)


def test_the_exercises_an_exercise_builds_on_are_the_ones_it_imports_directly_or_not(tmp_path):
    """What the grader tells a learner to fix first: exercise 14 imports 05, 08, 10, 11 and 12,
    which import 01-04 and the rest; exercises 20 and 24 import none, so none is named."""
    assert track.builds_on(SOLUTIONS, "14") == [f"{n:02d}" for n in range(1, 13) if n not in (3, 4)]
    assert track.builds_on(SOLUTIONS, "20") == track.builds_on(SOLUTIONS, "24") == []
    assert track.builds_on(SOLUTIONS, "01") == []
    for p in SOLUTIONS.glob("ex*.py"):
        shutil.copy(p, tmp_path)
    (tmp_path / track.path(SOLUTIONS, "08").name).write_text("import ex04_cross_entropy\nthis does not parse(\n")
    assert track.builds_on(tmp_path, "09") == track.builds_on(SOLUTIONS, "09") and "08" in track.builds_on(tmp_path, "09")


def test_the_command_line(tmp_path):
    out = _run("all", "--dir", str(SOLUTIONS))
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count(": PASS\n") == len(EXERCISES) and "FAIL" not in out.stdout, out.stdout
    out = _run("16")       # the stubs as shipped
    assert out.returncode == 1 and ": FAIL\n" in out.stdout and "not written yet" in out.stdout, out.stdout
    out = _run("09")       # the stubs as shipped: 09 imports 08, 06 and 05, which import 02 and 01
    assert "note: exercise 09 uses your earlier exercises, and 01, 02, 05, 06, 08 fail their own check" in out.stdout, \
        out.stdout
    out = _run("20")       # BLEU in plain Python: it builds on no earlier exercise, so none is named
    assert out.returncode == 1 and "not written yet" in out.stdout and "note:" not in out.stdout, out.stdout
    out = _run("capstone")
    assert out.returncode == 1, out.stdout
    assert "the capstone needs exercises 01–16 to pass; these do not yet: 01, 02" in out.stdout, out.stdout
    for p in SOLUTIONS.glob("ex*.py"):
        shutil.copy(p, tmp_path)
    broken = tmp_path / track.path(SOLUTIONS, "05").name
    broken.write_text(broken.read_text().replace("class Linear(Module):", "class Linear(Module)"))
    out = _run("09", "--dir", str(tmp_path))
    assert out.returncode == 1 and "ex05_module_and_adam.py does not load: SyntaxError, line" in out.stdout, out.stdout
    out = _run("--list")
    assert out.returncode == 0 and len(out.stdout.splitlines()) == len(EXERCISES) + 1, out.stdout
    for number, ex in EXERCISES.items():
        assert f"{number}  {ex.title}" in out.stdout and track.path(track.LEARNER, number).name in out.stdout
    out = _run("99")
    assert out.returncode == 2 and out.stderr == "error: no exercise 99: see python lessons/check.py --list\n", out


def test_the_command_line_into_a_closed_pipe_ends_quietly_with_status_141():
    """``check.py --list | head``: the reader gone, no traceback, the status a shell gives a
    program SIGPIPE ended (the pipe has no reader at all here, so the write always fails)."""
    read, write = os.pipe()
    os.close(read)
    try:
        p = subprocess.run([sys.executable, str(LESSONS / "check.py"), "--list"], stdout=write, stderr=subprocess.PIPE,
                           text=True, timeout=120)
    finally:
        os.close(write)
    assert p.returncode == 141 and p.stderr == "", p.stderr


def test_a_capstone_that_stops_is_reported_in_one_line(monkeypatch, capsys):
    import check   # lessons/check.py (tests/conftest.py puts lessons/ on the path)
    monkeypatch.setattr(check, "CAPSTONE_NEEDS", [])
    monkeypatch.setattr(capstone, "run", lambda *a, **k: (_ for _ in ()).throw(FloatingPointError("the loss became nan")))
    assert check.main(["capstone", "--dir", str(SOLUTIONS)]) == 1
    assert capsys.readouterr().out == "the capstone stopped: FloatingPointError: the loss became nan\n"


def test_the_capstone_trains_the_copy_task_on_the_reference_engine_to_its_target():
    lines = []
    summary = capstone.run(SOLUTIONS, say=lines.append)
    assert summary["reached"] and summary["val_exact_match"] == 1.0, lines
    assert summary["test_exact_match"] >= 0.95, lines       # fresh sequences, never seen
    assert summary["updates"] < 1500, lines                 # the recipe's budget
    assert summary["seconds_per_update"] > 0 and summary["minitensor_seconds_per_update"] > 0
    assert re.search(r"time per update \(median\): your engine [\d.]+ ms, minitensor [\d.]+ ms "
                     r"on the same first 20 batches", lines[-1]), lines


def test_the_lessons_readme_lists_every_exercise_with_its_file_and_what_to_write():
    text = (LESSONS / "README.md").read_text()
    for number, ex in EXERCISES.items():
        row = f"| {number} | `{track.path(track.LEARNER, number).name}` | {', '.join(f'`{f}`' for f in ex.functions)} |"
        assert row in text, row
    for path in LESSONS.glob("[0-9][0-9]_*.py"):    # every lesson points at its own exercise
        number = path.name[:2]
        assert f"`lessons/exercises/{track.path(track.LEARNER, number).name}`" in path.read_text(), path.name
        assert f"`python lessons/check.py {number}`" in path.read_text(), path.name


def test_an_error_raised_in_an_earlier_exercise_shows_the_graded_exercises_line_first(tmp_path):
    """Exercise 12's decoder calls exercise 02's masked_fill through 08 and 09: a bad mask raises
    in 02, and the report names the learner's line in 12 that led there, then the innermost."""
    old = "        x = self.sub1(x, lambda x: self.self_attn(x, x, x, tgt_mask))\n        x = self.sub2"
    answer = _solved_but(tmp_path, "12", old, "        x = self.sub1(x, lambda x: self.self_attn(x, x, x, "   # (ex12 has no np)
                         "__import__('numpy').ones((5, 7), bool)))\n        x = self.sub2")
    ok, report = grader.grade(EXERCISES["12"], answer)
    assert not ok and "your code raised" in report, report
    line = report.split("your code raised", 1)[1].splitlines()[1]
    assert line.strip().startswith("ex12_decoder_layer.py, in ") and "; inside ex0" in line, report


@pytest.mark.parametrize("number,k", MISTAKES)
def test_a_known_mistake_gets_its_own_hint_and_no_other_that_disagrees_later(number, k):
    """Where two known mistakes give the same values on the failing case, the report keeps the
    one that goes on agreeing with the answer: a known mistake's report shows its own hint, and
    no hint of a mistake that differs from it on a later case."""
    ex = EXERCISES[number]
    wrong = grader.mistaken(number, ex.mistakes[k])
    ok, report = grader.grade(ex, wrong)
    hints = re.findall(r"^  hint: (.*)$", report, re.M)
    assert ex.mistakes[k].hint in hints, report
    for other in ex.mistakes:
        if other.hint in hints and other.hint != ex.mistakes[k].hint:
            theirs = grader.mistaken(number, other)
            for c in ex.cases():
                n = len(c.expected) - 1
                assert grader._agree(c, grader._values(c, wrong, n), grader._values(c, theirs, n)), (other.hint, c.title)
