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
    raise NotImplementedError("exercise 20: write corpus_bleu")
