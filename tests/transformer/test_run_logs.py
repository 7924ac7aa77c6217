"""A training run's logs beside metrics.jsonl: TensorBoard event files (``--tensorboard true``,
transformer/tensorboard.py) that TensorBoard itself reads back as the same records, and
``train.log``, the lines the run wrote on stderr (transformer/progress.py), without the progress
bar's redraws."""
from __future__ import annotations

import io
import json
import re

import pytest

from transformer.progress import _Copied, stderr_copied_to
from transformer.tensorboard import EventWriter, crc32c, record

from ..helpers import SMALL, cli, needs_multi30k, require


def event_accumulator(folder):
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: PLC0415
    except ImportError:
        require(False, "TensorBoard is not installed (pip install -e '.[test]')")
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})  # 0: keep every event
    acc.Reload()
    return acc


def test_crc32c_is_castagnoli_s():
    assert crc32c(b"123456789") == 0xE3069283  # the check value of CRC-32C
    assert crc32c(b"") == 0


def test_tensorboard_reads_the_scalars_written_and_skips_what_is_not_a_finite_number(tmp_path):
    w = EventWriter(tmp_path)
    w.add(1, {"train/loss": 2.5, "train/lr": 1e-3, "flag": True})
    w.add(2, {"train/loss": 2.25, "train/lr": float("nan"), "note": "text"})
    w.add(3, {"valid/nll": float("inf")})  # nothing finite: no event at all
    w.close()
    acc = event_accumulator(tmp_path)
    assert sorted(acc.Tags()["scalars"]) == ["train/loss", "train/lr"]
    assert [(e.step, e.value) for e in acc.Scalars("train/loss")] == [(1, 2.5), (2, 2.25)]
    assert [e.step for e in acc.Scalars("train/lr")] == [1]


def test_a_record_s_checksums_cover_its_length_and_its_bytes():
    """Each TFRecord's two masked CRCs change with its data: a reader can tell a damaged record."""
    a, b = record(b"event one"), record(b"event two")
    assert a[:12] == b[:12]  # the same length, so the same length CRC
    assert a[-4:] != b[-4:]
    assert record(b"x")[8:12] != record(b"xy")[8:12]


def test_the_copy_keeps_whole_lines_and_drops_the_bars_redraws():
    shown, log = io.StringIO(), io.StringIO()
    copied = _Copied(shown, log)
    copied.write("training:   0%|          | 0/10 [00:00<?, ?it/s]")
    copied.write("\rtraining:  50%|█████     | 5/10 [00:01<00:01, 4.1it/s]")
    copied.write("\r\x1b[K\rnote: a note above the bar\n")  # tqdm.write clears the bar first
    copied.write("stopped at update 10 of 10")
    assert "stopped" not in log.getvalue()  # not a line until it ends
    copied.write(": reached --max-steps 10\n\rtraining: 100%|██████████| 10/10 [00:02<00:00]\n")
    lines = [line.split(" ", 2)[2] for line in log.getvalue().splitlines()]
    assert lines == ["note: a note above the bar", "stopped at update 10 of 10: reached --max-steps 10"]
    assert shown.getvalue().count("training:") == 3  # the terminal still sees everything


def test_the_copy_ends_with_what_ended_the_block(tmp_path):
    with pytest.raises(ValueError), stderr_copied_to(tmp_path / "log"):
        raise ValueError("the disk is full")
    assert (tmp_path / "log").read_text().rstrip().endswith("ended by ValueError: the disk is full")


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
