"""Translation of whole corpora and BLEU (sacreBLEU, detokenized, with its signature)."""
from __future__ import annotations

import re
import sys
from typing import Sequence

import sacrebleu
from tqdm import tqdm

import minitensor as mt

from .batching import collate, token_batches
from .decoding import beam_search, check_search, greedy_decode, memory_estimate, output_limit
from .tokenizer import Tokenizer


LONG_LINES = ("split", "truncate", "error")
DECODE_MEMORY_GIB = 2.0  # what one decoding batch may hold at its peak (decoding.memory_estimate); batches split to fit
_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+")


class LongLineError(ValueError):
    """A line has more pieces than the model may take, and ``long_lines="error"`` was asked for."""


class DecodingTooLarge(ValueError):
    """One sentence alone would need more memory to decode than allowed."""


def split_text(text: str, fits) -> list[str]:
    """``text`` cut into consecutive parts that each ``fits`` (a predicate on a string), packed
    greedily: whole sentences where they fit, a sentence that does not fit at word boundaries,
    and a word that does not fit alone on its own (then the caller cuts it between its pieces)."""
    parts: list[str] = []
    for sentence in _SENTENCE_END.split(text.strip()):
        pieces = [sentence] if fits(sentence) else sentence.split()
        for piece in pieces:
            joined = f"{parts[-1]} {piece}" if parts else piece
            if parts and fits(joined):
                parts[-1] = joined
            else:
                parts.append(piece)
    return parts


def _fit_long_lines(tokenizer: Tokenizer, sentences: Sequence[str], ids: list, limit: int, long_lines: str,
                    first_line: int, warn) -> list[tuple[int, list[int]]]:
    """(line index, ids) units to decode: one per line, or several for a line over ``limit``
    pieces (``split``); ``truncate`` keeps its first ``limit`` pieces, ``error`` refuses. Each
    line changed is named through ``warn``."""
    units = []
    for i, x in enumerate(ids):
        if len(x) <= limit:
            units.append((i, x))
            continue
        where = f"line {first_line + i}: {len(x)} pieces, more than the {limit} translated whole"
        if long_lines == "error":
            raise LongLineError(f"{where} (--long-lines split or truncate translates it)")
        if long_lines == "split":
            parts = [tokenizer.encode(t) for t in split_text(sentences[i], lambda t: len(tokenizer.encode(t)) <= limit)]
            # a word longer than the limit alone is cut between its pieces: every piece is translated
            cut = [p[k:k + limit] for p in parts for k in range(0, len(p), limit)]
            words = " (a word over the limit cut between its pieces)" if len(cut) > len(parts) else ""
            warn(f"{where}: translated in {len(cut)} part{'s' if len(cut) != 1 else ''}{words}")
            units += [(i, p) for p in cut]
        else:
            warn(f"{where}: only its first {limit} pieces were translated (--long-lines split translates all of it)")
            units.append((i, x[:limit]))
    return units


def translate(model, tokenizer: Tokenizer, sentences: Sequence[str], beam_size: int = 4, alpha: float = 0.6,
              max_tokens: int = 4096, device: str = "cpu", progress: bool = True, max_len_a: int = 50,
              long_lines: str = "split", max_pieces: int | None = None, memory_gib: float = DECODE_MEMORY_GIB,
              first_line: int = 1, warn=None) -> list[str]:
    """Translate ``sentences`` (batched by length) and detokenize; the output keeps the input order.

    beam_size 1 decodes greedily. The output may be at most source length + ``max_len_a``
    tokens (the paper's +50). An empty line translates to an empty line; any other gets at
    least one token. A line of more than ``max_pieces`` pieces (default and most: the model's
    positions, less one for eos) is handled as ``long_lines`` says (see :func:`_fit_long_lines`;
    ``first_line`` numbers the lines in its notes, which go to ``warn``, default stderr). A batch
    whose decoding would hold more than ``memory_gib`` (:func:`decoding.memory_estimate`) is
    decoded in smaller pieces.
    """
    if long_lines not in LONG_LINES:
        raise ValueError(f"long_lines must be one of {', '.join(LONG_LINES)}, got {long_lines!r}")
    check_search(beam_size, alpha)
    if max_pieces is not None and max_pieces < 1:
        raise ValueError(f"max_pieces must be >= 1, got {max_pieces}")
    if not memory_gib > 0:
        raise ValueError(f"memory_gib must be > 0, got {memory_gib}")
    warn = warn or (lambda msg: tqdm.write(f"note: {msg}", file=sys.stderr))
    limit = min(max_pieces if max_pieces is not None else model.cfg.max_len - 1, model.cfg.max_len - 1)
    ids = tokenizer.encode(list(sentences))
    units = [(i, x) for i, x in _fit_long_lines(tokenizer, sentences, ids, limit, long_lines, first_line, warn) if x]
    unit_ids = [x for _, x in units]
    lengths = [len(x) for x in unit_ids]
    batches = token_batches(lengths, lengths, max_tokens, pool_size=max(len(unit_ids), 1), shuffle=False)
    parts: list[str] = [""] * len(units)
    budget = memory_gib * 2**30
    with tqdm(total=len(units), desc="translating", unit="sentence", disable=not progress, leave=False) as bar:
        for batch in batches:
            T = max(lengths[int(i)] for i in batch) + 1
            rows_per_sentence = memory_estimate(model.cfg, beam_size, T, output_limit(model, T, T + max_len_a))
            if rows_per_sentence > budget:
                raise DecodingTooLarge(f"decoding one sentence of {T} pieces with beam {beam_size} needs about "
                                  f"{rows_per_sentence / 2**30:.3g} GiB, more than the {memory_gib:g} GiB allowed; "
                                  "use a smaller beam or allow more memory")
            step = max(1, int(budget // rows_per_sentence))
            for start in range(0, len(batch), step):
                chunk = batch[start:start + step]
                src_t = mt.tensor(collate(unit_ids, unit_ids, chunk).src, device=device)  # source + eos, padded
                if beam_size == 1:
                    hyps = greedy_decode(model, src_t, max_len=T + max_len_a)
                else:
                    results = beam_search(model, src_t, beam_size=beam_size, alpha=alpha, max_len=T + max_len_a)
                    hyps = [r[0].tokens for r in results]
                for r, i in enumerate(chunk):
                    parts[int(i)] = tokenizer.decode(list(hyps[r]))
                bar.update(len(chunk))
    out: list[list[str]] = [[] for _ in sentences]
    for (line, _), text in zip(units, parts):
        out[line].append(text)
    return [" ".join(p) for p in out]


def bleu(hypotheses: Sequence[str], references: Sequence[str], lowercase: bool = False) -> dict:
    """Corpus BLEU of detokenized text with sacreBLEU's default 13a tokenization.

    Returns {"score", "signature", "lowercase"}; the lowercased score is the one usually quoted
    for Multi30k.
    """
    if len(hypotheses) != len(references):
        raise ValueError(f"bleu: {len(hypotheses)} hypotheses for {len(references)} references")
    metric = sacrebleu.metrics.BLEU(lowercase=lowercase)
    result = metric.corpus_score(list(hypotheses), [list(references)])
    return {"score": round(float(result.score), 2), "signature": str(metric.get_signature()), "lowercase": lowercase}
