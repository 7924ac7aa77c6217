"""TensorBoard event files, written by hand: a run's metrics where TensorBoard (and the tools
that read its files) look for them, with no TensorFlow, PyTorch or protobuf installed.

An event file is a sequence of TFRecords, each ``length`` (uint64, little-endian), the masked
CRC-32C of those 8 bytes, the record, and the masked CRC-32C of the record. Each record is an
``Event`` protocol buffer: the first says the file's version ("brain.Event:2"), each later one
holds a wall time, a step and a ``Summary`` of named scalars. The few protobuf fields needed
are encoded below from their numbers (tensorflow/core/util/event.proto, summary.proto).
"""
from __future__ import annotations

import math
import os
import socket
import struct
import time
from pathlib import Path


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)  # Castagnoli's polynomial, bits reversed
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), as TFRecords use."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    """The CRC TFRecords store: rotated right by 15 bits, plus a constant."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def record(data: bytes) -> bytes:
    """One TFRecord around ``data``."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc(length)) + data + struct.pack("<I", masked_crc(data))


# ---------------------------------------------------------------------------- protobuf, the fields used
def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _field(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _bytes(number: int, data: bytes) -> bytes:  # wire type 2: length-delimited
    return _field(number, 2) + _varint(len(data)) + data


def event(wall_time: float, step: int = 0, file_version: str | None = None, scalars: dict | None = None) -> bytes:
    """An ``Event``: wall_time (1, double), step (2, int64), and file_version (3, string) or a
    summary (5) whose values (1) each hold a tag (1, string) and a simple_value (2, float)."""
    out = _field(1, 1) + struct.pack("<d", wall_time) + _field(2, 0) + _varint(step & (2**64 - 1))
    if file_version is not None:
        out += _bytes(3, file_version.encode())
    if scalars:
        values = b"".join(_bytes(1, _bytes(1, tag.encode()) + _field(2, 5) + struct.pack("<f", value))
                          for tag, value in scalars.items())
        out += _bytes(5, values)
    return out


class EventWriter:
    """Scalars appended to a new event file in ``folder`` (one per writer: TensorBoard reads
    every file of a folder, so a resumed run adds its own beside the earlier ones). Each
    :meth:`add` is flushed, so a crash keeps every step written before it."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        now = time.time()
        name = f"events.out.tfevents.{int(now)}.{socket.gethostname()}.{os.getpid()}"
        self.path = self.folder / name
        self.file = open(self.path, "ab")
        self._write(event(now, file_version="brain.Event:2"))

    def _write(self, data: bytes) -> None:
        self.file.write(record(data))
        self.file.flush()

    def add(self, step: int, scalars: dict) -> None:
        """The finite numbers of ``scalars`` ({tag: number}) at ``step``."""
        kept = {tag: float(v) for tag, v in scalars.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
        if kept:
            self._write(event(time.time(), step, scalars=kept))

    def close(self) -> None:
        self.file.close()
