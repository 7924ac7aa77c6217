"""The lessons as a course: each runs (smoke mode, in the book's build or as a plain script)
and shows its figures; they read front to back (no lesson uses what a later one teaches, and
the order test fails on a planted forward use); no lesson checks a wall-clock time; a lesson
without its data says in one line what to set; the READMEs show exactly what the lessons
recorded."""
import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import run_all  # lessons/run_all.py (tests/conftest.py puts lessons/ on the path)
from lessonkit import syllabus

from .conftest import book_can_be_built

LESSONS = syllabus.lesson_files()
HERE = LESSONS[0].parent
NEEDS_MULTI30K = [p for p in LESSONS if "multi30k(" in p.read_text()]


def test_the_lessons_are_numbered_in_order_without_gaps_and_titled_with_their_number():
    numbers = [int(p.name[:2]) for p in LESSONS]
    assert numbers == list(range(1, len(LESSONS) + 1)) and len(numbers) >= 24
    assert [lesson.number for lesson in syllabus.course()] == numbers


def _numpy_reprs(printed: str) -> list[str]:
    """Lines showing NumPy 2's scalar reprs such as np.float64(28.2): a learner reads numbers."""
    return re.findall(r".*\bnp\.(?:float|int|uint|bool)\w*\(.*", printed)


def _run_as_script(lesson: Path, out: Path) -> str:
    """Run ``lesson`` in smoke mode as a plain script, its figures and results under ``out``; its stdout."""
    env = {**os.environ, "LESSON_SMOKE": "1", "LESSON_OUT": str(out), "MPLBACKEND": "Agg"}
    proc = subprocess.run([sys.executable, str(lesson)], cwd=out, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.stem)
def test_lesson_runs_in_smoke_mode_prints_plain_numbers_records_results_and_saves_figures(lesson, request, tmp_path):
    """The run checked is the book's where this session builds the book (tests/lessons/conftest.py):
    the same smoke run, in a Jupyter kernel, and running every lesson a second time as a script
    would be the suite's longest part again. Elsewhere the lesson runs here as a script; the next
    test runs one as a script in every case, and CI's last step runs them all so in full mode."""
    if lesson in NEEDS_MULTI30K and not os.environ.get("MULTI30K_DIR"):
        pytest.skip("needs Multi30k: set MULTI30K_DIR (tests never download)")
    if book_can_be_built():
        _, book_dir, items = request.getfixturevalue("built")
        item = next(it for it in items if it["file"] == lesson)
        assert "failed" not in item, item.get("failed")
        printed, out = item["printed"], book_dir / "figures"
    else:
        printed, out = _run_as_script(lesson, tmp_path), tmp_path
    assert not _numpy_reprs(printed), f"NumPy scalar reprs in the output: {_numpy_reprs(printed)[:3]}"
    assert list((out / lesson.name[:2]).glob("*.png")), "the lesson saved no figure"
    assert (out / lesson.name[:2] / "results.json").exists(), "the lesson recorded no results"


def test_a_lesson_runs_as_a_plain_script_in_smoke_mode(tmp_path):
    """`python lessons/08_….py`, as a learner without Jupyter runs it: it exits cleanly, prints
    plain numbers, saves its two figures and records its results."""
    lesson = next(p for p in LESSONS if p.name.startswith("08_"))
    printed = _run_as_script(lesson, tmp_path)
    assert not _numpy_reprs(printed)
    assert sorted(p.name for p in (tmp_path / "08").glob("*.png")) == ["attention_masks.png",
                                                                     "scaling_and_gradients.png"]
    assert (tmp_path / "08" / "results.json").exists()


def test_a_lesson_refuses_a_flag_other_than_smoke_in_one_line_and_runs_nothing(tmp_path):
    """A typo such as --smok must not start the full lesson (minutes, for some) without a word."""
    lesson = LESSONS[0]
    env = {**os.environ, "LESSON_OUT": str(tmp_path), "MPLBACKEND": "Agg"}
    env.pop("LESSON_SMOKE", None)
    run = lambda *flags: subprocess.run([sys.executable, str(lesson), *flags], cwd=tmp_path, env=env,  # noqa: E731
                                        capture_output=True, text=True, timeout=120)
    typo = run("--smok")
    assert typo.returncode == 2 and typo.stdout == "", typo.stdout[-500:]
    assert typo.stderr.strip().splitlines()[-1] == "error: a lesson takes one flag, --smoke; got --smok"
    assert not list(tmp_path.rglob("*.png"))
    usage = run("--help")
    assert usage.returncode == 0 and usage.stdout.startswith(f"usage: python lessons/{lesson.name} [--smoke]")
    assert not list(tmp_path.rglob("*.png"))


def test_a_lesson_prints_each_line_as_it_goes_even_into_a_pipe():
    """Piped (into tee, a log, a pager), Python holds printed lines back until its buffer fills:
    a lesson that runs for minutes would show nothing until the end. The kit makes stdout
    line-buffered, so each seed's line arrives when it is printed."""
    lessons = Path(run_all.__file__).resolve().parent
    proc = subprocess.run([sys.executable, "-c", "import sys, lessonkit; print(sys.stdout.line_buffering)"],
                          cwd=lessons, capture_output=True, text=True, timeout=60, env={**os.environ, "MPLBACKEND": "Agg"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True"


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.stem)
def test_lesson_is_literate_and_imports_the_package_and_its_kit(lesson):
    text = lesson.read_text()
    assert text.startswith(f"# %% [markdown]\n# # Lesson {int(lesson.name[:2])} — ")
    assert "sys.path" not in text and "matplotlib.use(" not in text and "savefig(" not in text  # the kit does those
    assert "from lessonkit import" in text and f'Results("{lesson.name[:2]}")' in text
    if not lesson.name.startswith("01_"):  # lesson 1 builds its own scalar engine first, on purpose
        assert "import minitensor" in text or "from transformer" in text


# ---------------------------------------------------------------- the reading order
def test_the_lessons_read_front_to_back():
    """No lesson uses a name or a concept that a later lesson teaches; everything a lesson
    imports from the package is taught by then; nothing is taught twice."""
    assert syllabus.problems(syllabus.course()) == []


def _planted(name: str, edit) -> list[str]:
    path = next(p for p in LESSONS if p.name.startswith(name))
    return syllabus.problems(syllabus.course({path.name: edit(path.read_text())}))


def test_the_order_test_fails_on_a_forward_use_planted_in_the_code():
    found = _planted("03_", lambda t: t + "\n# %%\nfrom transformer.decoding import greedy_decode\n")
    assert found == ["lesson 3: its code uses `greedy_decode`, taught later, in lesson 14"]


def test_the_order_test_reads_the_prose_and_fails_on_an_api_name_a_later_lesson_teaches():
    """A code span in the prose tells the reader what to use: naming a later lesson's API there
    breaks the order as a use in the code does (the trainer's settings in lesson 21, taught in 22)."""
    found = _planted("21_", lambda t: t.replace("# `--update-freq k`; lesson 24", "# `TrainSettings(update_freq=k)`; lesson 24", 1))
    assert found == ["lesson 21: its prose names `TrainSettings`, taught later, in lesson 22"]


def test_the_order_test_fails_on_a_method_a_later_lesson_teaches():
    found = _planted("05_", lambda t: t + "\n# %%\nclone.eval()\n")
    assert found == ["lesson 5: its code uses `eval`, taught later, in lesson 6"]


def test_the_order_test_fails_on_a_check_that_needs_something_taught_later():
    found = _planted("02_", lambda t: t + "\n# %%\nchecks.passes_gradcheck(F.matmul, [h, W], 'matmul')\n")
    assert found == ["lesson 2: its code uses `gradcheck`, taught later, in lesson 3"]


def test_the_order_test_fails_on_a_concept_declared_before_it_is_taught():
    found = _planted("04_", lambda t: t.replace("# **Uses:** softmax,", "# **Uses:** beam search, softmax,", 1))
    assert found == ["lesson 4: uses 'beam search', taught later, in lesson 15"]


def test_the_order_test_fails_on_an_import_no_lesson_teaches_and_on_a_false_teaches_line():
    found = _planted("08_", lambda t: t.replace("from transformer import causal_mask, padding_mask",
                                                "from transformer import causal_mask, padding_mask, target_mask"))
    assert "lesson 8: its code uses `target_mask`, taught later, in lesson 12" in found
    found = _planted("08_", lambda t: t.replace("# `padding_mask`; attention, masks.", "# `padding_mask`, `beam_search`; "
                                                "attention, masks."))
    assert "lesson 8: teaches `beam_search` but its code never mentions it" in found
    assert "lesson 8: `beam_search` is already taught by lesson 8" not in found


# ---------------------------------------------------------------- no clock in a check
def _timed_names(tree: ast.AST) -> set[str]:
    """Names whose value comes from a clock: assigned from perf_counter()/time(), or from a
    function that reads one, or from such names (followed to a fixed point)."""
    def reads_clock(node):
        return any(isinstance(n, ast.Attribute) and n.attr in ("perf_counter", "time", "monotonic")
                   for n in ast.walk(node))

    funcs = {f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and reads_clock(f)}
    tainted: set[str] = set()
    while True:
        before = len(tainted)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value is not None:
                value = node.value
                names = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
                if reads_clock(value) or names & (tainted | funcs):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    tainted |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        if len(tainted) == before:
            return tainted


def timed_checks(code: str) -> list[str]:
    """The lesson-kit checks whose arguments carry a clock reading."""
    tree = ast.parse(code)
    tainted = _timed_names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                isinstance(node.func.value, ast.Name) and node.func.value.id == "checks":
            if {n.id for a in node.args + [k.value for k in node.keywords] for n in ast.walk(a)
                    if isinstance(n, ast.Name)} & tainted:
                found.append(f"checks.{node.func.attr} at line {node.lineno}")
    return found


def test_no_lesson_checks_a_wall_clock_time():
    for lesson in syllabus.course():
        assert timed_checks(lesson.code) == [], lesson.file.name


def test_the_clock_rule_catches_a_timing_check():
    code = next(lesson for lesson in syllabus.course() if "median_seconds" in lesson.code).code
    planted = code + "\nratio = times['self-attention'][0] / times['recurrent'][0]\nchecks.between([ratio], 0, 1, 'x')\n"
    assert timed_checks(planted) == [f"checks.between at line {len(planted.splitlines())}"]


# ---------------------------------------------------------------- data
@pytest.mark.parametrize("lesson", NEEDS_MULTI30K[:1], ids=lambda p: p.stem)
def test_without_data_or_network_a_lesson_says_in_one_line_what_to_set(lesson, tmp_path):
    """No MULTI30K_DIR, an empty cache, and every connection refused (a proxy on a closed
    port of 127.0.0.1 stands in for no network): one line on stderr naming MULTI30K_DIR."""
    env = {k: v for k, v in os.environ.items() if k != "MULTI30K_DIR"}
    env.update(LESSON_SMOKE="1", LESSON_OUT=str(tmp_path / "out"), MINITENSOR_CACHE=str(tmp_path / "cache"),
               MPLBACKEND="Agg", http_proxy="http://127.0.0.1:9", https_proxy="http://127.0.0.1:9",
               HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9")
    proc = subprocess.run([sys.executable, str(lesson)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "set MULTI30K_DIR" in lines[0] and "Traceback" not in proc.stderr, proc.stderr


def test_the_kit_never_defaults_to_a_path_outside_the_checkout(monkeypatch):
    import lessonkit

    monkeypatch.delenv("LESSON_OUT", raising=False)
    root = Path(lessonkit.__file__).resolve().parents[2]
    chain = [root / "runs" / "lessons" / "99", root / "runs" / "lessons", root / "runs"]
    new = [folder for folder in chain if not folder.exists()]
    try:
        assert lessonkit.figure_dir("99").resolve().is_relative_to(root)
    finally:
        for folder in new:  # the folders the kit made here go again, deepest first
            folder.rmdir()
    assert "shared" not in Path(lessonkit.__file__).read_text()


# ---------------------------------------------------------------- what the lessons recorded
def test_the_lessons_readme_shows_exactly_the_recorded_full_runs():
    """The generated part of lessons/README.md (run times, findings) and results/margins.md
    are what `run_all.py --full --update` renders from lessons/results/: nothing typed by
    hand, nothing stale, every lesson recorded in full mode under both BLAS settings."""
    assert run_all.README.read_text() == run_all.rendered_readme(), "regenerate: python lessons/run_all.py --full --update"
    records = run_all.recorded()
    assert [r["lesson"] for r in records] == [p.name[:2] for p in LESSONS], "every lesson has a recorded full run"
    assert run_all.MARGINS.read_text() == run_all.render_margins(records)
    for r in records:
        assert r["mode"] == "full" and r["file"] == next(p.name for p in LESSONS if p.name[:2] == r["lesson"])
        assert {run["blas"] for run in r["runs"]} == {"haswell", "unset"} and len(r["runs"]) >= 6, r["lesson"]


def test_a_number_that_differs_between_recorded_runs_is_flagged_beside_the_findings():
    """A finding is quoted from one run; a number that another run (another BLAS setting, another
    machine load) gave differently is listed with its range per setting, so that a learner whose
    run prints another value knows it was expected. Round-off-sized differences are not."""
    runs = [{"blas": "unset", "numbers": {"updates": 450, "error": 1.1e-16, "slope": -0.66, "same": 0.5}},
            {"blas": "haswell", "numbers": {"updates": 250, "error": 2.2e-16, "slope": -0.67, "same": 0.5}},
            {"blas": "haswell", "numbers": {"updates": 300, "error": 1.0e-16, "slope": -0.661, "same": 0.5}}]
    record = {"lesson": "14", "file": "14_the_whole_model_on_the_copy_task.py", "seconds": 1.0,
              "findings": ["copies after 450 updates."],
              "runs": [{**r, "kernels": "k", "seconds": 1.0, "checks": {}} for r in runs]}
    assert run_all.varying(record) == \
        "`updates` 450 (unset), 250–300 (haswell); `slope` -0.66 (unset), -0.67–-0.661 (haswell)"
    block = run_all.render_block([record])
    assert "- **Lesson 14**: copies after 450 updates.\n  - *Not the same in every recorded run*" in block
    assert run_all.varying({**record, "runs": record["runs"][:1]}) == ""


def test_per_seed_lists_and_called_differences_that_differ_between_runs_are_flagged_too():
    """Most findings are per-seed lists (nested in dicts) and the differences a lesson called:
    a list that another run gave differently is shown as mean (min–max) per BLAS setting, as the
    finding shows it, and a call that only some runs made is named with the runs that made it.
    Per-seed lists that agree to round-off are not flagged."""
    def run(blas, heads, called):
        return {"blas": blas, "kernels": "k", "seconds": 1.0, "checks": {},
                "numbers": {"base": {"loss": heads, "params": 100}, "same": [1.0, 2.0], "called": called}}
    record = {"lesson": "19", "file": "19_table3_replay.py", "seconds": 1.0, "findings": ["(A) 8 heads worse."],
              "runs": [run("unset", [1.0, 2.0, 3.0], ["(A) worse", "(C) better"]),
                       run("haswell", [1.0, 2.0, 6.0], ["(C) better"]),
                       run("haswell", [1.0, 2.0000001, 6.0], ["(C) better", "(D) better"])]}
    assert run_all.varying(record) == (
        "`base.loss` 2 (1–3) (unset), 3 (1–6) (haswell); "
        "`called`: “(A) worse” in the unset runs only; “(D) better” in some haswell runs only")
    agreeing = {**record, "runs": [run("unset", [1.0, 2.0], ["x"]), run("haswell", [1.0, 2.0000001], ["x"])]}
    assert run_all.varying(agreeing) == ""
    for r, ms in zip(agreeing["runs"], (1.0, 3.0)):  # a time of the machine's differs by nature: not listed
        r["numbers"]["median_ms_on_this_machine/layer"] = {"16": ms}
    assert run_all.varying(agreeing) == ""


def test_a_full_run_that_prints_other_numbers_than_its_recorded_runs_names_what_moved():
    """The engine's round-off moves with the code: a full run compares itself with the recorded
    runs of its BLAS kernels, so a change that moves what lessons/README.md shows is seen (nested
    numbers too, a lesson's per-seed lists), while round-off-sized differences are not."""
    numbers = {"loss": {"last": [0.102, 0.118], "best": [0.097, 0.097]}, "slope": -0.66, "updates": 450, "ms": 9.0}
    record = {"lesson": "21", "runs": [{"blas": "unset", "kernels": "SkylakeX", "numbers": numbers},
                                       {"blas": "unset", "kernels": "SkylakeX", "numbers": {**numbers, "ms": 12.0}},
                                       {"blas": "haswell", "kernels": "Haswell",
                                        "numbers": {**numbers, "updates": 250}}]}
    run = lambda kernels, numbers: {"kernels": kernels, "numbers": numbers}   # noqa: E731
    assert run_all.drift(run("SkylakeX", numbers), record) == ""
    # a time varies from run to run: "ms" is not compared, since the recorded runs disagree on it
    moved = {"loss": {"last": [0.102, 0.248], "best": [0.097, 0.0971]}, "slope": -0.6601, "updates": 400, "ms": 30.0}
    assert run_all.drift(run("SkylakeX", moved), record) == "`loss` 1 of 4 values; `updates` 1 of 1 value"
    assert run_all.drift(run("SkylakeX", {**numbers, "new": 1.0}), record) == "`new` 1 of 1 value"
    assert run_all.drift(run("Haswell", {**numbers, "updates": 250}), record) == ""
    assert run_all.drift(run("Zen", moved), record) == ""          # no recorded run with these kernels
    assert run_all.drift(run("SkylakeX", numbers), None) == ""     # a lesson never recorded


def test_every_recorded_check_held_in_every_run():
    """The bounds in the lessons hold with the values every recorded run saw (both BLAS settings)."""
    for r in run_all.recorded():
        for name, c in r["checks"].items():
            if c["kind"] == "between":
                low, high = c["bound"]
                assert (low is None or c["seen"][0] >= low) and (high is None or c["seen"][1] <= high), (r["lesson"], name)
            else:
                assert c["better, highest"] < c["worse, lowest"], (r["lesson"], name)


def test_the_lessons_readme_table_lists_every_lesson_in_order_with_its_title():
    text = (HERE / "README.md").read_text().split("<!-- begin generated")[0]
    rows = [line.split("|") for line in text.splitlines() if line.startswith("| ") and line[2:4].isdigit()]
    course = syllabus.course()
    listed = [(int(r[1]), r[2].strip()) for r in rows][:len(course)]
    assert listed == [(lesson.number, lesson.title) for lesson in course]
