"""Exercise 20 (lesson 20) — corpus BLEU.

BLEU (Papineni et al., 2002), as the paper reports it, is a corpus score. Write
``corpus_bleu(hypotheses, references)`` for lists of token lists (one reference per
hypothesis), as a number from 0 to 100:

1. for n = 1 … 4, the modified precision p_n: over the whole corpus, the number of the
   hypotheses' n-grams that also occur in their reference, each n-gram counted at most as
   often as it occurs in the reference ("clipped"), divided by the number of the hypotheses'
   n-grams;
2. the brevity penalty BP = 1 when the hypotheses' total length c exceeds the references'
   total r, else exp(1 − r/c);
3. BLEU = 100 · BP · exp(¼ Σ log p_n), and 0 when some order n has no matching n-gram (no
   smoothing): p_n is then 0, or 0/0 where the hypotheses have no n-grams of that order at
   all (hypotheses shorter than n words, or none with a word).

Check by hand: a corpus whose hypotheses equal their references scores 100.

Check it with:  python lessons/check.py 20
"""
import math
from collections import Counter


def corpus_bleu(hypotheses, references):
    # >>> exercise: write corpus_bleu
    matches, totals = [0] * 4, [0] * 4
    c = r = 0
    for hyp, ref in zip(hypotheses, references):
        c, r = c + len(hyp), r + len(ref)
        for n in range(1, 5):
            h = Counter(tuple(hyp[i:i + n]) for i in range(len(hyp) - n + 1))
            f = Counter(tuple(ref[i:i + n]) for i in range(len(ref) - n + 1))
            matches[n - 1] += sum(min(k, f[g]) for g, k in h.items())
            totals[n - 1] += max(0, len(hyp) - n + 1)
    if c == 0 or min(matches) == 0:
        return 0.0
    bp = 1.0 if c > r else math.exp(1 - r / c)
    return 100 * bp * math.exp(sum(math.log(m / t) for m, t in zip(matches, totals)) / 4)
    # <<<
