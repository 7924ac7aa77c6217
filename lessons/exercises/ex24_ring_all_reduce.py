"""Exercise 24 (lesson 24) — the ring all-reduce.

Data parallelism sums every gradient across R processes (ranks) after each backward. Sending
every array to every other rank costs each rank (R − 1)·n entries; the ring all-reduce costs
it about 2·n, whatever R. Cut each rank's array into R chunks (``np.array_split`` of the
flattened array); the ranks stand in a ring, rank r sending only to rank (r + 1) mod R.

1. Reduce-scatter, R − 1 steps: at step s (from 0) every rank r sends its chunk
   (r − s) mod R to rank r + 1, which adds it to its own copy of that chunk. All the sends
   of a step happen at once (compute them all, then add them all). Afterwards rank r holds
   the complete sum of chunk (r + 1) mod R.
2. All-gather, R − 1 steps: at step s every rank r sends its chunk (r + 1 − s) mod R to
   rank r + 1, which replaces its own copy with it.

Write ``ring_all_reduce(arrays)``: ``arrays[r]`` is rank r's array (one shape for all);
return ``(results, sent)``: ``results[r]`` rank r's array afterwards (the sum of all of them,
in the original shape and dtype) and ``sent[r]`` the number of entries rank r sent. Do not change the
arrays you are given.

Check by hand: with R = 1 nothing is sent and the result equals the array (a new array:
each ``results[r]`` is one of its own, so that a rank may change it without changing another's
or the input).

Check it with:  python lessons/check.py 24
"""
import numpy as np


def ring_all_reduce(arrays):
    raise NotImplementedError("exercise 24: write ring_all_reduce")
