"""Batches by tokens (Section 5.1: "sentence pairs were batched together by approximate
sequence length"): sort by length inside large random pools, cut batches whose *padded*
size stays under ``max_tokens``, then shuffle the batches."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .tokenizer import BOS_ID, EOS_ID, PAD_ID


@dataclass
class Batch:
    """Padded arrays for one update: src (B, Ts) ends with eos; tgt_in (B, Tt) starts with bos;
    tgt_out (B, Tt) = tgt_in shifted left, ending with eos. ``index``: the examples' positions."""

    src: np.ndarray
    tgt_in: np.ndarray
    tgt_out: np.ndarray
    index: np.ndarray

    @property
    def target_tokens(self) -> int:
        """Non-pad target tokens: the loss is normalised by this."""
        return int((self.tgt_out != PAD_ID).sum())

    def __len__(self) -> int:
        return len(self.index)


def lengths(sentences: Sequence) -> np.ndarray:
    """Each sentence's number of ids: a :class:`~transformer.tokenizer.TokenIds` knows them, a
    list of arrays is measured."""
    known = getattr(sentences, "lengths", None)
    return known if known is not None else np.fromiter(map(len, sentences), dtype=np.int64, count=len(sentences))


def token_batches(src_lengths: Sequence[int], tgt_lengths: Sequence[int], max_tokens: int,
                  pool_size: int = 100_000, shuffle: bool = True, seed: int = 0) -> list[np.ndarray]:
    """Index arrays, one per batch, such that batch_size x (longest side + 1) <= max_tokens.

    Examples are shuffled (when ``shuffle``), cut into pools of ``pool_size``, sorted by
    length inside each pool so batches hold similar lengths (little padding), and the
    resulting batches are shuffled. The same ``seed`` gives the same batches.
    """
    src_lengths = np.asarray(src_lengths)
    tgt_lengths = np.asarray(tgt_lengths)
    n = len(src_lengths)
    if len(tgt_lengths) != n:
        raise ValueError(f"token_batches: {n} source lengths but {len(tgt_lengths)} target lengths")
    longest = np.maximum(src_lengths, tgt_lengths) + 1  # + eos (or bos)
    if n and longest.max() > max_tokens:
        i = int(longest.argmax())
        raise ValueError(f"token_batches: example {i} needs {int(longest[i])} tokens, more than max_tokens={max_tokens}; "
                         "filter long pairs or raise max_tokens")
    rng = np.random.default_rng(seed)
    order = rng.permutation(n) if shuffle else np.arange(n)
    batches = []
    for start in range(0, n, pool_size):
        pool = order[start:start + pool_size]
        pool = pool[np.argsort(longest[pool], kind="stable")]
        width = longest[pool]  # ascending: a batch's widest example is its last
        first = 0
        while first < len(pool):
            # the most examples from `first` on whose padded size (count x width of the last) fits;
            # the sizes grow with the count, so a binary search finds it (one example always fits)
            most = min(len(pool) - first, max_tokens // int(width[first]))
            sizes = width[first:first + most] * np.arange(1, most + 1)
            count = int(np.searchsorted(sizes, max_tokens, side="right"))
            batches.append(pool[first:first + count])
            first += count
    if shuffle:
        rng.shuffle(batches)
    return batches


def collate(src: Sequence[Sequence[int]], tgt: Sequence[Sequence[int]], index: np.ndarray) -> Batch:
    """Pad the examples at ``index`` into a :class:`Batch` (adding eos to the source, bos/eos to the target)."""
    index = np.asarray(index)
    y = [tgt[i] for i in index]
    return Batch(_padded([src[i] for i in index], end=EOS_ID), _padded(y, start=BOS_ID), _padded(y, end=EOS_ID), index)


def _padded(rows: list, start: int | None = None, end: int | None = None) -> np.ndarray:
    """Rows of ids as one (B, longest + 1) int64 array: each row ``[start] + ids`` or ``ids +
    [end]``, then pad. Filled in three array writes, whatever B."""
    n = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    out = np.full((len(rows), int(n.max(initial=0)) + 1), PAD_ID, dtype=np.int64)
    first = 0 if start is None else 1
    column = np.arange(out.shape[1])
    # a boolean mask fills row after row, left to right: the ids in the order they are concatenated
    out[(column >= first) & (column < n[:, None] + first)] = np.concatenate(rows) if rows else []
    if start is not None:
        out[:, 0] = start
    else:
        out[np.arange(len(rows)), n] = end
    return out


class UpdateBatches:
    """The training pairs as the updates take them: each epoch's token batches (a new order per
    epoch, from ``seed``; the last two epochs' kept), the place reached (``epoch``, and ``done``:
    the batches of it consumed, every rank's), and this rank's share of each update's group of
    ``group`` batches (every ``world_size``-th, from ``rank``), padded.

    :meth:`ahead` collates the next update's share while the device works on this one, and
    :meth:`next` hands it over when the place is still the one it was collated for."""

    def __init__(self, src, tgt, max_tokens: int, seed: int, group: int, rank: int = 0, world_size: int = 1):
        self.src, self.tgt, self.max_tokens, self.seed = src, tgt, max_tokens, seed
        self.group, self.rank, self.world_size = group, rank, world_size
        self.epoch, self.done = 0, 0
        self._epochs: dict = {}
        self._ahead = None, []  # (epoch, done): the share collated for that place

    def of_epoch(self, epoch: int) -> list[np.ndarray]:
        """The index arrays of an epoch's batches, every rank's."""
        if epoch not in self._epochs:
            self._epochs = {e: b for e, b in self._epochs.items() if e == epoch - 1}
            self._epochs[epoch] = token_batches(lengths(self.src), lengths(self.tgt), self.max_tokens,
                                                seed=self.seed * 100_003 + epoch)
        return self._epochs[epoch]

    def mine(self, group: list[np.ndarray]) -> list[Batch]:
        """This rank's share of ``group``, padded."""
        return [collate(self.src, self.tgt, idx) for idx in group[self.rank::self.world_size]]

    def _next_place(self) -> tuple[int, int]:
        """(epoch, done) where the next update starts: the next epoch's start after an epoch's last batch."""
        return (self.epoch + 1, 0) if self.done >= len(self.of_epoch(self.epoch)) else (self.epoch, self.done)

    def _group(self, epoch: int, done: int) -> list[np.ndarray]:
        return self.of_epoch(epoch)[done:][:self.group]

    def roll(self) -> int:
        """After an epoch's last batch, on to the next epoch; returns the epoch now."""
        self.epoch, self.done = self._next_place()
        return self.epoch

    def next(self) -> list[Batch]:
        """This rank's share of the next update's group, which then counts as consumed."""
        group = self._group(self.epoch, self.done)
        place, share = self._ahead
        self._ahead = None, []
        share = share if place == (self.epoch, self.done) else self.mine(group)
        self.done += len(group)
        return share

    def ahead(self, max_epochs: int) -> None:
        """Collate the share of the update after this one now, unless it would start epoch ``max_epochs``."""
        epoch, done = self._next_place()
        if epoch < max_epochs:
            self._ahead = (epoch, done), self.mine(self._group(epoch, done))

    def epochs_ended(self) -> int:
        """The epochs completed: one whose last batch was consumed counts (as a resumed run that
        makes no update finds it)."""
        return self.epoch + (self.done > 0 and self.done >= len(self.of_epoch(self.epoch)))
