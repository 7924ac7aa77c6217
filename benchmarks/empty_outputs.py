"""Why beam search returned empty translations, and what forbidding eos first changes.

For one checkpoint, decodes sentences twice with the same beam and α: with ``min_len=0`` (eos
allowed as the first token: the search before the fix) and ``min_len=1`` (at least one token,
as fairseq's default). It reports, for each, the count of empty outputs and sacreBLEU where a
reference exists, and, for every sentence whose output was empty, what the beam compared:

- ``log P(eos | bos)``: the empty hypothesis's score, since lp(1) = ((5+1)/6)^α = 1;
- the best non-empty hypothesis: its log P, its length and its score log P / lp(|Y|);
- whether greedy decoding would also stop at once (eos the most likely first token).

    python benchmarks/empty_outputs.py --run-dir RUN [--checkpoint FILE] --data-dir DIR \\
        [--train-sentences 5000] --out benchmarks/results/empty_outputs_<date>.json
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import minitensor as mt  # noqa: E402
from transformer import data as D  # noqa: E402
from transformer.batching import collate, token_batches  # noqa: E402
from transformer.rundir import load_model  # noqa: E402
from transformer.decoding import beam_search, length_penalty  # noqa: E402
from transformer.evaluate import bleu  # noqa: E402

from harness import environment, write_results  # noqa: E402


def decode(model, tok, sentences, beam: int, alpha: float, min_len: int, max_tokens: int = 4096):
    """Per sentence, its beam's hypotheses best first (n_best = beam), in the input order."""
    ids = tok.encode(list(sentences))
    lengths = [len(x) for x in ids]
    out = [None] * len(ids)
    for batch in token_batches(lengths, lengths, max_tokens, pool_size=max(len(ids), 1), shuffle=False):
        src = collate(ids, ids, batch).src
        results = beam_search(model, src, beam_size=beam, alpha=alpha, max_len=src.shape[1] + 50, n_best=beam,
                              min_len=min_len)
        for r, i in enumerate(batch):
            out[int(i)] = results[r]
    return out


def first_step(model, tok, sentence: str) -> tuple[float, bool]:
    """(log P(eos | bos), whether eos is the most likely first token) for one source sentence."""
    cfg = model.cfg
    with mt.no_grad():
        src = np.array([tok.encode(sentence) + [cfg.eos_id]])
        memory = model.encode(src)
        mask = mt.Tensor._wrap((src != cfg.pad_id)[:, None, None, :])
        h = model.decode(np.array([[cfg.bos_id]]), memory, mask)
        logits = model.generator(h[:, -1]).data[0].astype(np.float64)
    logits[[cfg.pad_id, cfg.bos_id]] = -np.inf
    logp = logits - logits.max() - np.log(np.exp(logits - logits.max()).sum())
    return float(logp[cfg.eos_id]), int(np.argmax(logp)) == cfg.eos_id


def study(name, model, tok, src, ref, beam, alpha) -> dict:
    row = {"set": name, "sentences": len(src)}
    for min_len in (0, 1):
        hyps = decode(model, tok, src, beam, alpha, min_len)
        texts = [tok.decode(h[0].tokens) for h in hyps]
        empty = [i for i, t in enumerate(texts) if src[i].strip() and not t.strip()]
        key = f"min_len_{min_len}"
        row[key] = {"empty": len(empty)}
        if ref is not None:
            row[key]["bleu"] = bleu(texts, ref)["score"]
            row[key]["bleu_lowercase"] = bleu(texts, ref, lowercase=True)["score"]
            row["signature"] = bleu(texts, ref)["signature"]
        if min_len == 0:
            cases = []
            for i in empty:
                real = next((h for h in hyps[i] if len(h.tokens) > 1), None)
                eos_logp, greedy_stops = first_step(model, tok, src[i])
                cases.append({"line": i + 1, "source_words": len(src[i].split()), "log_p_eos_first": round(eos_logp, 3),
                              "greedy_stops_too": greedy_stops, "empty_score": round(hyps[i][0].score, 3),
                              "best_non_empty": None if real is None else {
                                  "log_p": round(real.log_prob, 3), "tokens": len(real.tokens),
                                  "length_penalty": round(float(length_penalty(len(real.tokens), alpha)), 3),
                                  "score": round(real.score, 3)}})
            row["empty_cases"] = cases
    return row


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run-dir", required=True)
    p.add_argument("--checkpoint", help="default: the newest in --run-dir")
    p.add_argument("--data-dir", help="the Multi30k folder (default: $MULTI30K_DIR or the download cache)")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--alpha", type=float, default=0.6)
    p.add_argument("--train-sentences", type=int, default=5000, help="also decode the first N training sources (0: none)")
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args(argv)
    mt.allocator.from_environment()  # as the programs that train do: freed arrays are reused
    loaded = load_model(Path(args.run_dir), args.checkpoint)
    model, tok = loaded.model, loaded.tokenizer
    rows = []
    src, ref = D.multi30k("test_2016_flickr", "en", "de", args.data_dir)
    rows.append(study("test2016", model, tok, src, ref, args.beam, args.alpha))
    if args.train_sentences:
        train_src, _ = D.multi30k("train", "en", "de", args.data_dir)
        rows.append(study(f"first {args.train_sentences} training sources", model, tok,
                          train_src[:args.train_sentences], None, args.beam, args.alpha))
    for r in rows:
        print(f"{r['set']}: empty outputs {r['min_len_0']['empty']} -> {r['min_len_1']['empty']}"
              + (f"; BLEU {r['min_len_0']['bleu']:.2f} -> {r['min_len_1']['bleu']:.2f}" if "bleu" in r["min_len_0"] else ""),
              file=sys.stderr)
    write_results({"benchmark": "empty_outputs", "command": " ".join(sys.argv), "checkpoint": loaded.files,
                   "beam": args.beam, "alpha": args.alpha, "machine": environment("cpu"), "rows": rows}, args.out)


if __name__ == "__main__":
    main()
