"""Parallel text: reading, checking, filtering, and the Multi30k and WMT14 sources.

Everything here works on plain text, one sentence per line (optionally gzip-compressed).
Problems with the input are reported with the file (and line) they come from.
"""
from __future__ import annotations

import gzip
import html
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator, Sequence

from minitensor import environment

from .download import download
from .files import sha256_of


class DataError(ValueError):
    """The data on disk is not what a parallel corpus must be."""


def _open_binary(path: Path):
    return gzip.open(path, "rb") if str(path).endswith(".gz") else open(path, "rb")


MAX_LINE_BYTES = 4 << 20  # a "sentence" longer than this is not text of one sentence per line (/dev/zero, a binary file)


def decode_lines(stream: BinaryIO, name: str) -> Iterator[str]:
    """A byte stream's lines as text, without their line endings, read one at a time (a pipe or
    a device is read once, as it comes). Raises :class:`DataError` naming ``name`` (a file, or
    "stdin") and the (1-based) line with invalid UTF-8, or longer than :data:`MAX_LINE_BYTES`."""
    for number, line in enumerate(iter(lambda: stream.readline(MAX_LINE_BYTES + 2), b""), start=1):
        if len(line.rstrip(b"\r\n")) > MAX_LINE_BYTES:
            raise DataError(f"{name}:{number}: a line of more than {MAX_LINE_BYTES >> 20} MiB, so not text with one "
                            "sentence per line")
        try:
            yield line.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as e:
            raise DataError(f"{name}:{number}: invalid UTF-8 ({e.reason} at byte {e.start})") from None


def iter_lines(path: str | Path) -> Iterator[str]:
    """The lines of a UTF-8 text file (``.gz`` is decompressed), one at a time, as
    :func:`decode_lines` gives them."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: no such file")
    with _open_binary(path) as f:
        yield from decode_lines(f, str(path))


def read_lines(path: str | Path) -> list[str]:
    """All lines of a UTF-8 text file, as :func:`iter_lines` gives them."""
    return list(iter_lines(path))


def read_parallel(src_path: str | Path, tgt_path: str | Path) -> tuple[list[str], list[str]]:
    """Both sides of a parallel corpus, plain text or WMT SGM (by the file name); their
    sentence counts must agree. WMT14: training text pairs, newstest2013 (dev), newstest2014 (test)."""
    src, tgt = read_text_or_sgm(src_path), read_text_or_sgm(tgt_path)
    if len(src) != len(tgt):
        raise DataError(f"parallel files differ in length: {src_path} has {len(src)} lines, "
                        f"{tgt_path} has {len(tgt)} lines")
    return src, tgt


@dataclass
class FilterReport:
    """How many pairs each rule removed, and how many were kept."""

    total: int = 0
    empty: int = 0
    too_long: int = 0
    bad_ratio: int = 0
    kept: int = 0
    kept_index: list = field(default_factory=list, repr=False)

    def __str__(self) -> str:
        return (f"kept {self.kept} of {self.total} pairs (removed: {self.empty} empty, "
                f"{self.too_long} longer than the limit, {self.bad_ratio} with a bad length ratio)")


def pair_fault(ls: int, lt: int, max_len: int = 250, max_ratio: float = 3.0) -> str | None:
    """Why a pair of sides ``ls`` and ``lt`` long is dropped ("empty", "too_long", "bad_ratio"), or None."""
    if ls == 0 or lt == 0:
        return "empty"
    if ls > max_len or lt > max_len:
        return "too_long"
    if max(ls, lt) / min(ls, lt) > max_ratio:
        return "bad_ratio"
    return None


def filter_pairs(src: Sequence, tgt: Sequence, max_len: int = 250, max_ratio: float = 3.0,
                 length=lambda s: len(s.split())) -> tuple[list, list, FilterReport]:
    """Drop pairs with an empty side, a side longer than ``max_len``, or lengths whose ratio
    (longer / shorter) exceeds ``max_ratio``. ``length`` measures a side (default: words;
    pass ``len`` for token-id sequences). Returns the kept sides and a :class:`FilterReport`.
    """
    report = FilterReport(total=len(src))
    out_src, out_tgt = [], []
    for i, (s, t) in enumerate(zip(src, tgt)):
        fault = pair_fault(length(s), length(t), max_len, max_ratio)
        if fault:
            setattr(report, fault, getattr(report, fault) + 1)
        else:
            out_src.append(s)
            out_tgt.append(t)
            report.kept_index.append(i)
    report.kept = len(out_src)
    return out_src, out_tgt, report


def iter_parallel(files: Sequence[tuple[str | Path, str | Path]]) -> Iterator[tuple[str, str]]:
    """The sentence pairs of several parallel corpora in turn, each given as (source file,
    target file), plain text streamed or SGM; a corpus whose sides differ in length is a
    :class:`DataError` naming both files."""
    for src_path, tgt_path in files:
        src, tgt = (read_sgm(p) if _is_sgm(p) else iter_lines(p) for p in (src_path, tgt_path))
        n = 0
        for n, pair in enumerate(itertools.zip_longest(src, tgt), start=1):
            if pair[0] is None or pair[1] is None:
                counts = (n - 1, f"more than {n - 1}") if pair[0] is None else (f"more than {n - 1}", n - 1)
                raise DataError(f"parallel files differ in length: {src_path} has {counts[0]} lines, "
                                f"{tgt_path} has {counts[1]} lines")
            yield pair


# ---------------------------------------------------------------------------- Multi30k
MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"
MULTI30K_SPLITS = ("train", "val", "test_2016_flickr")
MULTI30K_SHA256 = {
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
}


def multi30k_files(root: str | Path | None = None, url: str = MULTI30K_URL) -> Path:
    """A directory holding the six Multi30k task-1 raw files, each checked against its sha256.

    ``root``: a local directory that already has them; without it, ``$MULTI30K_DIR`` when
    set (tests and CI point it at ``../shared/data/multi30k``). Otherwise the files are
    downloaded on first use from the dataset's public repository into
    ``multi30k/`` of the project's cache (:func:`minitensor.environment.cache_folder`), where the
    command line and the lessons both read them.
    """
    given = "--data-dir" if root is not None else "$MULTI30K_DIR"
    root = root if root is not None else environment.value("MULTI30K_DIR")
    local = root is not None
    folder = Path(root) if local else environment.cache_folder() / "multi30k"
    if local and not folder.is_dir():
        raise DataError(f"{given} {folder}: {'not a folder' if folder.exists() else 'no such folder'} (a Multi30k "
                        f"directory holds {', '.join(MULTI30K_SHA256)})")
    for name, digest in MULTI30K_SHA256.items():
        path = folder / name
        if not path.exists():
            if local:
                raise DataError(f"{path}: missing (a Multi30k directory needs {', '.join(MULTI30K_SHA256)})")
            # no network, refused, timed out, damaged: a DownloadError (a failure, not bad input)
            download(url + name, path, digest, offline_hint=(
                "without a network, set MULTI30K_DIR to a folder holding the six Multi30k files "
                f"({', '.join(MULTI30K_SHA256)})"))
        elif (found := sha256_of(path)) != digest:
            fix = ("restore it from the dataset, or point --data-dir (or MULTI30K_DIR) at an unchanged copy" if local
                   else "delete it to download it again")
            raise DataError(f"{path}: SHA-256 {found} does not match the expected {digest}, so it is not Multi30k's "
                            f"file; {fix}")
    return folder


def multi30k(split: str, src_lang: str = "en", tgt_lang: str = "de", root=None) -> tuple[list[str], list[str]]:
    """(source lines, target lines) of a Multi30k split: "train", "val" or "test_2016_flickr"."""
    if split not in MULTI30K_SPLITS:
        raise DataError(f"unknown Multi30k split {split!r}; choose from {MULTI30K_SPLITS}")
    folder = multi30k_files(root)
    return read_parallel(folder / f"{split}.{src_lang}.gz", folder / f"{split}.{tgt_lang}.gz")


# ---------------------------------------------------------------------------- WMT14
_SEG = re.compile(r"<seg[^>]*>(.*?)</seg>", re.IGNORECASE | re.DOTALL)


def read_sgm(path: str | Path) -> list[str]:
    """The segments of a WMT ``.sgm`` file (``<seg id=...>text</seg>``), entities unescaped."""
    text = "\n".join(read_lines(path))
    segments = [html.unescape(s.strip()) for s in _SEG.findall(text)]
    if not segments:
        raise DataError(f"{path}: no <seg> elements found; is this an SGM file?")
    return segments


def _is_sgm(path: str | Path) -> bool:
    return str(path).lower().endswith((".sgm", ".sgm.gz"))


def read_text_or_sgm(path: str | Path) -> list[str]:
    """Plain text (one sentence per line, .gz allowed) or SGM, by the file name."""
    return read_sgm(path) if _is_sgm(path) else read_lines(path)


def concat_parallel(pairs: Iterable[tuple[Sequence[str], Sequence[str]]]) -> tuple[list[str], list[str]]:
    """Several parallel corpora (e.g. Europarl, Common Crawl, News Commentary) as one."""
    src, tgt = [], []
    for s, t in pairs:
        src.extend(s)
        tgt.extend(t)
    return src, tgt
