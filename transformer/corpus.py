"""A training corpus from parallel text to the token ids the trainer reads, at any size.

Held as Python strings and per-sentence arrays, WMT14's 4.5 million pairs would take tens of
gigabytes; here the text is streamed and never held:

1. :func:`bpe_sample`: one pass filters the pairs and keeps a uniform random sample of the
   kept ones (reservoir sampling), on which the joint BPE model is trained;
2. :func:`encode_corpus`: a second pass filters again and encodes the kept pairs in chunks
   (sentencepiece's threads use every core), appending each side's ids to one flat file;
3. the cache (a folder per corpus) holds those files, every sentence's offset and a key (the
   tokenizer, the text's SHA-256 and the filter); training reads a batch's ids from the
   files (:class:`~transformer.tokenizer.IdFile`), and a later run reads no text at all.

Multi30k goes through the same steps; its 29k pairs fit in one sample and one chunk.
"""
from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import math
import os
import random
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
from tqdm import tqdm

from minitensor import allocator

from . import data as D
from . import wmt14
from .checkpoint import UNREADABLE
from .data import FilterReport, iter_parallel, pair_fault
from .files import STAMPS, sha256_of
from .flags import InputError
from .settings import DataSettings
from .tokenizer import IdFile, Tokenizer, TokenIds, encode_cached

CHUNK = 20_000  # pairs encoded at a time: enough for sentencepiece's threads, little text held
CACHE_VERSION = 2  # 2: key.json holds each file's SHA-256


@dataclass(frozen=True)
class ParallelText:
    """A parallel corpus's text, readable as often as needed: file pairs (plain text, .gz or
    SGM; streamed) or two lists already in memory."""

    files: tuple = ()
    lists: tuple | None = None

    def pairs(self) -> Iterator[tuple[str, str]]:
        return zip(*self.lists) if self.lists is not None else iter_parallel(self.files)

    def fingerprint(self) -> str:
        """SHA-256 over the text: every file's own SHA-256, or every line of the lists."""
        h = hashlib.sha256()
        if self.lists is not None:
            for side in self.lists:
                for line in side:
                    h.update(line.encode("utf-8"))
                    h.update(b"\n")
                h.update(b"\0")
        else:
            for src, tgt in self.files:
                h.update(f"{sha256_of(src)} {sha256_of(tgt)}\n".encode())
        return h.hexdigest()


@dataclass(frozen=True)
class PairFilter:
    """Which pairs are trained on: the first ``limit`` (all when None), less those with an empty
    side, a side of more than ``max_words`` words or a length ratio above ``max_ratio``."""

    max_words: int = 250
    max_ratio: float = 3.0
    limit: int | None = None

    def kept(self, text: ParallelText, report: FilterReport) -> Iterator[tuple[str, str]]:
        """The pairs that pass, counted in ``report`` (kept_index is not filled: it would grow with the corpus)."""
        pairs = text.pairs() if self.limit is None else itertools.islice(text.pairs(), self.limit)
        for s, t in pairs:
            report.total += 1
            fault = pair_fault(len(s.split()), len(t.split()), self.max_words, self.max_ratio)
            if fault:
                setattr(report, fault, getattr(report, fault) + 1)
                continue
            report.kept += 1
            yield s, t


# ---------------------------------------------------------------------------- 1. the BPE sample
def bpe_sample(text: ParallelText, keep: PairFilter, size: int, seed: int = 0) -> tuple[list, list, FilterReport]:
    """A uniform random sample of ``size`` kept pairs (all of them when fewer), in corpus order,
    and the filter's report over the whole corpus.

    Reservoir sampling (Li's algorithm L): the first ``size`` pairs fill the reservoir, then a
    geometric skip finds the next pair to take, so the randomness costs O(size log(n / size)).
    """
    if size < 1:
        raise ValueError(f"bpe_sample: size must be >= 1, got {size}")
    report = FilterReport()
    rng = random.Random(seed)
    reservoir, where = [], []  # the pairs and their positions among the kept ones
    kept = keep.kept(text, report)
    for i, pair in zip(range(size), kept):
        reservoir.append(pair)
        where.append(i)
    w = math.exp(math.log(_uniform(rng)) / size)
    nxt = size + _skip(rng, w)
    for i, pair in enumerate(kept, start=size):
        if i == nxt:
            j = rng.randrange(size)
            reservoir[j], where[j] = pair, i
            w *= math.exp(math.log(_uniform(rng)) / size)
            nxt = i + 1 + _skip(rng, w)
    order = sorted(range(len(reservoir)), key=where.__getitem__)
    return [reservoir[k][0] for k in order], [reservoir[k][1] for k in order], report


def _uniform(rng: random.Random) -> float:
    """A uniform draw from (0, 1]: never 0, so its logarithm is finite."""
    return 1.0 - rng.random()


def _skip(rng: random.Random, w: float) -> int:
    """How many pairs algorithm L passes over before the next one it takes."""
    if w >= 1.0:
        return 1 << 62
    return int(math.log(_uniform(rng)) / math.log1p(-w))


# ---------------------------------------------------------------------------- 2. encoding, 3. the cache
def encode_corpus(tokenizer: Tokenizer, text: ParallelText, keep: PairFilter, cache: str | Path,
                  progress: bool = False, text_sha256: str | None = None,
                  warn=None) -> tuple[TokenIds, TokenIds, FilterReport]:
    """The ids of the kept pairs' two sides, from ``cache`` when it holds this tokenizer, text
    and filter, else encoded and cached there. ``text_sha256``: the text's fingerprint, when the
    caller has just computed it (a large corpus takes seconds to hash). ``warn`` hears why a cache
    there is not used (:func:`load_cache`).

    The kept pairs are encoded ``CHUNK`` at a time; sentencepiece encodes a chunk's sentences
    on every core (its own threads), and each side's ids are appended to its file.
    """
    cache = Path(cache)
    text_sha256 = text_sha256 or text.fingerprint()
    key = hashlib.sha256(json.dumps([CACHE_VERSION, tokenizer.fingerprint(), text_sha256, asdict(keep)])
                         .encode()).hexdigest()
    found = load_cache(cache, key, warn)
    if found is not None:
        return found
    partial = cache.with_name(cache.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    report = FilterReport()
    kept = keep.kept(text, report)
    chunks = iter(lambda: tuple(zip(*itertools.islice(kept, CHUNK))), ())
    hashes = {"src.ids": hashlib.sha256(), "tgt.ids": hashlib.sha256()}  # of the bytes as they are written
    with open(partial / "src.ids", "wb") as src_out, open(partial / "tgt.ids", "wb") as tgt_out, \
            tqdm(desc="encoding", unit=" pairs", unit_scale=True, disable=not progress, leave=False, delay=1.0) as bar:
        lengths = ([], [])
        for chunk in chunks:
            for lines, out, lens, h in zip(chunk, (src_out, tgt_out), lengths, hashes.values()):
                ids = TokenIds.from_lists(tokenizer.encode(list(lines)))
                ids.flat.tofile(out)
                h.update(ids.flat.data)
                lens.append(ids.lengths)
            bar.update(len(chunk[0]))
    for side, lens in zip(("src", "tgt"), lengths):
        offsets = np.zeros(sum(map(len, lens)) + 1, dtype=np.int64)
        if lens:
            np.cumsum(np.concatenate(lens), dtype=np.int64, out=offsets[1:])
        np.save(partial / f"{side}.offsets.npy", offsets)
    sha256 = {name: h.hexdigest() for name, h in hashes.items()}
    sha256.update({f"{side}.offsets.npy": sha256_of(partial / f"{side}.offsets.npy") for side in ("src", "tgt")})
    (partial / "key.json").write_text(json.dumps({"key": key, "report": _report_dict(report), "sha256": sha256}))
    shutil.rmtree(cache, ignore_errors=True)
    os.replace(partial, cache)
    return (*_load_sides(cache), report)


def load_cache(cache: str | Path, key: str, warn=None) -> tuple[TokenIds, TokenIds, FilterReport] | None:
    """The cached ids (left in their files) and report when ``cache`` holds them for ``key``, else
    None: also when the cache is damaged (it is only derived data, so it is made again), which
    ``warn`` hears of when a file no longer has the SHA-256 recorded for it (altered in place)."""
    path = Path(cache) / "key.json"
    if not path.exists():
        return None
    try:
        meta = json.loads(path.read_text())
        if meta.get("key") != key:
            return None
        for name, sha256 in meta["sha256"].items():
            if sha256_of(Path(cache) / name, stamps=Path(cache) / STAMPS) != sha256:
                if warn is not None:
                    warn(f"note: {Path(cache) / name} is not the file the cache recorded (its SHA-256 differs from "
                         f"{path}'s): the token id cache is damaged, so the text is encoded again")
                return None
        src, tgt = _load_sides(Path(cache))
        if not (_whole(src) and _whole(tgt) and len(src) == len(tgt)):
            return None
        return src, tgt, FilterReport(**meta["report"])
    except (*UNREADABLE, TypeError, AttributeError):
        return None


def _whole(ids: TokenIds) -> bool:
    """Whether a side's offsets and its ids file agree (a truncated file does not)."""
    offsets = ids.offsets
    return len(offsets) >= 1 and offsets[0] == 0 and offsets[-1] == len(ids.flat) and bool(np.all(np.diff(offsets) >= 0))


def _load_sides(cache: Path) -> tuple[TokenIds, TokenIds]:
    """Both sides' ids, left in their files (:class:`~transformer.tokenizer.IdFile`)."""
    return tuple(TokenIds(IdFile(cache / f"{side}.ids"), np.load(cache / f"{side}.offsets.npy"))
                 for side in ("src", "tgt"))


def _report_dict(report: FilterReport) -> dict:
    return {k: v for k, v in asdict(report).items() if k != "kept_index"}


# ---------------------------------------------------------------------------- a run's data, prepared
@dataclass
class ParallelData:
    """Token ids of a parallel corpus (lists of int arrays, no bos/eos) and, for validation, its text."""

    src: Sequence[np.ndarray]
    tgt: Sequence[np.ndarray]
    src_text: Sequence[str] = field(default_factory=list)
    tgt_text: Sequence[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.src)




# pairs the joint BPE model is trained on, sampled from the whole corpus (every pair of a smaller one)
BPE_SAMPLE_PAIRS = 1_000_000


def load_corpora(data: DataSettings) -> dict:
    """{"train": ParallelText (streamed), "valid": (src, tgt) lists, "test": lists or None}."""
    if data.dataset == "multi30k":
        folder = D.multi30k_files(data.data_dir)
        s, t = data.src_lang, data.tgt_lang
        return {"train": ParallelText(files=((folder / f"train.{s}.gz", folder / f"train.{t}.gz"),)),
                "valid": D.multi30k("val", s, t, folder),
                "test": D.multi30k("test_2016_flickr", s, t, folder)}
    if data.data_dir and not data.train_src:  # a folder that `data wmt14` prepared
        train, valid, test = (wmt14.split_files(data.data_dir, split, data.src_lang, data.tgt_lang)
                              for split in wmt14.SPLITS)
        return {"train": ParallelText(files=(train,)), "valid": D.read_parallel(*valid), "test": D.read_parallel(*test)}
    if not (data.train_src and data.train_tgt and data.valid_src and data.valid_tgt):
        raise InputError("wmt14 needs --data-dir (a folder prepared by: python -m transformer data wmt14 --out DIR) "
                         "or --train-src/--train-tgt (comma-separated lists allowed) and --valid-src/--valid-tgt "
                         "(newstest2013); --test-src/--test-tgt (newstest2014) are optional")
    train = ParallelText(files=tuple(zip(data.train_src.split(","), data.train_tgt.split(","))))
    test = D.read_parallel(data.test_src, data.test_tgt) if data.test_src and data.test_tgt else None
    return {"train": train, "valid": D.read_parallel(data.valid_src, data.valid_tgt), "test": test}


def prepare(data: DataSettings, run: Path, quiet: bool = False, progress: bool = True, timings: dict | None = None,
            expect_text: str | None = None):
    """Filter, train (or load) the joint BPE model on a sample, encode on every core (cached):
    -> tokenizer, train, valid, test, and the training text's SHA-256. The training text is
    streamed, never held. ``quiet``: no notes (the other ranks of a data-parallel run);
    ``progress``: a progress bar while encoding. ``timings``, when given, receives each stage's
    seconds. ``expect_text``: the SHA-256 the training text must have (a resumed run's), checked
    before anything is encoded."""
    timings = {} if timings is None else timings
    with _stage(timings, "read and filter, BPE sample"):
        corpora = load_corpora(data)
        text_sha256 = corpora["train"].fingerprint()
        if expect_text is not None and text_sha256 != expect_text:
            raise InputError(f"--resume: the training text is not the run's (its SHA-256 is {text_sha256[:12]}..., the "
                             f"run was trained on {expect_text[:12]}...); give the run's own data (--data-dir or the "
                             "--train-src/--train-tgt files it was trained on)")
        keep = PairFilter(data.max_words, data.max_ratio, data.limit)
        model_path = run / "spm.model"
        if not model_path.exists():
            src, tgt, report = bpe_sample(corpora["train"], keep, BPE_SAMPLE_PAIRS)
            if not src:
                raise D.DataError(f"no training pair is left to learn from ({report}); raise --max-words or "
                                  "--max-ratio, or check the training files")
    if model_path.exists():
        tok = Tokenizer(model_path)
    else:
        if not quiet:
            print(f"training data: {report}; training the BPE model on {len(src):,} of them", file=sys.stderr)
        with _stage(timings, "BPE training"):
            tok = Tokenizer.train(src + tgt, run / "spm", data.vocab_size)
        del src, tgt
    with _stage(timings, "encode and cache"):
        src, tgt, report = encode_corpus(tok, corpora["train"], keep, run / "cache" / "train",
                                         progress=progress and not quiet, text_sha256=text_sha256,
                                         warn=None if quiet else lambda msg: print(msg, file=sys.stderr))
        if len(src) == 0:
            raise D.DataError(f"no training pair is left to learn from ({report}); raise --max-words or --max-ratio, or "
                              "check the training files")
        vs, vt = corpora["valid"]
        cache = run / "cache"
        valid = ParallelData(encode_cached(tok, vs, cache / "valid.src.npz"),
                             encode_cached(tok, vt, cache / "valid.tgt.npz"), vs, vt)
    allocator.release_free_memory()  # why: the text read and sampled is garbage now; training reuses none of it
    if not quiet:
        print(f"training data: {report}; {len(src.flat) + len(tgt.flat):,} tokens; ready in "
              f"{sum(timings.values()):.1f} s ({', '.join(f'{k} {v:.1f} s' for k, v in timings.items())})",
              file=sys.stderr)
    return tok, ParallelData(src, tgt), valid, corpora["test"], text_sha256


@contextlib.contextmanager
def _stage(timings: dict, name: str):
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - start
