"""Nothing lost, nothing mixed: the ways a run or a translation used to be lost, each run as a
user runs it (``python -m transformer`` in a subprocess), each expecting what a user would:
the work kept, one ``error:`` line naming the flag, file or line (exit status 2 for bad input,
before anything is written), and a note wherever the tool chose for the user."""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from transformer.checkpoint import load_checkpoint, read_meta, step_checkpoints

from ..helpers import MULTI30K, REPO, SMALL, assert_clean, cli, copy_run, needs_multi30k
from ..minitensor.test_distributed import mpiexec

pytestmark = needs_multi30k


def snapshot(folder: Path) -> dict:
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def steps_logged(run: Path) -> list:
    return [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]


def popen(*args, **kw):
    return subprocess.Popen([sys.executable, "-m", "transformer", *map(str, args)], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def partials(output: Path) -> list[Path]:
    """The temporary files of writers of ``output`` (transformer.files: .NAME.<pid>.<n>.partial)."""
    return sorted(output.parent.glob(f".{output.name}.*.partial"))


def lines(n: int) -> str:
    return "".join(f"A dog number {i} runs in the park.\n" for i in range(n))


# ---------------------------------------------------------------------------- 1. pipes, FIFOs and devices
def test_translate_reads_a_pipe_a_fifo_or_dev_stdin_once_and_translates_every_line(small_run, tmp_path):
    status, out, err = cli("translate", "--run-dir", small_run, "--input", "/dev/stdin", "--beam", "1",
                           stdin=lines(3))
    assert status == 0 and len(out.splitlines()) == 3, err
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text(lines(4)))
    writer.start()
    status, out, err = cli("translate", "--run-dir", small_run, "--input", fifo, "--beam", "1", "--output",
                           tmp_path / "out.txt")
    writer.join()
    assert status == 0, err
    assert len((tmp_path / "out.txt").read_text().splitlines()) == 4


def test_translate_of_an_endless_line_stops_at_once_naming_it(small_run):
    status, _, err = cli("translate", "--run-dir", small_run, "--input", "/dev/zero", "--beam", "1", timeout=120)
    assert_clean(status, err, 2, "error: /dev/zero:1: a line of more than 4 MiB, so not text with one sentence per line")


# ---------------------------------------------------------------------------- 2. --resume compares the data
@pytest.mark.parametrize("flags, named", [
    (["--src-lang", "de", "--tgt-lang", "en"], ["--src-lang: en in the run, de now", "--tgt-lang: de in the run, en now"]),
    (["--limit", "100"], ["--limit: 300 in the run, 100 now"]),
    (["--max-words", "20", "--max-ratio", "2"], ["--max-words: 250 in the run, 20 now",
                                                  "--max-ratio: 3.0 in the run, 2.0 now"]),
    (["--preset", "wmt14-base"], ["--preset: multi30k-cpu in the run, wmt14-base now"]),
    (["--vocab-size", "300"], ["--vocab-size: 250 in the run, 300 now"]),
])
def test_resume_with_other_data_settings_names_each_and_writes_nothing(small_run, tmp_path, flags, named):
    run = copy_run(small_run, tmp_path)
    before = snapshot(run)
    status, _, err = cli("train", "--run-dir", run, *SMALL, "--resume", "--max-steps", "8", *flags)
    assert_clean(status, err, 2, f"error: --resume: {len(named)} setting(s) differ from the run in {run}")
    for line in named:
        assert line in err
    assert snapshot(run) == before


def test_resume_on_other_training_text_is_refused_before_anything_is_encoded(tmp_path):
    en, de = MULTI30K / "train.en.gz", MULTI30K / "train.de.gz"
    files = ["--train-src", en, "--train-tgt", de, "--valid-src", MULTI30K / "val.en.gz", "--valid-tgt",
             MULTI30K / "val.de.gz"]
    small = [*SMALL[2:], "--preset", "wmt14-base", "--device", "cpu", "--update-freq", "1", "--max-steps", "2"]
    run = tmp_path / "run"
    status, _, err = cli("train", "--run-dir", run, *files, *small)
    assert status == 0, err
    other = tmp_path / "train.en"  # the same sentences but the first
    import gzip  # noqa: PLC0415

    text = gzip.decompress(en.read_bytes()).decode().splitlines()
    other.write_text("\n".join(["Another first line."] + text[1:]) + "\n")
    before = snapshot(run)
    status, _, err = cli("train", "--run-dir", run, *[other if f == en else f for f in files], *small, "--resume",
                         "--max-steps", "4")
    assert_clean(status, err, 2, "error: --resume: the training text is not the run's")
    assert snapshot(run) == before


# ---------------------------------------------------------------------------- 3. average never replaces a training checkpoint
def test_average_never_replaces_or_poses_as_a_training_checkpoint(small_run, tmp_path):
    run = copy_run(small_run, tmp_path)
    before = snapshot(run)
    status, _, err = cli("average", "--run-dir", run, "--last", "2", "--output", run / "checkpoint_20.npz")
    assert_clean(status, err, 2, f"error: --output {run / 'checkpoint_20.npz'}: checkpoint_<step>.npz is how train "
                                 "names its training checkpoints")
    kept = tmp_path / "kept.npz"
    shutil.copy(run / "checkpoint_6.npz", kept)  # a training checkpoint under another name
    status, _, err = cli("average", "--run-dir", run, "--last", "2", "--output", kept)
    assert_clean(status, err, 2, f"error: --output {kept} exists and is a training checkpoint")
    assert snapshot(run) == before and kept.read_bytes() == (run / "checkpoint_6.npz").read_bytes()
    # an average renamed into the training name by hand is left out, not resumed from
    status, _, err = cli("average", "--run-dir", run, "--last", "2", "--output", tmp_path / "average.npz")
    assert status == 0, err
    assert read_meta(tmp_path / "average.npz")["kind"] == "average"
    shutil.copy(tmp_path / "average.npz", run / "checkpoint_20.npz")
    status, _, err = cli("train", "--run-dir", run, *SMALL, "--resume", "--max-steps", "8", "--save-every", "2")
    assert status == 0, err
    assert "checkpoint_20.npz holds an average of checkpoints, not a training checkpoint" in err
    assert "starting at update 6" in err and steps_logged(run) == list(range(1, 9))


def test_average_replaces_only_an_average_of_its_own_run(small_run, sibling_run, tmp_path):
    run = copy_run(small_run, tmp_path)
    theirs = tmp_path / "theirs.npz"
    status, _, err = cli("average", "--run-dir", sibling_run, "--last", "2", "--output", theirs)
    assert status == 0, err
    shutil.copy(theirs, run / "average.npz")
    status, _, err = cli("average", "--run-dir", run, "--last", "2")
    assert_clean(status, err, 2, f"error: --output {run / 'average.npz'} is an average of another run (")
    assert (run / "average.npz").read_bytes() == theirs.read_bytes()
    (run / "average.npz").unlink()
    for turn in range(2):  # the run's own average is replaced by the next, with a note
        status, _, err = cli("average", "--run-dir", run, "--last", "2")
        assert status == 0, err
        replaced = f"note: {run / 'average.npz'} holds an earlier average of this run (checkpoint_4.npz, checkpoint_6.npz): " \
                   "it is replaced"
        assert (replaced in err) == (turn == 1), err


# ---------------------------------------------------------------------------- 4. checkpoints of two runs are never mixed
def test_average_average_n_and_translate_pass_another_runs_checkpoint_by(small_run, other_run, tmp_path):
    run = copy_run(small_run, tmp_path)
    foreign = run / "checkpoint_8.npz"
    shutil.copy(other_run / "checkpoint_8.npz", foreign)  # the newest, of another vocabulary
    skipped = f"skipping {foreign.name}: trained with another vocabulary than {run / 'spm.model'}"
    status, _, err = cli("average", "--run-dir", run, "--last", "2")
    assert status == 0 and skipped in err, err
    assert read_meta(run / "average.npz")["averaged"] == ["checkpoint_4.npz", "checkpoint_6.npz"]
    for extra in (["--average", "2"], []):
        status, out, err = cli("translate", "--run-dir", run, *extra, "--beam", "1", stdin=lines(1))
        assert status == 0 and len(out.splitlines()) == 1 and skipped in err, err
    status, _, err = cli("translate", "--run-dir", run, "--checkpoint", foreign, "--beam", "1", stdin=lines(1))
    assert_clean(status, err, 2, f"error: --checkpoint {foreign} was trained with another vocabulary than "
                                 f"{run / 'spm.model'}")
    assert foreign.read_bytes() == (other_run / "checkpoint_8.npz").read_bytes()  # passed over, never deleted


def test_a_same_vocabulary_checkpoint_of_another_run_is_known_by_its_run_id(small_run, sibling_run, tmp_path):
    run = copy_run(small_run, tmp_path)
    foreign = run / "checkpoint_8.npz"
    shutil.copy(sibling_run / "checkpoint_8.npz", foreign)  # the newest: same vocabulary and model, another run
    assert read_meta(foreign)["vocab_sha256"] == read_meta(run / "checkpoint_6.npz")["vocab_sha256"]
    skipped = f"skipping {foreign.name}: another run's checkpoint (its run id"
    status, out, err = cli("translate", "--run-dir", run, "--beam", "1", stdin=lines(1))
    assert status == 0 and len(out.splitlines()) == 1 and skipped in err, err
    status, own, err = cli("translate", "--run-dir", run, "--checkpoint", run / "checkpoint_6.npz", "--beam", "1",
                           stdin=lines(1))
    assert status == 0 and out == own, err  # the run's own newest checkpoint translated
    status, _, err = cli("average", "--run-dir", run, "--last", "2", "--output", tmp_path / "avg.npz")
    assert status == 0 and skipped in err, err
    assert read_meta(tmp_path / "avg.npz")["averaged"] == ["checkpoint_4.npz", "checkpoint_6.npz"]
    started = (run / "run.json").read_bytes()
    status, _, err = cli("train", "--run-dir", run, *SMALL, "--resume", "--max-steps", "8", "--save-every", "2")
    assert status == 0, err
    assert "starting at update 6" in err and steps_logged(run) == list(range(1, 9))
    assert (run / "run.json").read_bytes() == started  # the run's start, kept
    moved = [p for p in run.iterdir() if p.name.startswith("checkpoint_8.moved-")]
    assert len(moved) == 1 and moved[0].read_bytes() == (sibling_run / "checkpoint_8.npz").read_bytes()
    assert read_meta(run / "checkpoint_8.npz")["run_id"] == read_meta(run / "checkpoint_6.npz")["run_id"]
    # without run.json the run's id comes from its checkpoints, which here name two runs: refused, naming them
    shutil.copy(moved[0], run / "checkpoint_10.npz")
    (run / "run.json").unlink()
    status, _, err = cli("average", "--run-dir", run, "--last", "2", "--output", tmp_path / "avg2.npz")
    assert_clean(status, err, 2, f"error: {run / 'run.json'} is missing, and the checkpoints in {run} are not of one run")
    assert "checkpoint_10.npz: run " in err and not (tmp_path / "avg2.npz").exists()


# ---------------------------------------------------------------------------- 5. a name is only a name
def test_a_renamed_checkpoint_is_taken_at_the_step_stored_in_it_and_pruned_by_it(small_run, tmp_path):
    run = copy_run(small_run, tmp_path)
    (run / "checkpoint_2.npz").rename(run / "checkpoint_20.npz")
    status, _, err = cli("train", "--run-dir", run, *SMALL, "--resume", "--max-steps", "8", "--save-every", "2",
                         "--keep-last", "2")
    assert status == 0, err
    assert "note: checkpoint_20.npz holds update 2 (its name says 20): taken as update 2" in err
    assert "starting at update 6" in err and steps_logged(run) == list(range(1, 9))  # no update lost from the log
    assert [p.name for p in step_checkpoints(run)] == ["checkpoint_6.npz", "checkpoint_8.npz"]  # 20 (update 2) pruned


# ---------------------------------------------------------------------------- 6. and 15. the lock
@pytest.mark.parametrize("left", [b"", b"garbage", b"[1, 2]", b"null",
                                  json.dumps({"pid": 1, "host": socket.gethostname()}).encode()])
def test_a_lock_file_that_no_process_holds_is_taken_over_whatever_it_says(small_run, tmp_path, left):
    run = copy_run(small_run, tmp_path)
    (run / ".lock").write_bytes(left)  # pid 1 is alive, and not a trainer: the kernel's lock knows
    status, _, err = cli("train", "--run-dir", run, *SMALL, "--resume", "--max-steps", "8", "--save-every", "2")
    assert status == 0, err
    assert "which no longer holds it; taking it over" in err
    assert ("left it empty" in err) == (left == b"")
    assert not (run / ".lock").exists()


HOLD_LOCK = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, b"unreadable")
print("held", flush=True)
time.sleep(60)
"""


def test_a_live_lock_with_an_unreadable_file_still_refuses(small_run, tmp_path):
    run = copy_run(small_run, tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(run / ".lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        status, _, err = cli("train", "--run-dir", run, *SMALL, "--resume", "--max-steps", "8")
        assert_clean(status, err, 2, f"error: {run} is in use by another process (its lock file does not say which)")
    finally:
        holder.kill()
        holder.wait()


FULL_DISK_AT_LOCK = """
import errno, os, sys
from transformer import files
from transformer.cli import run
real = os.write
def write(fd, data):
    if data.startswith(b'{"pid"'):
        raise OSError(errno.ENOSPC, "No space left on device")
    return real(fd, data)
files.os.write = write
sys.exit(run(sys.argv[1:]))
"""


def test_a_full_disk_while_taking_the_lock_leaves_no_lock_behind(small_run, tmp_path):
    run = copy_run(small_run, tmp_path)
    status, _, err = cli("train", "--run-dir", run, *SMALL, "--resume", "--max-steps", "8", code=FULL_DISK_AT_LOCK)
    assert_clean(status, err, 2, f"error: {run}: cannot write its lock file .lock (No space left on device)")
    assert not (run / ".lock").exists()
    status, _, err = cli("train", "--run-dir", run, *SMALL, "--resume", "--max-steps", "8", "--save-every", "2")
    assert status == 0 and "taking it over" not in err, err


# ---------------------------------------------------------------------------- 7. a log cut off by a crash
def test_a_cut_off_last_metrics_line_is_dropped_with_a_note_and_a_damaged_one_is_named(small_run, tmp_path):
    run = copy_run(small_run, tmp_path)
    metrics = run / "metrics.jsonl"
    metrics.write_bytes(metrics.read_bytes() + b'{"step": 7, "lo')
    status, _, err = cli("train", "--run-dir", run, *SMALL, "--resume", "--max-steps", "8", "--save-every", "2")
    assert status == 0, err
    assert f"note: {metrics}:7: an unfinished last line (a crash during a write) was dropped" in err
    assert steps_logged(run) == list(range(1, 9))
    logged = metrics.read_bytes().splitlines(keepends=True)
    metrics.write_bytes(b"".join(logged[:2] + [b"\x00garbage\n"] + logged[2:]))
    before = snapshot(run)
    status, _, err = cli("train", "--run-dir", run, *SMALL, "--resume", "--max-steps", "10")
    assert_clean(status, err, 2, f"error: {metrics}:3: not a metrics record")
    assert snapshot(run) == before


def test_a_resume_that_makes_no_update_ends_with_the_same_summary(tmp_path):
    run = tmp_path / "run"
    status, _, err = cli("train", "--run-dir", run, *SMALL, "--max-steps", "40", "--save-every", "1000")
    assert status == 0, err
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    boundary = next(r["step"] for r in records if r["epoch"] == 1) - 1  # the last update of the first epoch
    status, _, err = cli("train", "--run-dir", run, *SMALL, "--max-steps", str(boundary), "--save-every",
                         str(boundary), "--overwrite")  # saved inside the epoch's last update
    assert status == 0, err
    ended = json.loads((run / "train_summary.json").read_text())
    status, _, err = cli("train", "--run-dir", run, *SMALL, "--max-steps", str(boundary), "--resume")
    assert status == 0, err
    again = json.loads((run / "train_summary.json").read_text())
    assert ended["epochs"] == again["epochs"] == 1 and ended["steps"] == again["steps"] == boundary


def test_a_log_that_lost_records_a_checkpoint_covers_says_which_on_resume(small_run, tmp_path):
    run = copy_run(small_run, tmp_path)
    metrics = run / "metrics.jsonl"
    logged = metrics.read_bytes().splitlines(keepends=True)
    metrics.write_bytes(b"".join(logged[:2] + logged[4:5]) + logged[5][:9])  # 3 and 4 deleted, 6 cut
    status, _, err = cli("train", "--run-dir", run, *SMALL, "--resume", "--max-steps", "8", "--save-every", "2")
    assert status == 0, err
    assert f"note: {metrics} holds no record of update(s) 3-4, 6 (lines cut or deleted)" in err
    assert steps_logged(run) == [1, 2, 5, 7, 8]  # update 6 is in checkpoint_6, so it is not made again


# ---------------------------------------------------------------------------- 8. signals keep the translations
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_to_translate_keeps_the_finished_lines_under_the_final_name(small_run, tmp_path, sig):
    """The input is a FIFO the test keeps open: the 300 lines that came are translated and written,
    and the command then waits for more, so the signal always comes before the end (a file of
    lines could be translated whole first, on a busy machine)."""
    source, output = tmp_path / "in.fifo", tmp_path / "out.txt"
    os.mkfifo(source)
    writer = os.open(source, os.O_RDWR)  # read-write: opening does not wait for the reader
    try:
        os.write(writer, lines(300).encode())
        proc = popen("translate", "--run-dir", small_run, "--input", source, "--output", output, "--beam", "1",
                     "--no-progress")
        deadline = time.time() + 240
        while sum(p.read_text().count("\n") for p in partials(output)) < 300:  # written as they come
            assert proc.poll() is None, proc.communicate()
            assert time.time() < deadline, "no lines written within 240 s"
            time.sleep(0.05)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        os.close(writer)
    assert proc.returncode == 130, err
    said = f"interrupted ({sig.name}): the 300 line(s) translated so far are in {output}"
    assert err.strip().splitlines()[-1] == said, err
    assert len(output.read_text().splitlines()) == 300 and not partials(output)


# ---------------------------------------------------------------------------- 9. evaluate checks before it decodes
def test_evaluate_that_could_not_save_refuses_before_decoding(small_run, tmp_path):
    run = copy_run(small_run, tmp_path)
    (run / "evaluations").write_text("in the way\n")
    status, out, err = cli("evaluate", "--run-dir", run, "--beam", "1")
    assert_clean(status, err, 2, f"error: {run / 'evaluations'} is a file, not a folder")
    assert "BLEU" not in out and "translating" not in err


def test_a_limit_past_the_end_scores_the_whole_set_under_a_short_name(small_run, tmp_path):
    run = copy_run(small_run, tmp_path)
    src, ref = tmp_path / "s.en", tmp_path / "s.de"
    src.write_text(lines(3))
    ref.write_text("Ein Hund.\n" * 3)
    status, out, err = cli("evaluate", "--run-dir", run, "--src", src, "--ref", ref, "--beam", "1", "--limit",
                           str(10**12))
    assert status == 0 and out.startswith("BLEU "), err
    [result] = (run / "evaluations").glob("*.json")
    assert result.name == "s_checkpoint_6_beam1.json" and json.loads(result.read_text())["sentences"] == 3


# ---------------------------------------------------------------------------- 10. data parallel: any rank's signal stops all
def _rank_pids(run: Path) -> dict:
    """{rank: pid} of the processes training into ``run`` under mpiexec."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if str(run).encode() in cmdline and b"transformer" in cmdline:
            rank = [e[len(b"PMI_RANK="):] for e in environ if e.startswith(b"PMI_RANK=")]
            if rank:
                found[int(rank[0])] = int(pid)
    return found


@pytest.mark.skipif(mpiexec() is None, reason="no mpiexec (pip install -e '.[mpi]')")
@pytest.mark.parametrize("target", ["rank 1", "mpiexec"])
def test_a_signal_to_any_rank_or_to_mpiexec_stops_every_rank_after_the_same_update(tmp_path, target):
    run = tmp_path / "run"
    cmd = [mpiexec(), "-n", "2", sys.executable, "-m", "transformer", "train", "--run-dir", str(run), *SMALL,
           "--max-steps", "100000", "--save-every", "100000", "--distributed"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = run / "metrics.jsonl"
    deadline = time.time() + 120
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 3):
        assert proc.poll() is None, proc.communicate()
        assert time.time() < deadline
        time.sleep(0.05)
    if target == "rank 1":
        os.kill(_rank_pids(run)[1], signal.SIGTERM)
    else:
        proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    step = len(metrics.read_text().splitlines())
    assert err.count("stopped at update") == 1 and f"stopped at update {step}; continue with --resume" in err, err
    assert [p.name for p in step_checkpoints(run)] == [f"checkpoint_{step}.npz"]
    load_checkpoint(step_checkpoints(run)[0])
    if target == "rank 1":
        assert f"another rank was asked to stop: stopping after update {step} and saving a checkpoint" in err
    else:
        # every rank got the signal; rank 0 says at once that the ranks will stop, and which update they
        # stop after once they agree on it, between updates (a rank may see its signal an update before another)
        assert "SIGINT: stopping when the ranks next agree, before the next update, and saving a checkpoint; " \
               "press Ctrl-C again to stop at once" in err, err
        stopping = [x for x in err.splitlines() if "stopping after update" in x]
        assert stopping in ([f"SIGINT: stopping after update {step} and saving a checkpoint"],
                            [f"another rank was asked to stop: stopping after update {step} and saving a checkpoint"]), err


# ---------------------------------------------------------------------------- 11. a failed start is not a run
def test_a_start_refused_after_preparing_keeps_the_data_and_the_retry_needs_no_overwrite(tmp_path):
    run = tmp_path / "run"
    status, _, err = cli("train", "--run-dir", run, *SMALL, "--max-tokens", "3", "--max-steps", "2")
    assert_clean(status, err, 2, "error: --max-tokens 3 is less than the longest training pair needs")
    assert f"note: the BPE model and token ids prepared in {run} are kept" in err
    assert sorted(p.name for p in run.iterdir()) == ["cache", "spm.model", "spm.vocab"]
    status, _, err = cli("train", "--run-dir", run, *SMALL, "--max-steps", "2")
    assert status == 0 and "already holds a run" not in err, err


def test_a_flag_refused_at_parse_creates_nothing(tmp_path):
    status, _, err = cli("train", "--run-dir", tmp_path / "run", *SMALL, "--lr-factor", "inf")
    assert_clean(status, err, 2, "error: --lr-factor must be a finite number in (0, 100], got inf")
    assert not (tmp_path / "run").exists()


def loss_at_2(value: str) -> str:
    """The command line, run with the second batch's loss multiplied by ``float(value)`` (nan, inf)."""
    return f"""
import sys
from transformer import train
real, calls = train.batch_loss, []
def batch_loss(*args, **kw):
    loss = real(*args, **kw)
    calls.append(1)
    return loss * float("{value}") if len(calls) == 2 else loss
train.batch_loss = batch_loss
from transformer.cli import run
sys.exit(run(sys.argv[1:]))
"""


def test_a_run_that_diverges_before_its_first_checkpoint_says_so_and_the_retry_archives_its_logs(tmp_path):
    run = tmp_path / "run"
    status, _, err = cli("train", "--run-dir", run, *SMALL, "--max-steps", "20", "--save-every", "10",
                         code=loss_at_2("nan"))
    assert_clean(status, err, 2, "error: loss is nan at update 2; stopping. No checkpoint was saved yet.")
    assert "resume" not in err.split("error:")[1]
    summary = json.loads((run / "train_summary.json").read_text())
    assert summary["stopped_by"] == "diverged" and summary["resumes_from"] is None, summary
    assert summary["error"].startswith("TrainingDiverged: loss is nan at update 2"), summary
    status, _, err = cli("train", "--run-dir", run, *SMALL, "--max-steps", "2")
    assert status == 0, err
    assert f"note: {run} held the files of a start that saved no checkpoint (metrics.jsonl" in err
    [archived] = [p for p in tmp_path.iterdir() if p.name.startswith("run.archived-")]
    assert json.loads((archived / "metrics.jsonl").read_text().splitlines()[0])["step"] == 1
    assert steps_logged(run) == [1, 2]


# ---------------------------------------------------------------------------- 12. --resume needs a run
def test_resume_of_a_misspelled_run_dir_refuses_and_creates_nothing(tmp_path):
    status, _, err = cli("train", "--run-dir", tmp_path / "rnu", *SMALL, "--resume")
    assert_clean(status, err, 2, f"error: --resume: {tmp_path / 'rnu'} does not exist, so there is no run to continue")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------- 13. every flag checked where it is parsed
@pytest.mark.parametrize("flags, message", [
    (["--norm-first", "2"], "error: --norm-first must be true or false, got 2"),
    (["--tf32", "maybe"], "error: --tf32 must be true or false, got maybe"),
    (["--max-ratio", "nan"], "error: --max-ratio must be a finite number in [1, 1000000], got nan"),
    (["--max-ratio", "inf"], "error: --max-ratio must be a finite number in [1, 1000000], got inf"),
    (["--d-model", "1e30"], "error: --d-model must be a whole number in [1, 65536], got 1e30"),
    (["--d-model", "9" * 40], f"error: --d-model must be a whole number in [1, 65536], got {'9' * 40}"),
    (["--ov"], "error: unrecognized arguments: --ov"),
    (["--d-model", "65536", "--n-heads", "1", "--d-ff", "262144", "--layers", "1024"], "error: the model has "),
])
def test_out_of_range_train_flags_are_refused_by_name_before_anything_is_made(tmp_path, flags, message):
    status, _, err = cli("train", "--run-dir", tmp_path / "run", *SMALL, *flags)
    assert_clean(status, err, 2, message)
    assert not (tmp_path / "run").exists()


def test_out_of_range_decoding_memory_is_refused_by_name(small_run):
    status, _, err = cli("translate", "--run-dir", small_run, "--memory-gib", "1e300", stdin=lines(1))
    assert_clean(status, err, 2, "error: --memory-gib must be a finite number in (0, 1048576], got 1e300")


@pytest.mark.parametrize("flags, message", [
    (["--vocab-size", "5"], "error: the training corpus has characters enough to need at least "),
    (["--max-words", "1"], "error: no training pair is left to learn from"),
])
def test_a_vocabulary_or_filter_the_data_cannot_meet_is_one_line_naming_the_flag(tmp_path, flags, message):
    status, _, err = cli("train", "--run-dir", tmp_path / "run", *SMALL, *flags, "--max-steps", "2")
    assert_clean(status, err, 2, message)
    assert "INTERNAL" not in err and ("--vocab-size" in err or "--max-words" in err)


# ---------------------------------------------------------------------------- 14. downloads (see test_wmt14_data.py)
# the endless and the trickling server: test_wmt14_data.py, beside the server that misbehaves


# ---------------------------------------------------------------------------- 16. smaller ones
def test_translate_with_stdin_closed_says_so(small_run):
    p = subprocess.run([sys.executable, "-m", "transformer", "translate", "--run-dir", str(small_run)], cwd=REPO,
                       capture_output=True, text=True, stdin=None, preexec_fn=lambda: os.close(0), timeout=120)
    assert_clean(p.returncode, p.stderr, 2, "error: stdin is closed: give --input FILE, or pipe the text in")


def test_translate_into_head_ends_quietly_as_unix_tools_do(small_run):
    shell = (f"{sys.executable} -m transformer translate --run-dir {small_run} --beam 1 --no-progress "
             f"< <(yes 'A dog runs.' | head -3000) | head -1; echo \"status ${{PIPESTATUS[0]}}\" >&2")
    p = subprocess.run(["bash", "-c", shell], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert len(p.stdout.splitlines()) == 1
    assert p.stderr.strip().splitlines() == ["status 141"], p.stderr


def test_a_plain_npz_under_a_checkpoints_name_is_called_what_it_is(small_run, tmp_path):
    run = copy_run(small_run, tmp_path)
    np.savez(run / "checkpoint_500.npz", x=np.arange(3))
    status, out, err = cli("translate", "--run-dir", run, "--beam", "1", stdin=lines(1))
    assert status == 0, err
    assert f"skipping checkpoint_500.npz: {run / 'checkpoint_500.npz'} is a .npz file but not a checkpoint of this tool" \
        in err and "damaged" not in err
    status, _, err = cli("translate", "--run-dir", run, "--checkpoint", run / "checkpoint_500.npz", stdin=lines(1))
    assert_clean(status, err, 2, f"error: {run / 'checkpoint_500.npz'} is a .npz file but not a checkpoint of this tool")


def test_translate_refuses_to_write_over_its_own_input(small_run, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text(lines(2))
    status, _, err = cli("translate", "--run-dir", small_run, "--input", source, "--output", source)
    assert_clean(status, err, 2, f"error: --output {source} is the --input file")
    assert source.read_text() == lines(2)


RUNS_OWN = ["checkpoint_6.npz", "spm.model", "metrics.jsonl", "run.json", "average.npz", "cache/train/key.json",
            "evaluations/test_2016_flickr_checkpoint_6_beam1_first2.json"]


def test_translate_never_writes_over_a_runs_own_files(small_run, tmp_path):
    run = copy_run(small_run, tmp_path)
    status, _, err = cli("average", "--run-dir", run, "--last", "2")
    assert status == 0, err
    status, _, err = cli("evaluate", "--run-dir", run, "--limit", "2", "--beam", "1", "--no-progress")
    assert status == 0, err
    before = snapshot(run)
    for name in RUNS_OWN:
        assert (run / name).is_file(), name
        status, _, err = cli("translate", "--run-dir", run, "--output", run / name, stdin=lines(2))
        assert_clean(status, err, 2, f"error: --output {run / name} is a run's own file")
    assert snapshot(run) == before
    status, _, err = cli("translate", "--run-dir", run, "--output", run / "translations.txt", stdin=lines(2))
    assert status == 0 and len((run / "translations.txt").read_text().splitlines()) == 2, err  # a file of one's own
    elsewhere = tmp_path / "kept.npz"  # a checkpoint outside any run directory is not replaced either
    shutil.copy(run / "checkpoint_6.npz", elsewhere)
    status, _, err = cli("translate", "--run-dir", run, "--output", elsewhere, stdin=lines(2))
    assert_clean(status, err, 2, f"error: --output {elsewhere} is a run's own file")


def test_a_manifest_without_its_keys_is_named(tmp_path):
    folder = tmp_path / "wmt"
    folder.mkdir()
    (folder / "manifest.json").write_text('{"made": "by hand"}')
    status, _, err = cli("train", "--preset", "wmt14-base", "--device", "cpu", "--data-dir", folder,
                         "--run-dir", tmp_path / "run")
    assert_clean(status, err, 2, f"error: {folder / 'manifest.json'} is not a manifest that `data wmt14` wrote")


# ---------------------------------------------------------------------------- 17. what a new user met
def test_evaluate_scores_the_pair_the_model_was_trained_on_and_refuses_another(small_run):
    from transformer.commands import model_languages  # noqa: PLC0415

    status, _, err = cli("evaluate", "--run-dir", small_run, "--src-lang", "de", "--limit", "2", "--beam", "1")
    assert_clean(status, err, 2, "error: --src-lang de: the model translates en to de (it was trained so)")
    args = argparse.Namespace(src_lang=None, tgt_lang=None)
    model_languages(args, {"data": {"src_lang": "de", "tgt_lang": "en"}})
    assert (args.src_lang, args.tgt_lang) == ("de", "en")  # a de->en model is scored de->en without flags
    args = argparse.Namespace(src_lang=None, tgt_lang="fr")
    model_languages(args, {})  # a checkpoint that stored no pair: the flags as given, en and de where not
    assert (args.src_lang, args.tgt_lang) == ("en", "fr")


def test_an_fp16_update_whose_loss_overflows_is_skipped_logged_as_null_and_plotted_with_a_gap(tmp_path):
    run = tmp_path / "run"
    status, _, err = cli("train", "--run-dir", run, *SMALL, "--precision", "fp16", "--max-steps", "4",
                         code=loss_at_2("inf"))
    assert status == 0, err
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    assert records[1]["loss"] is None and records[1]["skipped"] is True  # strict JSON: null, not Infinity
    assert all(isinstance(r["loss"], float) for r in records if r is not records[1])
    assert (run / "loss.png").stat().st_size > 0


def limit_file_size(size: int):
    """A preexec_fn: writes past ``size`` bytes fail with EFBIG (Python ignores SIGXFSZ), as on a full disk."""
    import resource  # noqa: PLC0415

    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))


def test_translate_that_runs_out_of_space_keeps_the_finished_lines_and_says_so(small_run, tmp_path):
    source, output = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text(lines(600))
    p = subprocess.run([sys.executable, "-m", "transformer", "translate", "--run-dir", str(small_run), "--beam", "1",
                        "--input", str(source), "--output", str(output), "--no-progress"], cwd=REPO,
                       capture_output=True, text=True, preexec_fn=limit_file_size(20_000), timeout=300)
    assert_clean(p.returncode, p.stderr, 1, f"error: could not write {output}: File too large; the ")
    assert "--debug" not in p.stderr and f"translated so far are in {output}" in p.stderr
    kept = output.read_text()
    assert kept.endswith("\n") and 0 < len(kept.splitlines()) < 600 and len(kept.encode()) <= 20_000
    assert not list(tmp_path.glob(".*partial"))


def test_evaluate_without_room_for_its_results_refuses_before_decoding(small_run, tmp_path):
    run = copy_run(small_run, tmp_path)
    p = subprocess.run([sys.executable, "-m", "transformer", "evaluate", "--run-dir", str(run), "--beam", "1"],
                       cwd=REPO, capture_output=True, text=True, preexec_fn=limit_file_size(10_000), timeout=300)
    assert_clean(p.returncode, p.stderr, 2, f"error: {run}: cannot write ")  # (evaluations/ is made there)
    assert "bytes there (File too large)" in p.stderr and "translating" not in p.stderr
    assert not (run / "evaluations").exists() and not list(run.glob(".probe-*"))


def test_training_data_must_be_regular_files_that_can_be_read_twice(tmp_path):
    fifo = tmp_path / "train.en"
    os.mkfifo(fifo)
    text = tmp_path / "other.txt"
    text.write_text("A dog.\n")
    status, _, err = cli("train", "--run-dir", tmp_path / "run", "--dataset", "wmt14", "--train-src", fifo,
                         "--train-tgt", text, "--valid-src", text, "--valid-tgt", text)
    assert_clean(status, err, 2, f"error: --train-src {fifo}: not a regular file (a folder, a pipe or a device); "
                                 "training reads its data more than once")
    assert not (tmp_path / "run").exists()


def test_resume_of_a_run_trained_on_files_finds_them_again(tmp_path):
    import gzip  # noqa: PLC0415

    files = {}
    for split, name in (("train", "val"), ("valid", "test_2016_flickr"), ("test", "test_2016_flickr")):
        for lang, side in (("en", "src"), ("de", "tgt")):
            text = gzip.open(MULTI30K / f"{name}.{lang}.gz", "rt", encoding="utf-8").read().splitlines()[:300]
            files[f"--{split}-{side}"] = tmp_path / f"{split}.{lang}"
            files[f"--{split}-{side}"].write_text("\n".join(text) + "\n")
    small = [a for a in SMALL if a not in ("--data-dir", str(MULTI30K))]
    given = [str(x) for pair in files.items() for x in pair]
    run = tmp_path / "run"
    status, _, err = cli("train", "--run-dir", run, "--dataset", "wmt14", *given, *small, "--max-steps", "2")
    assert status == 0, err
    status, _, err = cli("train", "--run-dir", run, "--resume", "--max-steps", "4", "--no-progress")
    assert status == 0, err
    assert f"note: --train-src {files['--train-src'].resolve()} --train-tgt" in err and "the run's own files" in err
    assert steps_logged(run) == [1, 2, 3, 4]
    status, _, err = cli("evaluate", "--run-dir", run, "--beam", "1", "--limit", "3", "--no-progress")
    assert status == 0, err  # its own test files, not Multi30k's test set
    assert f"note: --src {files['--test-src'].resolve()} --ref {files['--test-tgt'].resolve()}: the run's own" in err
    status, _, err = cli("evaluate", "--run-dir", run, "--beam", "1", "--no-progress")
    assert status == 0 and (run / "evaluation.json").is_file(), err  # its whole own test set: the run's headline
    files["--train-src"].rename(tmp_path / "moved.en")
    status, _, err = cli("train", "--run-dir", run, "--resume", "--max-steps", "6", "--no-progress")
    assert_clean(status, err, 2, f"error: --resume: the run's own data files are gone from where it was trained on "
                                 f"them ({files['--train-src'].resolve()}; see {run / 'data.json'})")
    status, _, err = cli("train", "--run-dir", run, "--resume", "--max-steps", "6", "--no-progress",
                         *[str(x) for pair in files.items() for x in pair][2:], "--train-src", tmp_path / "moved.en")
    assert status == 0 and steps_logged(run) == list(range(1, 7)), err
    files["--test-src"].unlink()
    status, _, err = cli("evaluate", "--run-dir", run, "--beam", "1", "--limit", "3", "--no-progress")
    assert_clean(status, err, 2, f"error: the model in {run} was trained on WMT14 files, and no test set of its is "
                                 "at hand: give --src and --ref")


@pytest.mark.parametrize("argv, message", [
    (["average", "--run-dir", "{tmp}/nope"], "error: --run-dir {tmp}/nope: no such directory"),
    (["translate", "--run-dir", "{run}", "--bogus"], "error: unrecognized arguments: --bogus (see python -m transformer "
                                                     "translate --help)"),
    (["evaluate", "--run-dir", "{run}", "--data-dir", "{tmp}/nope"], "error: --data-dir {tmp}/nope: no such directory"),
    (["translate", "--run-dir", "{run}", "--average", "2", "--checkpoint", "{run}/checkpoint_4.npz"],
     "error: --checkpoint and --average both choose the weights: give one of them"),
])
def test_small_mistakes_are_named_by_their_flag(small_run, tmp_path, argv, message):
    fill = lambda text: text.format(tmp=tmp_path, run=small_run)  # noqa: E731
    status, _, err = cli(*map(fill, argv), stdin=lines(1))
    assert_clean(status, err, 2, fill(message))


def test_an_average_of_more_checkpoints_than_there_are_says_how_many_it_took(small_run):
    status, out, err = cli("translate", "--run-dir", small_run, "--average", "10", "--beam", "1", stdin=lines(1))
    assert status == 0 and len(out.splitlines()) == 1, err
    assert f"note: --average 10, but {small_run} holds 3 checkpoint(s) of its run: averaging those" in err


@pytest.mark.parametrize("script, argv, message", [
    ("copy_task.py", ["--steps", "0"], "error: --steps must be a whole number in [1, 1000000000], got 0"),
    ("copy_task.py", ["--min-length", "5", "--max-length", "3"],
     "error: --min-length (5) must be at most --max-length (3)"),
    ("copy_task.py", ["--ste", "4"], "error: unrecognized arguments: --ste 4 (see python examples/copy_task.py --help)"),
    ("copy_task.py", ["--device", "bogus"], "error: --device: unknown device 'bogus'"),
    ("multi30k.py", ["--data-dir", "{tmp}/nope", "--run-dir", "{tmp}/run"], "error: --data-dir {tmp}/nope: no such "),
    ("wmt14.py", ["--data-dir", "{tmp}/wmt", "--from", "{tmp}/nope"], "error: --from {tmp}/nope: no such directory"),
])
def test_the_examples_refuse_bad_flags_in_one_line_with_status_2(tmp_path, script, argv, message):
    fill = lambda text: text.format(tmp=tmp_path)  # noqa: E731
    p = subprocess.run([sys.executable, str(REPO / "examples" / script), *map(fill, argv)], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith(fill(message)), p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == []
