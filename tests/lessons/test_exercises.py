"""The exercises and their grader. There are twelve exercises, each with a stub, a reference
and known mistakes; every reference passes, every stub as shipped is "not written yet";
every known mistake fails with a report that shows the input, expected against got, where
they differ and the mistake's hint, on the smallest case that shows the mistake; and the
command line reports all of it with the right exit status."""
import inspect
import re
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import check  # lessons/check.py, the autograder's command line (tests/conftest.py puts lessons/ on the path)
from lessonkit import exercises
from lessonkit.exercises import EXERCISES, grade, reference

LESSONS = Path(__file__).resolve().parents[2] / "lessons"
STUBS = {"03": "03_numerical_gradient.py", "04": "04_label_smoothed_gradient.py", "05": "05_adam_update.py",
         "07": "07_layer_norm_backward.py", "08": "08_causal_mask_and_attention.py",
         "09": "09_split_and_merge_heads.py", "10": "10_sinusoidal_table.py", "12": "12_cached_attention_step.py",
         "14": "14_shared_embedding.py", "15": "15_beam_step.py", "16": "16_noam_schedule.py",
         "21": "21_micro_batches.py"}
MISTAKES = [(number, k) for number, ex in EXERCISES.items() for k in range(len(ex.mistakes))]


def _wrong(number: str, words: str) -> types.SimpleNamespace:
    """The known mistake of exercise ``number`` whose hint contains ``words``, as an answer."""
    ex = EXERCISES[number]
    found = [m for m in ex.mistakes if words in m.hint]
    assert len(found) == 1, (number, words)
    return types.SimpleNamespace(**{**ex.reference, **found[0].answer})


def _case_number(report: str) -> int:
    m = re.match(r"case (\d+) of \d+", report)
    assert m, report
    return int(m.group(1))


def test_there_are_these_twelve_exercises_each_with_a_stub_a_reference_and_a_known_mistake():
    assert sorted(EXERCISES) == sorted(STUBS)
    assert sorted(p.name for p in (LESSONS / "exercises").glob("*.py")) == sorted(STUBS.values())
    for number, ex in EXERCISES.items():
        path = check.stub_path(number)
        assert path.name == STUBS[number]
        assert path.read_text().startswith(f'"""Exercise {number} (lesson {int(number)}) — '), path.name
        stub, ref = check.load(path), reference(number)
        assert ex.mistakes, number
        for name in ex.functions:   # the stub asks for exactly what the reference provides
            assert inspect.signature(getattr(stub, name)).parameters.keys() == \
                inspect.signature(getattr(ref, name)).parameters.keys(), (number, name)


def test_the_grader_needs_no_hypothesis():
    for path in (LESSONS / "check.py", Path(exercises.__file__)):
        assert "hypothesis" not in path.read_text().lower(), path.name
    code = "import sys, check; assert 'hypothesis' not in sys.modules, 'hypothesis was imported'"
    out = subprocess.run([sys.executable, "-c", code], cwd=LESSONS, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("number", sorted(EXERCISES))
def test_the_reference_passes_every_case(number):
    ok, report = grade(number, reference(number))
    assert ok, report
    assert report == f"all {len(EXERCISES[number].cases())} cases pass"


@pytest.mark.parametrize("number", sorted(EXERCISES))
def test_the_stub_as_shipped_is_not_written_yet(number):
    ok, report = grade(number, check.load(check.stub_path(number)))
    assert not ok and report.startswith("not written yet"), report


@pytest.mark.parametrize("number,k", MISTAKES)
def test_a_known_mistake_fails_with_a_report_that_teaches(number, k):
    ex = EXERCISES[number]
    mistake = ex.mistakes[k]
    ok, report = grade(number, types.SimpleNamespace(**{**ex.reference, **mistake.answer}))
    assert not ok
    case = ex.cases()[_case_number(report) - 1]
    assert f"  {case.call} with\n" in report, report
    for name in case.inputs:    # the input, every parameter of the call included
        assert re.search(rf"^    {re.escape(name)} +=", report, re.M), (name, report)
    if "your code raised" not in report:
        assert re.search(r"^ +expected ", report, re.M), report
        assert re.search(r"^ +got", report, re.M), report
        assert re.search(r"off in|off by|wrong shape|wrong dtype|got nothing", report), report   # where they differ
    assert f"  hint: {mistake.hint}\n" in report + "\n", report
    for word in ("Hypothesis", "Falsifying", "Traceback", 'File "', "lessonkit", "exercises.py", str(LESSONS)):
        assert word not in report, (word, report)


def test_a_wrong_answer_the_grader_does_not_know_fails_without_a_hint():
    ok, report = grade("16", types.SimpleNamespace(noam_lr=lambda step, d_model, warmup: 1e-3))
    assert not ok and report.startswith("case 1 of 8") and "hint:" not in report, report
    assert "expected 0.25\n" in report and "got      0.001\n" in report and "off by 0.249" in report, report


# the reported case is the first of the ordered list on which the mistake is wrong: each
# mistake below is right exactly on the cases where ``wrong_on`` is False
SMALLEST = [
    ("03", "moved all of x at once", lambda c: c.inputs["x"].size > 1),
    ("03", "does not change with eps", lambda c: c.inputs["eps"] > 1e-3),
    ("04", "without smoothing", lambda c: c.inputs["eps"] > 0),
    ("04", "divided by N", lambda c: len(c.inputs["target"]) > 1),
    ("05", "ignores the lr, betas or eps", lambda c: c.inputs["lr"] != 0.01 or c.inputs["betas"] != (0.9, 0.98)),
    ("07", "γ is missing", lambda c: not np.all(c.inputs["weight"] == 1)),
    ("07", "through the variance", lambda c: c.inputs["x"].shape[-1] > 1),
    ("08", "the diagonal is False", lambda c: True),
    ("08", "not divided by √d_k", lambda c: "q" in c.inputs and c.inputs["q"].shape[-1] > 1),
    ("09", "a plain reshape to (B, h, T, d_k)",
     lambda c: "h" in c.inputs and c.inputs["h"] > 1 and c.inputs["x"].shape[1] > 1),
    ("10", "10000^(i/d)", lambda c: c.inputs["n"] > 1 and c.inputs["d"] > 2),
    ("12", "only the newest position", lambda c: c.inputs["q"].shape[1] > 1),
    ("14", "not multiplied by √d_model", lambda c: "ids" in c.inputs and c.inputs["E"].shape[1] > 1),
    ("15", "scores returned are the tokens'", lambda c: True),
    ("16", "no decay", lambda c: c.inputs["step"] > c.inputs["warmup"]),
    ("21", "averages each micro-batch's per-token gradient", lambda c: len(set(c.inputs["tokens"])) > 1),
]


@pytest.mark.parametrize("number,words,wrong_on", SMALLEST, ids=[f"{n}-{w}" for n, w, _ in SMALLEST])
def test_the_reported_case_is_the_smallest_failing_one(number, words, wrong_on):
    cases = EXERCISES[number].cases()
    first = 1 + next(i for i, c in enumerate(cases) if wrong_on(c))
    ok, report = grade(number, _wrong(number, words))
    assert not ok and _case_number(report) == first, report
    if first > 1:
        assert f"(cases 1–{first - 1} of {len(cases)} pass)" in report or \
            f"(case 1 of {len(cases)} passes)" in report, report


def test_the_smallest_case_of_a_schedule_without_decay_is_one_step_past_the_warm_up():
    ok, report = grade("16", _wrong("16", "no decay"))
    assert report.startswith("case 3 of 8: one step past a warm-up of 1\n"), report
    assert "    step    = 2\n    d_model = 16\n    warmup  = 1\n" in report, report


def test_code_that_raises_is_reported_with_its_line_and_the_input(tmp_path):
    mine = tmp_path / "attention.py"
    mine.write_text("import numpy as np\n\n\ndef causal_mask(T):\n    return np.tril(np.ones((T, T), bool))\n\n\n"
                    "def attention(q, k, v, mask):\n    raise ValueError('not like this')\n")
    ok, report = grade("08", check.load(mine))
    assert not ok, report
    assert report.startswith("case 6 of 12") and "(cases 1–5 of 12 pass)" in report, report   # the masks pass
    assert "your code raised ValueError: not like this\n" in report, report
    assert "in attention, line 9: raise ValueError('not like this')" in report, report
    assert "    mask = None" in report, report


def _run(*args):
    return subprocess.run([sys.executable, str(LESSONS / "check.py"), *args], capture_output=True, text=True)


def test_the_command_line(tmp_path):
    out = _run("all", "--reference")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count(": PASS\n") == len(EXERCISES) and "FAIL" not in out.stdout, out.stdout
    out = _run("16")
    assert out.returncode == 1 and ": FAIL\n" in out.stdout and "not written yet" in out.stdout, out.stdout
    mine = tmp_path / "noam.py"
    mine.write_text("def noam_lr(step, d_model, warmup):\n"
                    "    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)\n")
    out = _run("16", "--file", str(mine))
    assert out.returncode == 0 and ": PASS\n" in out.stdout, out.stdout
    mine.write_text("def noam_lr(step, d_model, warmup):\n    return d_model ** -0.5 * step * warmup ** -1.5\n")
    out = _run("16", "--file", str(mine))
    assert out.returncode == 1 and "case 3 of 8" in out.stdout, out.stdout
    assert "hint: there is no decay: after warmup steps the rate must fall as step^−0.5" in out.stdout, out.stdout
    mine.write_text("def noam_lr(step, d_model, warmup)\n    return 1\n")
    out = _run("16", "--file", str(mine))
    assert out.returncode == 1 and "noam.py does not load: SyntaxError, line 1" in out.stdout, out.stdout
    out = _run("--list")
    assert out.returncode == 0 and len(out.stdout.splitlines()) == len(EXERCISES), out.stdout
    for number, ex in EXERCISES.items():
        assert f"{number}  {ex.title}" in out.stdout and f"lessons/exercises/{STUBS[number]}" in out.stdout
