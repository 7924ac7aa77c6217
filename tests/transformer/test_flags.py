"""The declared kinds of settings and flags (transformer/flags.py): each takes exactly its range,
parses text and checks Python values alike, and a setting's range is declared once, so the
command line and the settings refuse a value with the same words."""
import argparse
import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from transformer import TransformerConfig
from transformer.cli import InputError, build_parser
from transformer.config import RANGES as MODEL_RANGES
from transformer.flags import Boolean, Choice, FlagError, Real, Text, Whole
from transformer.settings import RANGES as TRAINING_RANGES
from transformer.settings import SettingsError, TrainSettings, default_model, model_with


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


def test_every_setting_of_the_model_and_of_training_declares_its_range():
    unchecked_model = {"tgt_vocab_size", "pad_id", "bos_id", "eos_id"}  # checked against the vocabulary instead
    assert {f.name for f in dataclasses.fields(TransformerConfig)} - unchecked_model == set(MODEL_RANGES)
    assert {f.name for f in dataclasses.fields(TrainSettings)} - {"model"} == set(TRAINING_RANGES)


@pytest.mark.parametrize("flag, value, setting", [
    ("--d-model", "65537", {"d_model": 65537}),
    ("--layers", "0", {"layers": 0}),
    ("--warmup", "0", {"warmup": 0}),
    ("--lr-factor", "1000", {"lr_factor": 1000.0}),
    ("--dropout", "1", {"dropout": 1.0}),
])
def test_the_command_line_and_the_settings_refuse_a_value_in_the_same_words(flag, value, setting):
    with pytest.raises(InputError) as parsed:
        build_parser().parse_args(["train", "--run-dir", "r", flag, value])
    model = {"layers": ("n_encoder_layers", "n_decoder_layers")}.get(*setting, tuple(setting))  # the fields it sets
    with pytest.raises(SettingsError) as built:
        if set(model) <= {f.name for f in dataclasses.fields(TransformerConfig)}:
            model_with(default_model(), **dict.fromkeys(model, next(iter(setting.values()))))
        else:
            TrainSettings(**setting)
    words = str(built.value)
    assert str(parsed.value).startswith(words.replace(f"got {next(iter(setting.values()))}", f"got {value}"))
