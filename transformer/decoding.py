"""Turning a trained model into output sequences: greedy decoding and beam search
(Section 6.1: beam size 4, length penalty α = 0.6, maximum length = input length + 50)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

import minitensor as mt

from .masks import padding_mask

MAX_BEAM = 64  # the command line's default bound on the beam (a larger beam rarely helps and costs memory)


def _prepare(model, src):
    cfg = model.cfg
    model.eval()
    src = model.as_ids(src)
    src_mask = padding_mask(src, cfg.pad_id)
    return cfg, src, src_mask, model.encode(src, src_mask)


def _step_logits(model, ys, memory, src_mask, cache, min_len: int = 1):
    """Log-probabilities of the next token after every row of ``ys`` (B, t) -> (B, V) array.

    pad and bos get a logit of -inf (probability 0), as in fairseq: neither is ever an output,
    and a generated pad would be attended to through the cache but masked without it. So does
    eos until ``min_len`` tokens stand before it (fairseq's min_len, 1 by default): an output
    has at least one token. Beam search would otherwise rank the empty hypothesis by
    log P(eos) / lp(1), and lp(1) = 1, while every real translation's log P is a sum over its
    tokens; a model that gives eos a little probability first (an odd or long source it is
    unsure of) then wins the beam with nothing.
    """
    inp = ys[:, -1:] if cache is not None else ys
    h = model.decode(mt.from_array(inp), memory, src_mask, cache=cache)
    logits = model.generator(h[:, -1]).data
    banned = [model.cfg.pad_id, model.cfg.bos_id] + ([model.cfg.eos_id] if ys.shape[1] - 1 < min_len else [])
    logits[:, banned] = -np.inf
    return mt.functional.log_softmax(mt.from_array(logits), axis=-1).data


def output_limit(model, src_len: int, max_len: int | None) -> int:
    """Tokens an output may have: ``max_len`` (default: source length + 50, Section 6.1), and
    never more than the decoder's positions allow after bos."""
    wanted = src_len + 50 if max_len is None else max_len
    return max(1, min(wanted, model.cfg.max_len - 1))


def check_search(beam_size: int, alpha: float) -> None:
    """Raise ValueError for a beam below 1 or a length penalty α that is not finite and >= 0."""
    if isinstance(beam_size, bool) or not isinstance(beam_size, (int, np.integer)) or beam_size < 1:
        raise ValueError(f"beam_size must be a whole number >= 1, got {beam_size!r}")
    if not (math.isfinite(alpha) and alpha >= 0):
        raise ValueError(f"alpha must be finite and >= 0, got {alpha!r}")


def memory_estimate(cfg, rows: int, src_len: int, out_len: int) -> int:
    """Bytes a decoding of ``rows`` hypotheses at once (sentences x beam) may hold at its peak:
    per row, the next-token scores (float32 logits and log-probabilities, then float64 scores,
    candidates and their argsort: 32 bytes a vocabulary entry), each decoder layer's self-attention
    cache (keys and values for ``out_len`` steps, three times over while a step appends to it and
    the beam reorders it) and cross-attention keys and values, and the encoder output."""
    d = cfg.d_model
    per_row = 32 * cfg.target_vocab_size + 4 * d * (cfg.n_decoder_layers * (6 * out_len + 2 * src_len) + src_len)
    return rows * per_row


@mt.no_grad()
def greedy_decode(model, src, max_len: int | None = None, use_cache: bool = True, min_len: int = 1) -> np.ndarray:
    """Pick the most likely next token at every step until eos (or ``max_len`` tokens).

    src: ids (B, Ts). Returns an int64 array (B, L) of generated tokens without the leading
    bos; after a sequence's eos the rest of its row is pad. ``max_len`` defaults to
    Ts + 50 (capped by the decoder's positions). ``use_cache`` decodes incrementally (same
    result, less work). eos comes after ``min_len`` tokens at the earliest. The model is put in
    eval mode.
    """
    cfg, src, src_mask, memory = _prepare(model, src)
    B, Ts = src.shape
    max_len = output_limit(model, Ts, max_len)
    xp = src.xp
    cache = model.new_cache() if use_cache else None
    ys = xp.full((B, 1), cfg.bos_id, dtype=np.int64)
    done = xp.zeros(B, dtype=bool)
    for _ in range(max_len):
        nxt = _step_logits(model, ys, memory, src_mask, cache, min_len).argmax(axis=-1)
        nxt = xp.where(done, cfg.pad_id, nxt)
        ys = xp.concatenate([ys, nxt[:, None]], axis=1)
        done |= nxt == cfg.eos_id
        if bool(done.all()):
            break
    out = ys[:, 1:]
    return out.get() if hasattr(out, "get") else out


def length_penalty(length, alpha: float):
    """GNMT's lp(Y) = ((5 + |Y|) / 6)^α; hypotheses are ranked by log P(Y) / lp(Y)."""
    return ((5.0 + length) / 6.0) ** alpha


@dataclass
class Hypothesis:
    tokens: list          # generated ids, without bos, ending with eos when finished
    score: float          # log P / length penalty
    log_prob: float


@mt.no_grad()
def rank_extensions(scores, logp, n: int):
    """One step of beam search: rank every one-token extension of every beam by its total log
    probability, prefix score plus the token's, and keep the ``n`` best.

    scores (B, K): the beams' log probabilities so far (-inf for an unused beam);
    logp (B, K, V): each beam's next-token log probabilities. Returns (beam, token, score),
    each (B, n), best first: extension j of sentence b appends ``token[b, j]`` to beam
    ``beam[b, j]`` and scores ``score[b, j]``.
    """
    B, K, V = logp.shape
    cand = (scores[:, :, None] + logp).reshape(B, K * V)
    xp = mt.backend.array_module(cand)
    top = xp.argsort(-cand, axis=1, kind="stable")[:, :n]
    return top // V, top % V, xp.take_along_axis(cand, top, axis=1)


def beam_search(model, src, beam_size: int = 4, alpha: float = 0.6, max_len: int | None = None,
                use_cache: bool = True, n_best: int = 1, min_len: int = 1):
    """Batched beam search. Returns, per source sentence, its ``n_best`` hypotheses best first
    (a list of :class:`Hypothesis`; with n_best=1 use ``[0]``).

    Every step ranks all one-token extensions of the open prefixes by total log probability;
    an extension by eos among the ``beam_size`` best becomes a finished hypothesis, and the
    ``beam_size`` best other extensions stay open. Finished hypotheses are scored by
    log P / ((5+|Y|)/6)^α. A sentence stops when it has ``beam_size`` finished hypotheses, or
    at ``max_len`` (default: source length + 50, capped by the decoder's positions) when its open
    prefixes are finished as they are. eos comes after ``min_len`` tokens at the earliest (see
    :func:`_step_logits`: with ``min_len=0`` the empty output can win).
    """
    check_search(beam_size, alpha)
    cfg, src, src_mask, memory = _prepare(model, src)
    B, Ts = src.shape
    K = beam_size
    max_len = output_limit(model, Ts, max_len)
    xp = src.xp
    # every sentence's encoder output, repeated for its K beams: row b*K + k
    rows = xp.repeat(xp.arange(B), K)
    memory = mt.from_array(memory.data[rows])
    src_mask = mt.from_array(src_mask.data[rows])
    cache = model.new_cache() if use_cache else None
    ys = xp.full((B * K, 1), cfg.bos_id, dtype=np.int64)
    scores = xp.full((B, K), -np.inf, dtype=np.float64)
    scores[:, 0] = 0.0                       # start from one beam, not K copies of it
    finished = [[] for _ in range(B)]
    done = np.zeros(B, dtype=bool)
    for t in range(1, max_len + 1):
        logp = _step_logits(model, ys, memory, src_mask, cache, min_len).astype(np.float64)   # (B*K, V)
        V = logp.shape[-1]
        beam_of, token_of, top_scores = rank_extensions(scores, logp.reshape(B, K, V), 2 * K)  # enough to refill K
        top_scores_h, beam_h, token_h = (a.get() if hasattr(a, "get") else a for a in (top_scores, beam_of, token_of))
        ys_h = ys.get() if hasattr(ys, "get") else ys
        new_rows = np.zeros((B, K), dtype=np.int64)
        new_tokens = np.full((B, K), cfg.pad_id, dtype=np.int64)
        new_scores = np.full((B, K), -np.inf)
        for b in range(B):
            if done[b]:
                new_rows[b] = b * K
                continue
            kept = 0
            for j in range(2 * K):
                s, k, tok = top_scores_h[b, j], beam_h[b, j], token_h[b, j]
                if not np.isfinite(s):
                    break
                if tok == cfg.eos_id:
                    # an ending counts only if it ranks among the K best candidates of this step
                    if j < K and len(finished[b]) < K:
                        prefix = ys_h[b * K + k, 1:].tolist()
                        finished[b].append(Hypothesis(prefix + [int(tok)], s / length_penalty(t, alpha), s))
                    continue
                if kept < K:
                    new_rows[b, kept], new_tokens[b, kept], new_scores[b, kept] = b * K + k, tok, s
                    kept += 1
            if len(finished[b]) >= K or kept == 0:
                done[b] = True
        if done.all():
            break
        index = xp.asarray(new_rows.reshape(-1))
        ys = xp.concatenate([ys[index], xp.asarray(new_tokens.reshape(-1, 1))], axis=1)
        scores = xp.asarray(new_scores)
        if cache is not None:
            model.reorder_cache(cache, index)
    # sentences that hit max_len: their open prefixes count as they are
    scores_h = scores.get() if hasattr(scores, "get") else scores
    ys_h = ys.get() if hasattr(ys, "get") else ys
    results = []
    for b in range(B):
        hyps = list(finished[b])
        if not done[b] or not hyps:
            for k in range(K):
                s = scores_h[b, k]
                if np.isfinite(s):
                    toks = ys_h[b * K + k, 1:].tolist()
                    hyps.append(Hypothesis(toks, s / length_penalty(len(toks), alpha), s))
        hyps.sort(key=lambda h: -h.score)
        results.append(hyps[:n_best])
    return results


def hypotheses_to_array(results, pad_id: int = 0) -> np.ndarray:
    """The best hypothesis of each sentence as a padded (B, L) int64 array."""
    best = [r[0].tokens if r else [] for r in results]
    L = max((len(b) for b in best), default=0)
    out = np.full((len(best), max(L, 1)), pad_id, dtype=np.int64)
    for i, toks in enumerate(best):
        out[i, :len(toks)] = toks
    return out
