"""The book of the lessons, built once a session in smoke mode: its tests read it, and so do the
lessons' own tests, since building it runs every lesson (tests/lessons/test_lessons.py)."""
import importlib.util
import os

import pytest

import book  # lessons/book.py (tests/conftest.py puts lessons/ on the path)

from ..helpers import require

EXTRA = ("jupytext", "nbclient", "nbconvert", "ipykernel", "latex2mathml")


def missing_extra() -> list[str]:
    return [m for m in EXTRA if importlib.util.find_spec(m) is None]


def require_extra():
    missing = missing_extra()
    require(not missing, f"the lessons extra is not installed ({', '.join(missing)}): pip install -e '.[lessons]'")


def book_can_be_built() -> bool:
    """Whether ``built`` builds the book here: the lessons extra installed, and Multi30k (lessons 20-22)."""
    return not missing_extra() and bool(os.environ.get("MULTI30K_DIR"))


@pytest.fixture(scope="session")
def built(tmp_path_factory):
    """(the book module, its folder, the items of its index): every lesson executed in smoke mode."""
    require_extra()
    require(bool(os.environ.get("MULTI30K_DIR")), "lessons 20-22 need Multi30k: set MULTI30K_DIR")
    out = tmp_path_factory.mktemp("book")
    items = book.build(out, smoke_all=True)
    return book, out, items
