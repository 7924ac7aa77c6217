"""Turning a trained model into output sequences: greedy decoding and beam search
(Section 6.1: beam size 4, length penalty α = 0.6, maximum length = input length + 50)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import minitensor as mt

from .masks import padding_mask


def _prepare(model, src):
    cfg = model.cfg
    model.eval()
    src = model.as_ids(src)
    src_mask = padding_mask(src, cfg.pad_id)
    return cfg, src, src_mask, model.encode(src, src_mask)


def _step_logits(model, ys, memory, src_mask, cache):
    """Log-probabilities of the next token after every row of ``ys`` (B, t) -> (B, V) array.

    pad and bos get a logit of -inf (probability 0), as in fairseq: neither is ever an output,
    and a generated pad would be attended to through the cache but masked without it.
    """
    inp = ys[:, -1:] if cache is not None else ys
    h = model.decode(mt.Tensor._wrap(inp), memory, src_mask, cache=cache)
    logits = model.generator(h[:, -1]).data
    logits[:, [model.cfg.pad_id, model.cfg.bos_id]] = -np.inf
    return mt.functional.log_softmax(mt.Tensor._wrap(logits), axis=-1).data


@mt.no_grad()
def greedy_decode(model, src, max_len: int | None = None, use_cache: bool = True) -> np.ndarray:
    """Pick the most likely next token at every step until eos (or ``max_len`` tokens).

    src: ids (B, Ts). Returns an int64 array (B, L) of generated tokens without the leading
    bos; after a sequence's eos the rest of its row is pad. ``max_len`` defaults to
    Ts + 50. ``use_cache`` decodes incrementally (same result, less work). The model is put
    in eval mode.
    """
    cfg, src, src_mask, memory = _prepare(model, src)
    B, Ts = src.shape
    max_len = Ts + 50 if max_len is None else max_len
    xp = src.xp
    cache = model.new_cache() if use_cache else None
    ys = xp.full((B, 1), cfg.bos_id, dtype=np.int64)
    done = xp.zeros(B, dtype=bool)
    for _ in range(max_len):
        nxt = _step_logits(model, ys, memory, src_mask, cache).argmax(axis=-1)
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
                use_cache: bool = True, n_best: int = 1):
    """Batched beam search. Returns, per source sentence, its ``n_best`` hypotheses best first
    (a list of :class:`Hypothesis`; with n_best=1 use ``[0]``).

    Every step ranks all one-token extensions of the open prefixes by total log probability;
    an extension by eos among the ``beam_size`` best becomes a finished hypothesis, and the
    ``beam_size`` best other extensions stay open. Finished hypotheses are scored by
    log P / ((5+|Y|)/6)^α. A sentence stops when it has ``beam_size`` finished hypotheses, or
    at ``max_len`` (default: source length + 50) when its open prefixes are finished as they are.
    """
    cfg, src, src_mask, memory = _prepare(model, src)
    B, Ts = src.shape
    K = beam_size
    max_len = Ts + 50 if max_len is None else max_len
    xp = src.xp
    # every sentence's encoder output, repeated for its K beams: row b*K + k
    rows = xp.repeat(xp.arange(B), K)
    memory = mt.Tensor._wrap(memory.data[rows])
    src_mask = mt.Tensor._wrap(src_mask.data[rows])
    cache = model.new_cache() if use_cache else None
    ys = xp.full((B * K, 1), cfg.bos_id, dtype=np.int64)
    scores = xp.full((B, K), -np.inf, dtype=np.float64)
    scores[:, 0] = 0.0                       # start from one beam, not K copies of it
    finished = [[] for _ in range(B)]
    done = np.zeros(B, dtype=bool)
    for t in range(1, max_len + 1):
        logp = _step_logits(model, ys, memory, src_mask, cache).astype(np.float64)   # (B*K, V)
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
