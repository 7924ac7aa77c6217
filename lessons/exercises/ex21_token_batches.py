"""Exercise 21 (lesson 21) — batches by tokens, and checkpoint averaging.

Write:
1. ``token_batches(lengths, max_tokens)``: cut the examples (``lengths[i]`` tokens each, the
   longer side of a pair plus one for eos) into batches that fit ``max_tokens`` once padded:
   a batch of b examples whose longest has L tokens costs b·L. Sort the indices by length
   (a stable sort, so that equal lengths keep their order), then fill batches in that order,
   each as large as fits before starting the next. Return the list of index arrays. Every
   example fits alone (``lengths[i] <= max_tokens``); no examples give no batches.
2. ``average(states)``: Section 6.1's checkpoint averaging: the entry-by-entry mean of several
   state dicts (name -> array) with the same names and shapes, as one new state dict (the
   states given are checkpoints: leave them unchanged).

Check by hand: lengths [3, 1, 2] and max_tokens 4 give batches [1, 2] (2 · 2 = 4) and [0].

Check it with:  python lessons/check.py 21
"""
import numpy as np


def token_batches(lengths, max_tokens):
    raise NotImplementedError("exercise 21: write token_batches")


def average(states):
    raise NotImplementedError("exercise 21: write average")
