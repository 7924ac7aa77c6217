"""The book of the lessons builds (smoke mode), and a real headless Chromium finds every page
sound: no broken image, no console error, no raw TeX left in the prose, no output wider than
the page, the index listing the lessons in order. Figures are part of the cells' output, in
the book and in a notebook executed by nbconvert. Screenshots of the index and of lessons
8, 9 and 23 are saved in the book's folder."""
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import book  # lessons/book.py (tests/conftest.py puts lessons/ on the path)

from ..helpers import require

from .conftest import require_extra as _require_extra

LESSONS = Path(__file__).resolve().parents[2] / "lessons"


def _page(items, number):
    return next(it for it in items if it["number"] == number)


def test_every_lesson_becomes_a_page_in_order_with_its_paper_section_teachings_and_run_time(built):
    book, out, items = built
    assert [it["page"] for it in items] == [p.stem + ".html" for p in book.lessons()]
    index = (out / "index.html").read_text()
    pages = re.findall(r'<li><a href="([^"]+)"', index)
    assert pages == [it["page"] for it in items]
    assert "(Section 3.2.1, equation 1)" in index and "(smoke mode)" in index
    for it in items:
        assert it["seconds"] > 0 and (out / it["page"]).exists()
    assert "<code>scaled_dot_product_attention</code>" in index


def test_pages_link_neighbours_prerequisites_and_package_files_and_show_figures_and_math(built):
    _, out, items = built
    for i, it in enumerate(items):
        page = (out / it["page"]).read_text()
        if i > 0:
            assert f'href="{items[i - 1]["page"]}"' in page
        if i + 1 < len(items):
            assert f'href="{items[i + 1]["page"]}"' in page
        for link in re.findall(r'<a href="(src/[^"]+)"', page):
            assert (out / link).exists(), link
        assert "cdnjs" not in page and "mathjax" not in page.lower()   # nothing from the network
        assert it["figures"] >= 1 and page.count('src="data:image/png;base64') == it["figures"], it["page"]
    attention = (out / _page(items, "08")["page"]).read_text()
    assert "<math" in attention and 'display="block"' in attention
    assert "src/transformer/masks.py.html" in attention
    assert attention.count('src="data:image/png;base64') == 2                 # its two figures, inline
    assert f'<a href="{_page(items, "03")["page"]}">softmax</a>' in attention   # "Uses" links to where it is taught
    assert '<details class="book-fold">' in attention                    # the plotting code is folded
    # MathML a browser reads: unprefixed, in the headings too (lesson 8's "The effect of the 1/√d_k scaling")
    for it in items:
        page = (out / it["page"]).read_text()
        assert not re.search(r"<ns\d+:", page), it["page"]
        assert "PosixPath(" not in page, it["page"]                  # a figure is not followed by its path
    assert re.search(r"<h2[^>]*>[^<]*The effect of the <math", attention)


def test_mathml_that_nbconvert_prefixed_is_made_plain_again():
    prefixed = '<h2>of <ns0:math xmlns:ns0="http://www.w3.org/1998/Math/MathML"><ns0:mi>d</ns0:mi></ns0:math></h2>'
    assert book.unprefixed_mathml(prefixed) == \
        '<h2>of <math xmlns="http://www.w3.org/1998/Math/MathML"><mi>d</mi></math></h2>'


def test_a_headless_chromium_finds_no_broken_image_console_error_raw_math_or_overflow(built):
    book, out, _ = built
    require(book.chromium() is not None, "no Chromium (apt install chromium, or set CHROMIUM)")
    require(importlib.util.find_spec("playwright") is not None, "playwright is not installed")
    problems = book.check(out)
    assert problems == []
    for shot in ("index.png", "lesson08.png", "lesson09.png", "lesson23.png"):
        assert (out / "screenshots" / shot).stat().st_size > 10_000


def test_the_browser_check_fails_on_raw_tex_left_in_the_prose(built, tmp_path):
    book, out, items = built
    require(book.chromium() is not None, "no Chromium (apt install chromium, or set CHROMIUM)")
    require(importlib.util.find_spec("playwright") is not None, "playwright is not installed")
    page = _page(items, "09")["page"]
    copy = tmp_path / "book"
    shutil.copytree(out, copy)
    text = (copy / page).read_text().replace("Each head works in", "Each head works in d_{k} = \\frac{d}{h},", 1)
    (copy / page).write_text(text)
    problems = book.check(copy)
    assert any(p.startswith(f"{page}: raw TeX left in the prose") and "\\frac" in p for p in problems), problems


def test_no_line_breaks_inside_a_range_of_numbers_and_the_browser_check_sees_one_that_does(built, tmp_path):
    """The build glues every en dash between digits to them with word joiners (code spans are left
    alone), and the browser check reports a range laid out on two lines: a paragraph of 300 ranges
    of different lengths without the joiners has lines that end after a dash."""
    book, out, items = built
    assert book.unbreakable_ranges("from 0.64–0.71× to `a–1` and 2–3, a–b") == \
        "from 0.64\u2060–\u20600.71× to `a–1` and 2\u2060–\u20603, a–b"
    require(book.chromium() is not None, "no Chromium (apt install chromium, or set CHROMIUM)")
    require(importlib.util.find_spec("playwright") is not None, "playwright is not installed")
    page = _page(items, "14")["page"]
    copy = tmp_path / "book"
    shutil.copytree(out, copy)
    text = (copy / page).read_text()
    assert "3\u2060–\u206012 are the ten symbols" in text            # the lesson's own range is glued
    at = text.index("are the ten symbols")
    planted = " ".join(f"{i}–{i * 37 % 1000}" for i in range(1, 301))   # lengths vary, so lines end anywhere
    (copy / page).write_text(text[:at] + planted + " " + text[at:])
    problems = book.check(copy)
    assert any(p.startswith(f"{page}: a line breaks inside") for p in problems), problems


def test_all_prose_math_is_inside_dollars_and_the_source_check_catches_raw_math(tmp_path):
    assert book.raw_math_in_sources() == []
    planted = tmp_path / "99_planted.py"
    planted.write_text("# %% [markdown]\n# # Lesson 99 — planted\n#\n# with d_k and `d_k` in code, and $d_k$\n"
                       "# W^O here, and $x_1$ then x_{t-1}\n# and $a = \n# b$ across lines\n")
    found = book.raw_math_in_sources([planted])
    assert [f.split(": ", 1)[1] for f in found] == ["with d_k and `d_k` in code, and $d_k$",
                                                    "W^O here, and $x_1$ then x_{t-1}", "and $a =", "b$ across lines"]


def test_a_lesson_converted_by_jupytext_and_executed_by_nbconvert_contains_its_figures(tmp_path):
    """As a user would: the notebook beside the lessons (where it finds the lesson kit),
    executed by nbconvert: its outputs hold the figures, and the figures are saved too."""
    _require_extra()
    lesson = LESSONS / "08_scaled_dot_product_attention.py"
    env = {**os.environ, "LESSON_SMOKE": "1", "LESSON_OUT": str(tmp_path / "figures")}
    env.pop("MPLBACKEND", None)
    notebook = LESSONS / f"_test_{os.getpid()}_08.ipynb"
    try:
        subprocess.run([sys.executable, "-m", "jupytext", "--to", "notebook", "-o", str(notebook), str(lesson)],
                       check=True, capture_output=True, env=env)
        run = subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute",
                              "--inplace", str(notebook)], capture_output=True, text=True, env=env, timeout=600)
        assert run.returncode == 0, run.stderr[-2000:]
        cells = json.loads(notebook.read_text())["cells"]
    finally:
        notebook.unlink(missing_ok=True)
    images = [o for c in cells if c["cell_type"] == "code" for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(images) == 2
    assert sorted(p.name for p in (tmp_path / "figures" / "08").glob("*.png")) == \
        ["attention_masks.png", "scaling_and_gradients.png"]                  # and still saved


@pytest.mark.parametrize("how", ["a cell's error", "the kernel lost"])
def test_a_lesson_that_fails_is_marked_and_the_rest_of_the_book_is_still_built(how, tmp_path, monkeypatch, capsys):
    """One failing lesson (here lesson 1, made to fail by a cell, or by its kernel dying) does not
    stop the build: its page and the later lessons' pages are written, the index names the
    failure, and the command exits 1."""
    _require_extra()
    from nbclient.exceptions import CellExecutionError, DeadKernelError

    calls = []

    def execute(nb):  # no kernel: the first lesson fails, the second runs "clean"
        calls.append(nb)
        if len(calls) == 1 and how == "a cell's error":
            raise CellExecutionError("Traceback ...\nSystemExit: this lesson needs something", "SystemExit",
                                     "this lesson needs something")
        if len(calls) == 1:
            raise DeadKernelError("Kernel died: this lesson needs something")

    monkeypatch.setattr(book, "execute", execute)
    assert book.main(["--out", str(tmp_path), "--only", "01", "02", "--smoke"]) == 1
    pages = sorted(p.name for p in tmp_path.glob("0*.html"))
    assert len(pages) == 2 and pages[0].startswith("01_") and pages[1].startswith("02_")
    index = (tmp_path / "index.html").read_text()
    assert index.count("failed in this build") == 1 and "this lesson needs something" in index
    out = capsys.readouterr()
    assert "problem: lesson 01 failed" in out.out and "01_autograd_on_scalars.py failed" in out.err


def test_the_lessons_readme_and_the_book_agree_on_when_a_lesson_runs_in_full_mode():
    """lessons/README.md and book.py's own usage line state the limit the book applies: a lesson
    runs in full mode when its recorded full run took under FULL_MODE_LIMIT_S seconds."""
    readme = (Path(book.__file__).parent / "README.md").read_text()
    limit = book.FULL_MODE_LIMIT_S
    assert re.search(rf"full mode where its recorded full run took under\s+{limit} s", readme), \
        "lessons/README.md states another limit than book.FULL_MODE_LIMIT_S"
    usage = book.__doc__.splitlines()
    assert any(f"< {limit / 60:g} min" in line for line in usage), "book.py's usage line states another limit"
