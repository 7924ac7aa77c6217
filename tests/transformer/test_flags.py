"""The flags and settings (transformer/flags.py, with the kinds of minitensor/kinds.py): a
setting's range is declared once, so the command line and the settings refuse a value with the
same words."""
import dataclasses

import pytest

from transformer import TransformerConfig
from transformer.cli import InputError, build_parser
from transformer.config import RANGES as MODEL_RANGES
from transformer.settings import RANGES as TRAINING_RANGES
from transformer.settings import SettingsError, TrainSettings, default_model, model_with


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
