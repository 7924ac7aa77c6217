"""The command line as users meet it: each failure is one ``error:`` line and an exit status,
never a traceback; damaged checkpoints are named and skipped; SIGINT/SIGTERM and a failing
disk stop training with a loadable checkpoint that ``--resume`` continues from.

Every case runs the real CLI (``python -m transformer``) in a subprocess."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from transformer.checkpoint import load_checkpoint, step_checkpoints

from ..helpers import MULTI30K, REPO, SMALL, assert_clean, cli, first_error_line, needs_multi30k, strict_json

pytestmark = needs_multi30k


# ------------------------------------------------------------------ bad usage and input: exit 2
@pytest.mark.parametrize("flags, message", [
    (["--d-model", "-3"], "error: --d-model must be a whole number in [1, 65536], got -3"),
    (["--d-model", "30", "--n-heads", "4"], "error: --d-model (30) must be divisible by --n-heads (4)"),
    (["--dropout", "1.5"], "error: --dropout must be a finite number in [0, 1), got 1.5"),
    (["--smoothing", "-0.1"], "error: --smoothing must be a finite number in [0, 1), got -0.1"),
    (["--warmup", "0"], "error: --warmup must be a whole number in [1, 1000000000], got 0"),
    (["--max-tokens", "0"], "error: --max-tokens must be a whole number in [1, 2147483647], got 0"),
    (["--update-freq", "0"], "error: --update-freq must be a whole number in [1, 1000000], got 0"),
    (["--vocab-size", "2"], "error: --vocab-size must be a whole number in [5, 1048576], got 2"),
    (["--vocab-size", "0"], "error: --vocab-size must be a whole number in [5, 1048576], got 0"),   # not the preset's size in disguise
    (["--bogus"], "error: unrecognized arguments: --bogus"),
    (["--d-model", "abc"], "error: --d-model must be a whole number in [1, 65536], got abc"),
])
def test_bad_settings_are_refused_by_flag_before_any_data_is_read(tmp_path, flags, message):
    run = tmp_path / "run"
    status, _, err = cli("train", "--run-dir", run, "--data-dir", MULTI30K, *flags)
    assert_clean(status, err, 2, message)
    assert not (run / "spm.model").exists()  # nothing was read or trained


def test_missing_data_dir_is_an_input_error(tmp_path):
    status, _, err = cli("train", "--run-dir", tmp_path / "run", "--data-dir", tmp_path / "nowhere")
    assert_clean(status, err, 2, f"error: --data-dir {tmp_path / 'nowhere'}: no such directory")


def wmt_args(tmp_path, src_lines, tgt_lines, src_bytes=None):
    src, tgt = tmp_path / "train.en", tmp_path / "train.de"
    src.write_bytes(src_bytes) if src_bytes is not None else src.write_text("\n".join(src_lines) + "\n")
    tgt.write_text("\n".join(tgt_lines) + "\n")
    return ["train", "--preset", "wmt14-base", "--device", "cpu", "--run-dir", tmp_path / "run", "--train-src", src,
            "--train-tgt", tgt, "--valid-src", src, "--valid-tgt", tgt]


def test_mismatched_corpora_are_an_input_error(tmp_path):
    status, _, err = cli(*wmt_args(tmp_path, ["a b", "c d", "e f"], ["x y", "z w"]))
    assert_clean(status, err, 2, "error: parallel files differ in length")


def test_invalid_utf8_names_the_file_and_line(tmp_path):
    status, _, err = cli(*wmt_args(tmp_path, None, ["x y", "z w"], src_bytes=b"a house\n\xff\xfe broken\n"))
    assert_clean(status, err, 2, f"error: {tmp_path / 'train.en'}:2: invalid UTF-8")


def test_a_small_corpus_gets_one_sentence_about_the_vocabulary(tmp_path):
    lines = ["the cat sat", "a dog ran", "the dog sat"]
    status, _, err = cli(*wmt_args(tmp_path, lines, ["die katze", "ein hund", "der hund"]), "--vocab-size", "8000")
    assert_clean(status, err, 2, "error: the training corpus allows at most ")
    assert "use --vocab-size" in first_error_line(err)


@pytest.mark.parametrize("command", ["translate", "evaluate"])
def test_a_run_dir_without_a_model_is_an_input_error(tmp_path, command):
    status, _, err = cli(command, "--run-dir", tmp_path)
    assert_clean(status, err, 2, f"error: {tmp_path}: not a run directory")


def test_debug_shows_the_traceback(tmp_path):
    status, _, err = cli("--debug", "translate", "--run-dir", tmp_path)
    assert status == 2 and "Traceback" in err and f"error: {tmp_path}: not a run directory" in err
    status, _, err = cli("translate", "--run-dir", tmp_path, env={"MINITENSOR_DEBUG": "1"})
    assert status == 2 and "Traceback" in err


def test_every_json_file_of_a_run_is_strict_json_when_no_validation_ran(small_run, tmp_path):
    import shutil  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415

    run = tmp_path / "run"
    shutil.copytree(small_run, run)
    status, _, err = cli("evaluate", "--run-dir", run, "--data-dir", MULTI30K, "--limit", "3", "--beam", "1")
    assert status == 0, err
    assert strict_json((run / "train_summary.json").read_text())["best_valid_nll"] is None
    strict_json((run / "settings.json").read_text())
    for path in (run / "evaluations").glob("*.json"):
        strict_json(path.read_text())
    for line in (run / "metrics.jsonl").read_text().splitlines():
        strict_json(line)
    for path in step_checkpoints(run):  # the metadata inside each checkpoint too
        with np.load(path) as z:
            assert strict_json(str(z["meta"]))["best_valid"] is None


# ------------------------------------------------------------------ damaged checkpoints
def damage(path: Path, how: str) -> None:
    import numpy as np  # noqa: PLC0415

    data = path.read_bytes()
    if how == "truncated":  # an interrupted copy
        path.write_bytes(data[: len(data) // 2])
    elif how == "flipped":  # one byte of an array changed on disk: the zip's own check fails
        i = len(data) // 2
        path.write_bytes(data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:])
    else:  # a well-formed file whose arrays are not the ones hashed when it was saved
        with np.load(path) as z:
            arrays = {k: z[k] for k in z.files}
        name = next(k for k in arrays if k.startswith("model/"))
        arrays[name] = arrays[name] + 1
        with open(path, "wb") as f:
            np.savez(f, **arrays)


@pytest.mark.parametrize("how", ["truncated", "flipped", "altered"])
def test_a_damaged_checkpoint_is_named_skipped_by_translate_and_refused_by_average(small_run, tmp_path, how):
    import shutil  # noqa: PLC0415

    run = tmp_path / "run"
    shutil.copytree(small_run, run)
    newest = step_checkpoints(run)[-1]
    damage(newest, how)
    p = subprocess.run([sys.executable, "-m", "transformer", "translate", "--run-dir", str(run), "--beam", "1"],
                       cwd=REPO, input="A dog runs.\n", capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert f"skipping {newest.name}: {newest}" in p.stderr and "damaged" in p.stderr
    if how == "altered":
        assert "do not match the hash written with them" in p.stderr
    assert len(p.stdout.splitlines()) == 1
    status, _, err = cli("translate", "--run-dir", run, "--checkpoint", newest, "--input", os.devnull)
    assert_clean(status, err, 2, f"error: {newest} is damaged")
    status, _, err = cli("average", "--run-dir", run, "--last", "3")
    assert_clean(status, err, 2, f"error: {newest} is damaged")
    status, out, err = cli("evaluate", "--run-dir", run, "--data-dir", MULTI30K, "--limit", "2", "--beam", "1")
    assert status == 0 and f"skipping {newest.name}" in err and "BLEU" in out, err
    # --resume falls back to the newest checkpoint that loads and trains on from there
    status, out, err = cli("train", "--run-dir", run, *SMALL, "--max-steps", "8", "--save-every", "2", "--resume")
    assert status == 0, err
    assert f"skipping {newest.name}" in err and "starting at update 4" in err
    assert json.loads(out[out.index("{"):])["steps"] == 8
    load_checkpoint(step_checkpoints(run)[-1])


def test_checkpoints_without_a_hash_still_load(small_run, tmp_path):
    import numpy as np  # noqa: PLC0415

    old = tmp_path / "old.npz"
    with np.load(step_checkpoints(small_run)[-1]) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(str(arrays["meta"]))
    del meta["sha256"]
    arrays["meta"] = np.array(json.dumps(meta))
    np.savez(old, **arrays)
    assert "sha256" not in load_checkpoint(old)["meta"]
    status, out, err = cli("translate", "--run-dir", small_run, "--checkpoint", old, "--input", os.devnull)
    assert status == 0, err


# ------------------------------------------------------------------ interrupted runs and failing disks
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_finishes_the_update_saves_and_exits_130_then_resume_continues(tmp_path, sig):
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "transformer", "train", "--run-dir", str(run), *SMALL, "--max-steps", "100000",
           "--save-every", "100000"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = run / "metrics.jsonl"
    deadline = time.time() + 120
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 3):
        assert proc.poll() is None, proc.stderr.read()
        assert time.time() < deadline, "no third update within 120 s"
        time.sleep(0.05)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    step = len(metrics.read_text().splitlines())
    assert last.startswith(f"stopped at update {step}; continue with --resume"), err
    assert [p.name for p in step_checkpoints(run)] == [f"checkpoint_{step}.npz"]
    load_checkpoint(step_checkpoints(run)[-1])
    status, out, err = cli("train", "--run-dir", run, *SMALL, "--max-steps", str(step + 2), "--resume")
    assert status == 0, err
    assert f"starting at update {step}" in err
    assert [json.loads(x)["step"] for x in metrics.read_text().splitlines()] == list(range(1, step + 3))


def test_a_second_ctrl_c_stops_at_once_says_where_resume_goes_on_and_the_summary_says_so(tmp_path):
    """The run first ends cleanly (its summary says max_steps), then a resumed part is stopped by
    two quick Ctrl-Cs: the last line and train_summary.json describe that stop, not the earlier one."""
    run = tmp_path / "run"
    status, _, err = cli("train", "--run-dir", run, *SMALL, "--max-steps", "2", "--save-every", "2")
    assert status == 0 and json.loads((run / "train_summary.json").read_text())["stopped_by"] == "max_steps", err
    cmd = [sys.executable, "-m", "transformer", "train", "--run-dir", str(run), *SMALL, "--max-steps", "100000",
           "--save-every", "2", "--resume"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (run / "checkpoint_4.npz").exists():
        assert proc.poll() is None, proc.stderr.read()
        assert time.time() < deadline, "no checkpoint_4 within 120 s"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    newest = step_checkpoints(run)[-1]
    saved = load_checkpoint(newest)["meta"]["step"]
    summary = strict_json((run / "train_summary.json").read_text())
    last = err.strip().splitlines()[-1]
    if last.startswith("stopped at update"):  # the second signal came after the first stop was complete
        assert summary["stopped_by"] == "interrupted" and summary["steps"] == summary["resumes_from"] == saved
    else:
        assert summary["stopped_by"] == "stopped at once" and summary["resumes_from"] == saved, summary
        assert summary["steps"] >= saved
        assert last.startswith(f"stopped at once after update {summary['steps']}; continue with --resume"), err
        if summary["steps"] > saved:
            assert f"goes on from {newest.name}" in last, err
    for p in step_checkpoints(run):
        load_checkpoint(p)
    status, _, err = cli("train", "--run-dir", run, *SMALL, "--max-steps", "100000", "--max-minutes", "0.001",
                         "--resume")
    assert status == 0, err


FAIL_THIRD_SAVE = """
import errno, sys, numpy as np
from transformer import checkpoint
from transformer.cli import run
real, calls = np.savez, []
ERRNO = getattr(errno, sys.argv.pop(1))  # the error to simulate, then the CLI's own arguments
def savez(f, **arrays):
    calls.append("meta" in arrays)  # a checkpoint (the id caches are .npz files too)
    if sum(calls) == 3 and calls[-1]:  # the third: half a file, then the disk is full
        f.write(b"PK\\x03\\x04 half")
        raise OSError(ERRNO, "simulated")
    return real(f, **arrays)
checkpoint.np.savez = savez
sys.exit(run(sys.argv[1:]))
"""


@pytest.mark.parametrize("errno_name", ["ENOSPC", "EROFS"])
def test_a_full_disk_stops_with_a_clear_error_and_leaves_the_checkpoints_intact(tmp_path, errno_name):
    run = tmp_path / "run"
    status, _, err = cli(errno_name, "train", "--run-dir", run, *SMALL, "--max-steps", "20", "--save-every", "2",
                         code=FAIL_THIRD_SAVE)
    assert_clean(status, err, 1, f"error: could not write the checkpoint {run / 'checkpoint_6.npz'}: simulated")
    assert [p.name for p in step_checkpoints(run)] == ["checkpoint_2.npz", "checkpoint_4.npz"]
    assert not list(run.glob(".*.tmp.npz"))  # the partial file is gone
    for p in step_checkpoints(run):
        load_checkpoint(p)
    summary = strict_json((run / "train_summary.json").read_text())  # how this run ended, written all the same
    assert summary["stopped_by"] == "failed" and summary["resumes_from"] == 4, summary
    assert summary["error"].startswith("CheckpointWriteError: could not write the checkpoint"), summary
    status, out, err = cli("train", "--run-dir", run, *SMALL, "--max-steps", "6", "--save-every", "2", "--resume")
    assert status == 0 and "starting at update 4" in err, err
