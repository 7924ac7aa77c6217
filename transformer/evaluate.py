"""Translation of whole corpora and BLEU (sacreBLEU, detokenized, with its signature)."""
from __future__ import annotations

from typing import Sequence

import sacrebleu
from tqdm.auto import tqdm

import minitensor as mt

from .batching import collate, token_batches
from .decoding import beam_search, greedy_decode
from .tokenizer import Tokenizer


def translate(model, tokenizer: Tokenizer, sentences: Sequence[str], beam_size: int = 4, alpha: float = 0.6,
              max_tokens: int = 4096, device: str = "cpu", progress: bool = True, max_len_a: int = 50) -> list[str]:
    """Translate ``sentences`` (batched by length) and detokenize; the output keeps the input order.

    beam_size 1 decodes greedily. The output may be at most source length + ``max_len_a``
    tokens (the paper's +50).
    """
    ids = tokenizer.encode(list(sentences))
    lengths = [len(x) for x in ids]
    batches = token_batches(lengths, lengths, max_tokens, pool_size=max(len(ids), 1), shuffle=False)
    out: list[str] = [""] * len(ids)
    for batch in tqdm(batches, desc="translating", disable=not progress, leave=False):
        src = collate(ids, ids, batch).src  # source + eos, padded
        T = src.shape[1]
        src_t = mt.tensor(src, device=device)
        if beam_size == 1:
            hyps = greedy_decode(model, src_t, max_len=T + max_len_a)
        else:
            results = beam_search(model, src_t, beam_size=beam_size, alpha=alpha, max_len=T + max_len_a)
            hyps = [r[0].tokens for r in results]
        for r, i in enumerate(batch):
            out[int(i)] = tokenizer.decode(list(hyps[r]))
    return out


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
