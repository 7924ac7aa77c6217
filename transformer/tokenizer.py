"""Subwords: one joint sentencepiece BPE model for both languages of a pair (Section 5.1
uses a shared source-target vocabulary), with the special ids the model expects.

ids: 0 = <pad>, 1 = <s> (bos), 2 = </s> (eos), 3 = <unk>; the same as TransformerConfig's
defaults, so a model built with ``vocab_size = tokenizer.vocab_size`` agrees with it.
"""
from __future__ import annotations

import hashlib
import io
import itertools
import os
import re
from pathlib import Path
from collections.abc import Sequence

import numpy as np
import sentencepiece as spm

from .checkpoint import UNREADABLE, arrays_sha256
from .files import Output, write_file

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3


class VocabularyTooLarge(ValueError):
    """The corpus has too few distinct pieces for the vocabulary size asked for."""


class VocabularyTooSmall(ValueError):
    """The vocabulary size asked for cannot hold the corpus's characters and the special pieces."""


class TokenizerModelError(ValueError):
    """A sentencepiece model file that cannot be read (damaged, or not a model at all)."""


class Tokenizer:
    """A trained sentencepiece model: text <-> lists of ids."""

    def __init__(self, model_path: str | Path):
        self.path = Path(model_path)
        if not self.path.exists():
            raise FileNotFoundError(f"{self.path}: no sentencepiece model here (train one with Tokenizer.train)")
        try:
            self.sp = spm.SentencePieceProcessor(model_file=str(self.path))
        except (RuntimeError, OSError) as e:  # sentencepiece: "INTERNAL: ..." for a file that is not a model
            raise TokenizerModelError(f"{self.path} is not a sentencepiece model that can be read ({str(e).strip()}): "
                                      "it is damaged, or another file took its name") from None
        ids = (self.sp.pad_id(), self.sp.bos_id(), self.sp.eos_id(), self.sp.unk_id())
        if ids != (PAD_ID, BOS_ID, EOS_ID, UNK_ID):
            raise ValueError(f"{self.path}: special ids (pad, bos, eos, unk) are {ids}, expected "
                             f"{(PAD_ID, BOS_ID, EOS_ID, UNK_ID)}")

    @classmethod
    def train(cls, texts: Sequence[str], model_prefix: str | Path, vocab_size: int = 8000,
              character_coverage: float = 1.0, max_sentences: int = 2_000_000, seed: int = 0) -> "Tokenizer":
        """Train a BPE model on ``texts`` (both languages together) -> ``<model_prefix>.model``, and
        its pieces and scores as text in ``<model_prefix>.vocab``.

        ``max_sentences`` caps how many lines sentencepiece samples (WMT is large). The lines go
        to sentencepiece from memory and the model comes back in memory, so nothing is left in a
        temporary folder if the process is killed, and both files are written whole
        (:func:`transformer.files.write_file`), the model last.
        """
        prefix = Path(model_prefix)
        prefix.parent.mkdir(parents=True, exist_ok=True)
        if hasattr(spm, "set_random_generator_seed"):
            spm.set_random_generator_seed(seed)  # the sentence sampling is reproducible
        model = io.BytesIO()
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=(line.replace("\n", " ") for line in texts if line.strip()), model_writer=model,
                vocab_size=vocab_size, model_type="bpe", pad_id=PAD_ID, bos_id=BOS_ID, eos_id=EOS_ID, unk_id=UNK_ID,
                character_coverage=character_coverage, input_sentence_size=max_sentences,
                shuffle_input_sentence=True, num_threads=os.cpu_count() or 1,
                minloglevel=2,
            )
        except RuntimeError as e:  # sentencepiece: "Vocabulary size too high (8000). Please set it to a value <= 15."
            most = re.search(r"Vocabulary size too high \((\d+)\).*<= *(\d+)", str(e))
            least = re.search(r"Vocabulary size is smaller than required_chars\. *(\d+) vs (\d+)", str(e))
            if most:
                raise VocabularyTooLarge(
                    f"the training corpus allows at most {most.group(2)} pieces, not {most.group(1)}; "
                    f"use --vocab-size {most.group(2)} or less (or more training data)") from None
            if least:
                raise VocabularyTooSmall(
                    f"the training corpus has characters enough to need at least {least.group(2)} pieces (each "
                    f"character and the special pieces), not {least.group(1)}; use --vocab-size {least.group(2)} "
                    "or more") from None
            raise
        sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
        # (the file sentencepiece writes beside a model: each piece and its score, as C++ prints a float)
        write_file(f"{prefix}.vocab", "".join(f"{sp.id_to_piece(i)}\t{sp.get_score(i):g}\n"
                                              for i in range(sp.get_piece_size())))
        write_file(f"{prefix}.model", model.getvalue())
        return cls(str(prefix) + ".model")

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, text: str | Sequence[str]):
        """ids of one sentence (list) or of many (list of lists); no bos/eos added."""
        return self.sp.encode(text)

    def decode(self, ids) -> str | list[str]:
        """Text from ids (one list or many); pad, bos and eos are dropped, and decoding stops at eos."""
        if len(ids) and not isinstance(ids[0], (int, np.integer)):
            return [self.decode(x) for x in ids]
        out = []
        for i in ids:
            i = int(i)
            if i == EOS_ID:
                break
            if i not in (PAD_ID, BOS_ID):
                out.append(i)
        return self.sp.decode(out)

    def pieces(self, text: str) -> list[str]:
        return self.sp.encode(text, out_type=str)

    def fingerprint(self) -> str:
        """sha256 of the model file: checkpoints store it so a mismatched vocabulary is caught."""
        return fingerprint(self.path)


def fingerprint(model_file: str | Path) -> str:
    """A BPE model file's identity, as checkpoints store it (``vocab_sha256``): its sha256 (the
    model is not loaded, so a damaged file has one too)."""
    return hashlib.sha256(Path(model_file).read_bytes()).hexdigest()


# ---------------------------------------------------------------------------- token ids of many sentences
class IdFile:
    """A file of little-endian int32 token ids, sliced like a flat array (``ids[a:b]``): each
    slice is read from the file when asked for, so a corpus's ids stay on disk (and in the
    operating system's cache) and only the sentences a batch takes come into the process.

    (Memory-mapping the file would read as simply, but every sentence touched maps whole
    pages, on recent kernels whole 2 MiB folios, into the process: after one WMT14 update
    0.6 GB of them, on the way to all of the file.)
    """

    dtype = np.dtype("<i4")

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._file = open(self.path, "rb")
        self._len = os.fstat(self._file.fileno()).st_size // self.dtype.itemsize

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, where: slice) -> np.ndarray:
        if not isinstance(where, slice):
            raise TypeError("an IdFile is read by slices, ids[a:b]")
        start, stop, step = where.indices(self._len)
        if step != 1:
            raise ValueError("an IdFile is read by contiguous slices")
        self._file.seek(start * self.dtype.itemsize)
        return np.frombuffer(self._file.read(max(stop - start, 0) * self.dtype.itemsize), dtype=self.dtype)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        """All of it, read into memory."""
        return np.fromfile(self.path, dtype=self.dtype).astype(dtype or self.dtype, copy=False)

    def __del__(self):
        if getattr(self, "_file", None) is not None:
            self._file.close()


class TokenIds(Sequence):
    """The token ids of many sentences in one flat array: sentence i is ``flat[offsets[i]:offsets[i + 1]]``.

    It reads like a list of int arrays (``len``, ``ids[i]``, iteration) but holds two arrays;
    ``flat`` may also be an :class:`IdFile`, the ids left on disk: a corpus of millions of
    sentences then costs its offsets and nothing per sentence.
    """

    def __init__(self, flat: np.ndarray, offsets: np.ndarray):
        if len(offsets) == 0 or offsets[0] != 0 or offsets[-1] != len(flat):
            raise ValueError(f"offsets must run from 0 to len(flat) = {len(flat)}")
        self.flat, self.offsets = flat, offsets

    @classmethod
    def from_lists(cls, encoded: Sequence[Sequence[int]]) -> "TokenIds":
        """From lists of ids, as sentencepiece returns them."""
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        flat = np.fromiter(itertools.chain.from_iterable(encoded), dtype=np.int32, count=int(offsets[-1]))
        return cls(flat, offsets)

    @property
    def lengths(self) -> np.ndarray:
        """Each sentence's number of ids."""
        return np.diff(self.offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"sentence {i} of {n}")
        i %= n
        return self.flat[self.offsets[i]:self.offsets[i + 1]]

    def __iter__(self):
        flat, offsets = self.flat, self.offsets
        return (flat[offsets[i]:offsets[i + 1]] for i in range(len(self)))


def encode_cached(tokenizer: Tokenizer, lines: Sequence[str], cache_path: str | Path) -> TokenIds:
    """Token ids of ``lines``, cached in an ``.npz`` keyed by the tokenizer and the text.

    The cache holds the flat int32 array and the offsets of :class:`TokenIds` and their hash, so
    it loads with ``allow_pickle=False``; a cache made by another tokenizer or other text, or whose
    arrays no longer match their hash (altered in place), is rebuilt. (For a
    whole training corpus, :func:`transformer.corpus.encode_corpus` streams the text, encodes it
    on every core and leaves its cache on disk.)
    """
    cache_path = Path(cache_path)
    h = hashlib.sha256(tokenizer.fingerprint().encode())
    for line in lines:
        h.update(line.encode("utf-8"))
        h.update(b"\n")
    key = h.hexdigest()
    if cache_path.exists():
        try:
            with np.load(cache_path, allow_pickle=False) as z:
                if str(z["key"]) == key:
                    ids = TokenIds(z["flat"], z["offsets"])
                    if arrays_sha256({"flat": ids.flat, "offsets": ids.offsets}) == str(z["sha256"]):
                        return ids  # (an array altered in place no longer has its hash: made again below)
        except (*UNREADABLE, IndexError):
            pass  # a damaged cache is only derived data: made again below
    ids = TokenIds.from_lists(tokenizer.encode(list(lines)))
    cache_path.parent.mkdir(parents=True, exist_ok=True)
    with Output(cache_path, binary=True) as f:
        np.savez(f, key=np.array(key), flat=ids.flat, offsets=ids.offsets,
                 sha256=np.array(arrays_sha256({"flat": ids.flat, "offsets": ids.offsets})))
    return ids
