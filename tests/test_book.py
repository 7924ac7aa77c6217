"""The book of the lessons builds (smoke mode), and a real headless Chromium finds every page
sound: no broken image, no console error, no raw $…$ left, the index listing the lessons in
order. Screenshots of the index and of lesson 7 are saved in the book's folder."""
import importlib.util
import re
from pathlib import Path

import pytest

from .helpers import require

LESSONS = Path(__file__).resolve().parents[1] / "lessons"


def _book():
    spec = importlib.util.spec_from_file_location("book", LESSONS / "book.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    missing = [m for m in ("jupytext", "nbclient", "nbconvert", "ipykernel", "latex2mathml")
               if importlib.util.find_spec(m) is None]
    require(not missing, f"the lessons extra is not installed ({', '.join(missing)}): pip install -e '.[lessons]'")
    book = _book()
    out = tmp_path_factory.mktemp("book")
    items = book.build(out, smoke_all=True)
    return book, out, items


def test_every_lesson_becomes_a_page_in_order_with_its_paper_section_and_run_time(built):
    book, out, items = built
    assert [it["page"] for it in items] == [p.stem + ".html" for p in book.lessons()]
    index = (out / "index.html").read_text()
    pages = re.findall(r'<li><a href="([^"]+)"', index)
    assert pages == [it["page"] for it in items]
    assert "paper: 3.2.1" in index and "(smoke mode)" in index
    for it in items:
        assert it["seconds"] > 0 and (out / it["page"]).exists()


def test_pages_link_neighbours_and_package_files_and_show_figures_and_math(built):
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
    lesson7 = (out / items[6]["page"]).read_text()
    assert "<math" in lesson7 and "src/transformer/checks.py.html" in lesson7
    assert lesson7.count("data:image/png;base64") >= 2                 # its two saved figures, inline


def test_a_headless_chromium_finds_no_broken_image_console_error_or_raw_math(built):
    book, out, _ = built
    require(book.chromium() is not None, "no Chromium (apt install chromium, or set CHROMIUM)")
    require(importlib.util.find_spec("playwright") is not None, "playwright is not installed")
    problems = book.check(out)
    assert problems == []
    for shot in ("index.png", "lesson07.png"):
        assert (out / "screenshots" / shot).stat().st_size > 10_000
