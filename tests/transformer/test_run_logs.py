"""A training run's logs beside metrics.jsonl: TensorBoard event files (``--tensorboard true``)
that TensorBoard itself reads back as the run's records, and ``train.log``, the lines the run
wrote on stderr (transformer/progress.py), without the progress bar's redraws, and nothing of a
start that was refused."""
from __future__ import annotations

import io
import json
import re
import sys

import pytest

from transformer.progress import _Copied, stderr_copied_to

from ..helpers import SMALL, cli, needs_multi30k
from .test_tensorboard import event_accumulator


def test_the_copy_keeps_whole_lines_and_drops_the_bars_redraws(tmp_path):
    shown = io.StringIO()
    copied = _Copied(shown, tmp_path / "log")
    copied.keep()
    copied.write("training:   0%|          | 0/10 [00:00<?, ?it/s]")
    copied.write("\rtraining:  50%|█████     | 5/10 [00:01<00:01, 4.1it/s]")
    copied.write("\r\x1b[K\rnote: a note above the bar\n")  # tqdm.write clears the bar first
    copied.write("stopped at update 10 of 10")
    assert "stopped" not in (tmp_path / "log").read_text()  # not a line until it ends
    copied.write(": reached --max-steps 10\n\rtraining: 100%|██████████| 10/10 [00:02<00:00]\n")
    copied.file.close()
    lines = [line.split(" ", 2)[2] for line in (tmp_path / "log").read_text().splitlines()]
    assert lines == ["note: a note above the bar", "stopped at update 10 of 10: reached --max-steps 10"]
    assert shown.getvalue().count("training:") == 3  # the terminal still sees everything


def test_a_bar_redrawn_all_run_long_holds_one_line_not_all_its_redraws(tmp_path):
    """A bar redraws its line (``\r``) for as long as the run lasts, with no line end: the copy
    keeps only the line as it stands, so it neither grows nor slows with the run's length."""
    copied = _Copied(io.StringIO(), tmp_path / "log")
    for i in range(20000):
        copied.write(f"\rtraining: {i // 200:3d}%|#         | {i}/20000 [00:01<00:01, 9.9it/s]")
    assert len(copied.pending) < 100
    copied.write("\nstopped at update 20000 of 20000: reached --max-steps 20000\n")
    copied.keep()
    copied.file.close()
    assert [line.split(" ", 2)[2] for line in (tmp_path / "log").read_text().splitlines()] == [
        "stopped at update 20000 of 20000: reached --max-steps 20000"]


def test_lines_are_held_until_the_start_is_accepted_and_a_refused_start_writes_nothing(tmp_path):
    with pytest.raises(ValueError), stderr_copied_to(tmp_path / "refused.log"):
        print("note: preparing", file=sys.stderr)
        raise ValueError("--max-tokens 1 is too small")
    assert not (tmp_path / "refused.log").exists()
    with pytest.raises(ValueError), stderr_copied_to(tmp_path / "kept.log") as log:
        print("note: preparing", file=sys.stderr)
        log.keep()
        raise ValueError("the disk is full")
    lines = (tmp_path / "kept.log").read_text().splitlines()
    assert [line.split(" ", 2)[2] for line in lines] == ["note: preparing", "ended by ValueError: the disk is full"]


@needs_multi30k
def test_a_run_s_tensorboard_events_are_its_metrics_and_a_resume_adds_its_own_file(tmp_path):
    run = tmp_path / "run"
    common = [*[a for a in SMALL if a != "--no-progress"], "--eval-every", "3", "--tensorboard", "true"]
    status, _, err = cli("train", "--run-dir", run, *common, "--max-steps", "4")
    assert status == 0, err
    status, _, err = cli("train", "--run-dir", run, "--resume", "--max-steps", "6")
    assert status == 0, err
    assert len(list((run / "tensorboard").glob("events.out.tfevents.*"))) == 2
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    acc = event_accumulator(run / "tensorboard")
    loss = {e.step: e.value for e in acc.Scalars("train/loss")}
    assert sorted(loss) == [r["step"] for r in records] == [1, 2, 3, 4, 5, 6]
    for r in records:
        assert loss[r["step"]] == pytest.approx(r["loss"], rel=1e-6)  # stored as float32
    valid = {e.step: e.value for e in acc.Scalars("valid/nll")}
    assert valid == pytest.approx({r["step"]: r["valid_nll"] for r in records if "valid_nll" in r}, rel=1e-6)
    assert sorted(valid) == [3, 6]
    log = (run / "train.log").read_text()
    assert log.count("stopped at update") == 2 and "reached --max-steps 6" in log
    assert not re.search(r"\d+%\|", log)  # the bar (on here) is not in the log
    assert all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ", line) for line in log.splitlines())


@needs_multi30k
def test_without_the_setting_no_events_are_written_but_the_log_is(tmp_path):
    run = tmp_path / "run"
    status, _, err = cli("train", "--run-dir", run, *SMALL, "--max-steps", "2")
    assert status == 0, err
    assert not (run / "tensorboard").exists()
    assert "stopped at update 2 of 2" in (run / "train.log").read_text()
