"""The declared kinds of settings, flags and environment variables (minitensor/kinds.py): each
takes exactly its range and parses text and checks Python values alike."""
import argparse
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minitensor.kinds import Boolean, Choice, FlagError, Real, Text, Whole


@given(st.integers(-10**6, 10**6), st.integers(-5, 5), st.integers(0, 50))
def test_a_whole_number_kind_takes_exactly_its_range(value, low, width):
    kind = Whole(low, low + width)
    inside = low <= value <= low + width
    assert kind.ok(value) == inside
    if inside:
        assert kind(str(value)) == value
    else:
        with pytest.raises(argparse.ArgumentTypeError, match=rf"^must be a whole number in \[{low}, {low + width}\], "
                                                             rf"got {value}$"):
            kind(str(value))


@pytest.mark.parametrize("text", ["1.5", "1e3", "", " ", "abc", "nan", "inf", "9" * 5000, "0x10", "true", "1_0", " 12 "])
def test_a_whole_number_kind_refuses_what_is_not_one(text):
    with pytest.raises(argparse.ArgumentTypeError, match=r"^must be a whole number >= 1, got "):
        Whole(1)(text)
    assert not Whole(1).ok(True)  # a bool is not a count


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_a_real_kind_is_finite_and_keeps_its_open_and_closed_ends(x):
    half_open = Real(0, 1, high_open=True)
    assert half_open.ok(x) == (math.isfinite(x) and 0 <= x < 1)
    assert Real(0, low_open=True).ok(x) == (math.isfinite(x) and x > 0)
    assert Real(finite=False).ok(x) == (not math.isnan(x))


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e309", "1_0", "0x1p3", "1,5"])
def test_non_finite_or_malformed_text_is_refused(text):
    with pytest.raises(argparse.ArgumentTypeError, match=rf"^must be a finite number >= 0, got {text}$"):
        Real(0)(text)
    assert Real(0)("2.5e-3") == 0.0025 and Real(0)(".5") == 0.5 and Real(0)("+3") == 3.0
    assert Real(finite=False)("inf") == math.inf


def test_booleans_are_true_or_false_and_nothing_else():
    assert Boolean()("true") is True and Boolean()("false") is False
    for text in ("yes", "1", "0", "2", "t", "", "maybe", "True", "FALSE", " true"):
        with pytest.raises(argparse.ArgumentTypeError, match="must be true or false"):
            Boolean()(text)


def test_check_names_the_flag_the_kind_and_the_value():
    with pytest.raises(FlagError, match=r"^--beam must be a whole number in \[1, 64\], got 0$"):
        Whole(1, 64).check("--beam", 0)
    with pytest.raises(FlagError, match=r"^--precision must be one of fp32, bf16, got 'fp8'$"):
        Choice(("fp32", "bf16")).check("--precision", "fp8")
    with pytest.raises(FlagError, match="--run-dir must be a folder"):
        Text("folder").check("--run-dir", "")
