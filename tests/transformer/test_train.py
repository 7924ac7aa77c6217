"""The trainer: exact resume, survival of SIGKILL, a clear stop on NaN, and the CLI end to end
(train -> average -> translate -> evaluate) on slices of Multi30k and on a WMT-format sample."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from transformer import TransformerConfig, data
from transformer.checkpoint import load_checkpoint, step_checkpoints
from transformer.cli import main
from transformer.tokenizer import Tokenizer, encode_cached
from transformer.train import ParallelData, RunFileError, Trainer, TrainingDiverged, TrainSettings, read_metrics

from ..helpers import MULTI30K, needs_multi30k

pytestmark = needs_multi30k
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A 400-pair slice of Multi30k with a 300-piece BPE model (skipped without the files, also for
    the modules that borrow this fixture without this one's mark, such as the GPU tests)."""
    if not (MULTI30K / "train.en.gz").exists():
        pytest.skip(f"no Multi30k files in {MULTI30K}: set MULTI30K_DIR")
    folder = tmp_path_factory.mktemp("small")
    en, de = data.multi30k("val", root=MULTI30K)
    tok = Tokenizer.train(en[:400] + de[:400], folder / "spm", vocab_size=300)
    train = ParallelData(encode_cached(tok, en[:360], folder / "a.npz"), encode_cached(tok, de[:360], folder / "b.npz"))
    valid = ParallelData(encode_cached(tok, en[360:400], folder / "c.npz"), encode_cached(tok, de[360:400], folder / "d.npz"),
                         en[360:400], de[360:400])
    return tok, train, valid


def tiny_settings(run_dir, dropout=0.1, **kw):
    """Settings of a 1+1-layer model of width 32 (``dropout`` its P_drop) for quick runs."""
    model = TransformerConfig(300, d_model=32, n_heads=2, d_ff=64, n_encoder_layers=1, n_decoder_layers=1,
                              dropout=dropout)
    base = dict(run_dir=str(run_dir), model=model, max_tokens=600, warmup=10, lr_factor=1.0, max_steps=8, eval_every=4,
                bleu_sentences=5, beam_size=2, save_every=4, keep_last=3, progress=False)
    return TrainSettings(**{**base, **kw})


def losses(run_dir):
    return [json.loads(x)["loss"] for x in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def test_a_wmt_preset_cuts_its_25k_tokens_to_the_devices_memory_and_says_how(tmp_path, monkeypatch, capsys):
    """train --preset wmt14-base with neither --max-tokens nor --update-freq: on a device whose
    memory holds a third of the 25k tokens' estimate, the update is the fewest equal batches
    that fit; the start says so, and the settings record it."""
    from minitensor import backend  # noqa: PLC0415
    from transformer.presets import MEMORY_SHARE, training_bytes  # noqa: PLC0415

    en, de = data.multi30k("val", root=MULTI30K)
    files = {}
    for split, (lo, hi) in {"train": (0, 200), "valid": (200, 220)}.items():
        for lang, text in (("en", en), ("de", de)):
            files[split, lang] = tmp_path / f"{split}.{lang}"
            files[split, lang].write_text("\n".join(text[lo:hi]) + "\n")
    model = ["--d-model", "32", "--n-heads", "2", "--d-ff", "64", "--layers", "1", "--vocab-size", "250"]
    cfg = tiny_settings(tmp_path).model_config(250)
    memory = int(training_bytes(cfg, 25_000) / MEMORY_SHARE / 3)
    monkeypatch.setattr(backend, "memory_bytes", lambda device: memory)
    run = tmp_path / "run"
    main(["train", "--preset", "wmt14-base", "--run-dir", str(run), "--device", "cpu", *model,
          "--train-src", str(files["train", "en"]), "--train-tgt", str(files["train", "de"]),
          "--valid-src", str(files["valid", "en"]), "--valid-tgt", str(files["valid", "de"]), "--max-steps", "1",
          "--bleu-sentences", "0", "--no-progress"])
    settings = json.loads((run / "settings.json").read_text())
    assert (settings["max_tokens"], settings["update_freq"]) in ((8334, 3), (6250, 4))
    assert training_bytes(cfg, settings["max_tokens"]) <= MEMORY_SHARE * memory
    assert (f"batches: 25,000 tokens per update over 1 device(s): {settings['update_freq']} batches of "
            f"{settings['max_tokens']:,} each") in capsys.readouterr().err


def test_resume_reproduces_the_uninterrupted_losses_exactly(small, tmp_path):
    tok, train, valid = small
    full = Trainer(tiny_settings(tmp_path / "full", max_steps=12), tok, train, valid)
    full.fit()
    part = Trainer(tiny_settings(tmp_path / "part", max_steps=8), tok, train, valid)  # "interrupted" after 8
    part.fit()
    resumed = Trainer(tiny_settings(tmp_path / "part", max_steps=12), tok, train, valid, resume=True)
    assert resumed.step == 8
    resumed.fit()
    assert losses(tmp_path / "part") == losses(tmp_path / "full")  # bit for bit, dropout included
    assert len(losses(tmp_path / "full")) == 12
    for name in ("loss.png", "lr.png", "bleu.png", "train_summary.json", "best.npz", "settings.json"):
        assert (tmp_path / "full" / name).exists()


def test_training_ends_with_one_line_that_says_why(small, tmp_path, capsys):
    """The bar alone would stop part-way (a time budget, an epoch limit); a line names the reason."""
    tok, train, valid = small
    Trainer(tiny_settings(tmp_path / "steps", max_steps=3), tok, train, valid).fit()  # validates every 4
    assert capsys.readouterr().err.strip().splitlines()[-1] == \
        "stopped at update 3 of 3: reached --max-steps 3; no validation yet (every 4 updates, --eval-every), so no " \
        "best.npz or bleu.png"
    assert not (tmp_path / "steps" / "best.npz").exists() and not (tmp_path / "steps" / "bleu.png").exists()
    summary = Trainer(tiny_settings(tmp_path / "epochs", max_steps=1000, max_epochs=1), tok, train, valid).fit()
    assert summary["stopped_by"] == "max_epochs"
    assert f"stopped at update {summary['steps']} of 1000: reached --max-epochs 1" in capsys.readouterr().err


def test_cooldown_takes_the_learning_rate_linearly_to_zero_over_the_last_part_of_the_budget(small, tmp_path):
    from transformer.schedule import cooldown_factor, noam_lr  # noqa: PLC0415

    assert [cooldown_factor(p, 0.25) for p in (0.0, 0.75, 0.875, 1.0)] == [1.0, 1.0, 0.5, 0.0]
    assert cooldown_factor(0.9, 0.0) == 1.0   # off: Equation (3) alone
    tok, train, valid = small
    Trainer(tiny_settings(tmp_path / "run", max_steps=12, warmup=4, cooldown=0.5), tok, train, valid).fit()
    lrs = [json.loads(x)["lr"] for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    # update k runs with the budget (k-1)/12 spent: Equation (3) until half of it, then a line down to 0 at its end
    expected = [noam_lr(k, 32, 4, 1.0) * min(1.0, (1 - (k - 1) / 12) / 0.5) for k in range(1, 13)]
    np.testing.assert_allclose(lrs, expected, rtol=1e-12)
    assert lrs[7:] == sorted(lrs[7:], reverse=True) and lrs[-1] < lrs[6] / 5


def test_profile_flag_times_n_updates_after_the_first_and_saves_the_table(small, tmp_path, capsys):
    tok, train, valid = small
    Trainer(tiny_settings(tmp_path, max_steps=5, profile=2), tok, train, valid).fit()
    saved = json.loads((tmp_path / "profile.json").read_text())
    assert saved["opened"] == 2
    ops = {r["op"]: r for r in saved["rows"]}
    assert ops["Linear"]["gflop"] > 0 and "Adam.step" in ops
    err = capsys.readouterr().err
    assert "profile of updates 2-3" in err and "Linear" in err


def test_keeps_the_last_n_checkpoints(small, tmp_path):
    tok, train, valid = small
    Trainer(tiny_settings(tmp_path, max_steps=20, save_every=2, keep_last=3), tok, train, valid).fit()
    assert [p.name for p in step_checkpoints(tmp_path)] == ["checkpoint_16.npz", "checkpoint_18.npz", "checkpoint_20.npz"]


def test_nan_loss_stops_with_a_clear_message_and_keeps_the_last_good_checkpoint(small, tmp_path):
    tok, train, valid = small
    tr = Trainer(tiny_settings(tmp_path, max_steps=4), tok, train, valid)
    tr.fit()
    good = load_checkpoint(step_checkpoints(tmp_path)[-1])
    tr.s.max_steps = 10
    tr.model.parameters()[3].data[...] = np.nan  # a broken weight: the next loss is NaN
    with pytest.raises(TrainingDiverged, match="loss is nan at update 5"):
        tr.fit()
    assert [p.name for p in step_checkpoints(tmp_path)] == ["checkpoint_4.npz"]
    again = load_checkpoint(step_checkpoints(tmp_path)[-1])
    for k, v in good["model"].items():
        np.testing.assert_array_equal(v, again["model"][k])


def cli_train_args(run_dir, *extra):
    return ["train", "--run-dir", str(run_dir), "--data-dir", str(MULTI30K), "--limit", "300", "--vocab-size", "250",
            "--d-model", "32", "--n-heads", "2", "--d-ff", "64", "--layers", "1", "--max-tokens", "800",
            "--warmup", "10", "--eval-every", "5", "--bleu-sentences", "5", "--beam-size", "2", "--no-progress",
            *extra]


def test_sigkill_mid_training_leaves_loadable_checkpoints_and_resume_continues(tmp_path):
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "transformer", *cli_train_args(run, "--max-steps", "100000", "--save-every", "2")]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while (len(step_checkpoints(run)) if run.exists() else 0) < 3:
            if proc.poll() is not None:
                pytest.fail("training exited before it was killed")
            if time.time() > deadline:
                pytest.fail("no third checkpoint within 120 s")
            time.sleep(0.1)
        time.sleep(0.3)  # let it get into the middle of a later update
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    found = step_checkpoints(run)
    assert len(found) >= 3
    for p in found:  # every checkpoint on disk is complete
        load_checkpoint(p)
    last = int(found[-1].stem.split("_")[1])
    # a kill that lands inside a save leaves that save's temporary file; plant one so the
    # clean-up on resume is exercised whichever way the kill fell
    (run / f".checkpoint_{last + 2}.npz.{proc.pid}.0.partial").write_bytes(b"PK\x03\x04 half a zip")
    main(cli_train_args(run, "--resume", "--max-steps", str(last + 2), "--save-every", "2"))
    assert not list(run.glob(".*.partial"))
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(1, last + 3))  # no step twice, none missing


def test_end_to_end_train_average_translate_evaluate(tmp_path, capsys):
    run = tmp_path / "m30k"
    summary = main(cli_train_args(run, "--max-steps", "6", "--save-every", "2"))
    assert summary["steps"] == 6
    main(["average", "--run-dir", str(run), "--last", "3"])
    assert (run / "average.npz").exists()
    src = tmp_path / "in.txt"
    src.write_text("A dog runs.\nTwo men.\n")
    out = tmp_path / "out.txt"
    main(["translate", "--run-dir", str(run), "--checkpoint", str(run / "average.npz"), "--input", str(src),
          "--output", str(out), "--beam", "2"])
    assert len(out.read_text().splitlines()) == 2
    result = main(["evaluate", "--run-dir", str(run), "--data-dir", str(MULTI30K), "--limit", "20", "--average", "3",
                   "--beam", "2"])
    assert result["sentences"] == 20 and 0.0 <= result["bleu"] <= 100.0
    assert result["signature"].startswith("nrefs:1|case:mixed") and "case:lc" in result["signature_lowercase"]
    assert "BLEU" in capsys.readouterr().out


def test_wmt_format_sample_runs_through_the_whole_pipeline(tmp_path):
    """Training text from two plain corpora, newstest-style SGM dev and test sets."""
    en, de = data.multi30k("val", root=MULTI30K)

    def sgm(path, lines, lang):
        segs = "\n".join(f'<seg id="{i + 1}">{s.replace("&", "&amp;")}</seg>' for i, s in enumerate(lines))
        path.write_text(f'<srcset setid="newstest" srclang="{lang}">\n<doc docid="d">\n{segs}\n</doc>\n</srcset>\n')
        return path

    files = {}
    for name, (lo, hi) in {"europarl": (0, 150), "commoncrawl": (150, 300)}.items():
        files[name] = (tmp_path / f"{name}.en", tmp_path / f"{name}.de")
        files[name][0].write_text("\n".join(en[lo:hi]) + "\n")
        files[name][1].write_text("\n".join(de[lo:hi]) + "\n")
    dev = sgm(tmp_path / "newstest2013.en.sgm", en[300:320], "en"), sgm(tmp_path / "newstest2013.de.sgm", de[300:320], "de")
    test = sgm(tmp_path / "newstest2014.en.sgm", en[320:340], "en"), sgm(tmp_path / "newstest2014.de.sgm", de[320:340], "de")
    run = tmp_path / "wmt"
    main(["train", "--preset", "wmt14-base", "--run-dir", str(run), "--device", "cpu", "--vocab-size", "250",
          "--train-src", f"{files['europarl'][0]},{files['commoncrawl'][0]}",
          "--train-tgt", f"{files['europarl'][1]},{files['commoncrawl'][1]}",
          "--valid-src", str(dev[0]), "--valid-tgt", str(dev[1]), "--d-model", "32", "--n-heads", "2", "--d-ff", "64",
          "--layers", "1", "--max-tokens", "800", "--update-freq", "2", "--max-steps", "4", "--eval-every", "2",
          "--save-every", "2", "--bleu-sentences", "5", "--beam-size", "2", "--no-progress"])
    result = main(["evaluate", "--run-dir", str(run), "--src", str(test[0]), "--ref", str(test[1]), "--beam", "2"])
    assert result["sentences"] == 20


def test_a_time_budget_sizes_the_bar_to_the_updates_it_allows_at_the_pace_so_far():
    """A bar over --max-steps alone would show a run that stops on its clock as hours from its end."""
    from transformer.progress import bar, size_to_budget
    b = bar(100_000, "training", show=False)
    b.update(10)
    size_to_budget(b, 10, 20.0, 5.0, 100_000)  # 10 updates in 20 s, 5 minutes: 150 in all
    assert b.total == 150
    size_to_budget(b, 10, 20.0, 5.0, 120)  # the step limit comes first
    assert b.total == 120
    size_to_budget(b, 10, 3000.0, 5.0, 100_000)  # past the budget: never below the updates made
    assert b.total == 10
    size_to_budget(b, 10, 20.0, 0.0, 100_000)  # no budget: as it was
    assert b.total == 10


@pytest.mark.parametrize("line, wrong", [
    ('{"step": 2, "epoch": 0, "lors": 5.0, "lr": 0.1}', "loss"),          # a flipped byte in a key
    ('{"step": 2, "epoch": 0, "loss": 5.0, "lr": "0.1"}', "lr"),
    ('{"step": 2, "epoch": 0, "loss": true, "lr": 0.1}', "loss"),
    ('{"step": 2, "epoch": 0, "loss": 5.0, "lr": 0.1, "valid_nll": null}', "valid_nll"),
])
def test_a_metrics_line_without_the_numbers_the_plots_read_is_named(tmp_path, line, wrong):
    """(The damage fuzzer found a flipped key: the plots then failed with a KeyError.)"""
    log = tmp_path / "metrics.jsonl"
    log.write_text('{"step": 1, "epoch": 0, "loss": null, "lr": 0.1, "skipped": true}\n' + line + "\n")
    with pytest.raises(RunFileError, match=rf"metrics.jsonl:2: not a metrics record \({wrong}: not a number\)"):
        read_metrics(log)


def test_the_trainer_is_the_update_and_the_loop_its_helpers_live_beside_it():
    """Trainer holds the update, validation and the loop (at most 12 methods); the batches, the
    stop policy, the log and the checkpoints are objects of their own."""
    import inspect  # noqa: PLC0415

    from transformer.batching import UpdateBatches  # noqa: PLC0415
    from transformer.progress import RunLog  # noqa: PLC0415
    from transformer.rundir import RunCheckpoints  # noqa: PLC0415
    from transformer.signals import StopPolicy  # noqa: PLC0415

    own = [name for name, member in vars(Trainer).items() if inspect.isfunction(member) or isinstance(member, property)]
    assert len(own) <= 12, own
    assert all(isinstance(c, type) for c in (UpdateBatches, RunLog, RunCheckpoints, StopPolicy))
