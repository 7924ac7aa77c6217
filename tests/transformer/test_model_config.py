"""Configuration presets, parameter counts, weight sharing, the schedule and the loss."""
import numpy as np
import pytest

import minitensor as mt
from transformer import NoamSchedule, Transformer, TransformerConfig, label_smoothed_loss, noam_lr, paper_adam

from ..helpers import close


def test_base_preset_parameter_count_matches_the_built_model():
    cfg = TransformerConfig.base(37000)
    assert (cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.n_encoder_layers, cfg.dropout) == (512, 8, 2048, 6, 0.1)
    assert cfg.num_parameters() == 63_082_496
    assert Transformer(cfg).num_parameters() == cfg.num_parameters()


@pytest.mark.parametrize("kw", [dict(), dict(norm_first=True), dict(positional="learned"),
                                dict(share_embeddings=False, tgt_vocab_size=11)])
def test_formula_counts_every_variant(kw):
    cfg = TransformerConfig.tiny(13, **kw)
    assert Transformer(cfg).num_parameters() == cfg.num_parameters()


def test_big_preset_follows_table_3():
    cfg = TransformerConfig.big(37000)
    assert (cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.dropout) == (1024, 16, 4096, 0.3)
    assert 210e6 < cfg.num_parameters() < 215e6  # Table 3 lists 213M


def test_shared_embeddings_are_one_matrix_and_the_projection_uses_it():
    model = Transformer(TransformerConfig.tiny(11))
    assert model.src_embed.weight is model.tgt_embed.weight
    h = mt.tensor(np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32))
    close(model.generator(h), h.numpy() @ model.tgt_embed.weight.numpy().T, atol=1e-5)
    separate = Transformer(TransformerConfig.tiny(11, share_embeddings=False, tgt_vocab_size=9))
    assert separate.src_embed.weight.shape == (11, 64) and separate.tgt_embed.weight.shape == (9, 64)
    assert separate(np.array([[3, 10]]), np.array([[1, 8]])).shape == (1, 2, 9)


def test_invalid_configs_are_rejected_with_reasons():
    with pytest.raises(ValueError, match="divisible"):
        TransformerConfig(10, d_model=10, n_heads=3)
    with pytest.raises(ValueError, match="positional"):
        TransformerConfig(10, positional="rotary")
    with pytest.raises(ValueError, match="share_embeddings"):
        TransformerConfig(10, tgt_vocab_size=12)
    with pytest.raises(ValueError, match="eos_id"):
        TransformerConfig(2, pad_id=0, bos_id=1, eos_id=2)


def test_config_round_trips_through_json():
    cfg = TransformerConfig.tiny(20, norm_first=True)
    import json

    assert TransformerConfig.from_dict(json.loads(cfg.to_json())) == cfg
    with pytest.raises(ValueError, match="unknown"):
        TransformerConfig.from_dict({"vocab_size": 5, "colour": "red"})


def test_model_rejects_float_ids_with_a_clear_message():
    model = Transformer(TransformerConfig.tiny(11))
    with pytest.raises(ValueError, match="integer array of shape"):
        model(np.zeros((1, 3)), np.zeros((1, 2), np.int64))


def test_noam_schedule_warms_up_linearly_peaks_and_decays_as_inverse_sqrt():
    d, w = 512, 4000
    assert noam_lr(1, d, w) == pytest.approx(d**-0.5 * w**-1.5)
    assert noam_lr(2000, d, w) == pytest.approx(noam_lr(1000, d, w) * 2)      # linear warm-up
    peak = noam_lr(w, d, w)
    assert peak == pytest.approx(d**-0.5 * w**-0.5)                            # ≈ 7e-4 for the base model
    assert all(noam_lr(s, d, w) < peak for s in (w - 1, w + 1, 2 * w))
    assert noam_lr(4 * w, d, w) == pytest.approx(peak / 2)                     # 1/sqrt(step) decay
    with pytest.raises(ValueError):
        noam_lr(0, d, w)


def test_noam_schedule_sets_the_optimizer_lr_each_update():
    p = mt.tensor(np.zeros(2), requires_grad=True)
    opt = paper_adam([p])
    assert opt.betas == (0.9, 0.98) and opt.eps == 1e-9
    sched = NoamSchedule(opt, d_model=64, warmup=10, factor=2.0)
    for _ in range(3):
        sched.step()
    assert opt.lr == pytest.approx(2.0 * noam_lr(3, 64, 10))


def test_loss_is_normalised_by_non_pad_target_tokens():
    logits = mt.tensor(np.zeros((2, 3, 4)))
    target = mt.tensor(np.array([[1, 2, 0], [3, 0, 0]]))
    # uniform logits: every counted token costs log 4 whatever the smoothing
    close(label_smoothed_loss(logits, target, pad_id=0, smoothing=0.1), np.log(4))
    close(label_smoothed_loss(logits, target, pad_id=0, smoothing=0.1, reduction="sum"), 3 * np.log(4))


def test_wmt_presets_checkpoint_every_10_paper_minutes_and_average_the_papers_window():
    from transformer.presets import PRESETS  # noqa: PLC0415

    for name, model, seconds, last in (("wmt14-base", "base", 0.4, 5), ("wmt14-big", "big", 1.0, 20)):
        s = PRESETS[name]["settings"]
        assert abs(s["save_every"] * seconds - 600) <= seconds, name     # one checkpoint per 10 paper minutes
        assert PRESETS[name]["average_last"] == s["keep_last"] == last    # Section 6.1: last 5 / last 20
        # the averaged checkpoints span under a tenth of training (the old big preset: a third)
        assert s["save_every"] * (last - 1) < 0.1 * s["max_steps"], name


def test_a_wmt_update_is_one_batch_per_device_where_it_fits_else_the_fewest_equal_batches_that_fit():
    """plan_batches: the paper's 25k tokens per update (Section 5.1) as one batch on a device that
    holds it, 25k / N each on N devices, and on a smaller device the fewest equal batches that
    fit (never split when one fits); --max-tokens or --update-freq given stand, the other keeps 25k."""
    from transformer.presets import MEMORY_SHARE, PRESETS, plan_batches, training_bytes  # noqa: PLC0415

    base = TransformerConfig(vocab_size=37000, max_len=1024)
    assert PRESETS["wmt14-base"]["tokens_per_update"] == PRESETS["wmt14-big"]["tokens_per_update"] == 25_000
    whole = training_bytes(base, 25_000)
    assert plan_batches(25_000, 1, int(whole / MEMORY_SHARE) + 1, base)[:2] == (25_000, 1)
    assert plan_batches(25_000, 4, int(whole / MEMORY_SHARE) + 1, base)[:2] == (6_250, 1)
    assert plan_batches(25_000, 1, None, base)[:2] == (25_000, 1)      # memory unknown: not split
    for memory in (whole / MEMORY_SHARE - 1, whole / 2, whole / 5):
        max_tokens, update_freq, why = plan_batches(25_000, 1, int(memory), base)
        assert update_freq > 1 and max_tokens * update_freq >= 25_000 > max_tokens * (update_freq - 1)
        assert training_bytes(base, max_tokens) <= MEMORY_SHARE * memory          # fits
        assert training_bytes(base, -(-25_000 // (update_freq - 1))) > MEMORY_SHARE * memory  # one fewer would not
        assert f"{update_freq} batches of {max_tokens:,}" in why
    assert plan_batches(25_000, 1, 10**12, base, max_tokens=6250)[:2] == (6250, 4)
    assert plan_batches(25_000, 2, 10**12, base, update_freq=2)[:2] == (6250, 2)   # 2 devices x 2 batches
    assert plan_batches(25_000, 1, 10**12, base, max_tokens=4000, update_freq=3)[:2] == (4000, 3)
    # the estimate grows with the tokens and the model
    assert training_bytes(base, 2) > training_bytes(base, 1) > 16 * base.num_parameters()


def test_the_offset_causal_mask_is_the_last_rows_of_the_full_one():
    """causal_mask(T, offset=k) is what T new positions after k earlier ones may see: the last
    T rows of the (k+T, k+T) causal mask, and every earlier key is visible to them."""
    from transformer import causal_mask

    for offset in range(4):
        for size in range(1, 5):
            full = causal_mask(offset + size).numpy()
            part = causal_mask(size, offset=offset).numpy()
            assert part.shape == (size, offset + size)
            np.testing.assert_array_equal(part, full[offset:])
            assert part[:, :offset].all()


def test_train_settings_hold_a_transformer_config_and_name_flags_in_errors():
    """The training settings are a plain dataclass that carries the model as a TransformerConfig
    (no copied fields); a model changed by flags (model_with) is checked with each field named
    by its flag (--layers sets both stacks), and a setting out of range names its flag."""
    from transformer.settings import SettingsError, TrainSettings, model_with

    cfg = TransformerConfig(8000, d_model=64, n_heads=4, d_ff=128, n_encoder_layers=2, n_decoder_layers=2, dropout=0.2)
    s = TrainSettings(model=cfg, max_tokens=500)
    assert s.model == cfg and s.max_tokens == 500
    assert s.model_config(300).vocab_size == 300 and s.model_config(300).d_model == 64
    assert model_with(cfg, n_heads=8).n_heads == 8 and model_with(cfg, n_heads=8).d_model == 64
    with pytest.raises(SettingsError, match=r"^--d-model \(30\) must be divisible by --n-heads \(4\)$"):
        model_with(cfg, d_model=30, n_heads=4)
    with pytest.raises(SettingsError, match=r"^--layers must be a whole number in \[1, 1024\], got 0$"):
        model_with(cfg, n_encoder_layers=0, n_decoder_layers=0)
    with pytest.raises(SettingsError, match=r"^--attention-dropout must be a finite number in \[0, 1\), got 1.0$"):
        model_with(cfg, attention_dropout=1.0)
    with pytest.raises(SettingsError, match=r"^--max-tokens must be a whole number"):
        TrainSettings(model=cfg, max_tokens=0)
    with pytest.raises(SettingsError, match="model must be a TransformerConfig"):
        TrainSettings(model={"d_model": 64})
    with pytest.raises(TypeError, match="colour"):
        TrainSettings(colour="red")
    # the layer and the config say the same thing, from the same check
    from transformer import MultiHeadAttention

    with pytest.raises(ValueError, match=r"^d_model \(10\) must be divisible by n_heads \(3\)$"):
        MultiHeadAttention(10, 3)
    with pytest.raises(ValueError, match=r"^d_model \(10\) must be divisible by n_heads \(3\)$"):
        TransformerConfig(10, d_model=10, n_heads=3)


def test_every_training_flag_of_before_the_config_moved_still_parses():
    """The model flags come from MODEL_FLAGS now, not from TrainSettings' fields: the command
    line keeps every flag it had."""
    from transformer.cli import build_parser

    old = ("d_model n_heads d_ff layers dropout attention_dropout norm_first positional max_tokens update_freq "
           "smoothing warmup lr_factor clip_norm max_steps max_epochs max_minutes eval_every bleu_sentences "
           "beam_size alpha save_every keep_last seed device precision tf32 memory_every").split()
    train = build_parser()._subparsers._group_actions[0].choices["train"]
    flags = {s for a in train._actions for s in a.option_strings}
    assert {"--" + n.replace("_", "-") for n in old} <= flags
    assert "--model" not in flags
