"""TensorBoard event files written by hand (transformer/tensorboard.py): CRC-32C as TFRecords
use it, and files that TensorBoard's own reader takes back as the scalars written."""
from __future__ import annotations

from transformer.tensorboard import EventWriter, crc32c, record

from ..helpers import require


def event_accumulator(folder):
    """TensorBoard's reader over ``folder``, every scalar kept."""
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
