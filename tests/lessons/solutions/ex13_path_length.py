"""Exercise 13 (lesson 13) — Table 1, counted on your engine's own graph.

Section 4 compares layers by the work they do and by how many steps lie between two
positions. Your engine records every computation as a graph (``out.creator.inputs`` lead
back to the inputs), so both can be counted, not quoted. Write:

1. ``multiply_adds(out)``: the multiply-adds (an int) of every matrix product in the graph
   that made ``out``: a product (..., n, k) @ (..., k, m) costs n·k·m per matrix of the stack
   (the stack's size is the product of the broadcast leading axes of the two inputs). Count
   each product once, even when the graph reaches it along several paths. The Function of a
   product is your ``MatMul`` (exercise 02): ``isinstance(fn, MatMul)``; its inputs' arrays
   are ``fn.inputs[0].data`` and ``fn.inputs[1].data``.
2. ``sequential_products(out)``: the largest number (an int) of matrix products on one path
   from an input to ``out``: products on one path must run one after another, products on
   different paths may run at once. A recurrent layer over n positions has n; self-attention
   a constant. Over thousands of positions the graph is thousands of steps deep: walk it
   without recursion, as your backward does.

Check by hand: for out = (x @ w) @ v, with x (2, 3), w (3, 4) and v (4, 5),
multiply_adds(out) = 2·3·4 + 2·4·5 = 64 and sequential_products(out) = 2.

Check it with:  python lessons/check.py 13
"""
import numpy as np

from ex02_broadcasting import MatMul


def multiply_adds(out):
    # >>> exercise: write multiply_adds
    total, seen, stack = 0, set(), [out]
    while stack:
        t = stack.pop()
        fn = t.creator
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        if isinstance(fn, MatMul):
            a, b = fn.inputs[0].data, fn.inputs[1].data
            stack_size = int(np.prod(np.broadcast_shapes(a.shape[:-2], b.shape[:-2])))
            total += stack_size * a.shape[-2] * a.shape[-1] * b.shape[-1]
        stack.extend(fn.inputs)
    return total
    # <<<


def sequential_products(out):
    # >>> exercise: write sequential_products
    order, seen, stack = [], set(), [(out, False)]
    while stack:                        # the Functions, each after every Function it reads from
        t, done = stack.pop()
        fn = t.creator
        if fn is None:
            continue
        if done:
            order.append(fn)
        elif id(fn) not in seen:
            seen.add(id(fn))
            stack.append((t, True))
            stack.extend((x, False) for x in fn.inputs)
    longest = {}                        # Function -> the most products on a path ending with it
    for fn in order:
        before = max(longest.get(id(x.creator), 0) for x in fn.inputs)
        longest[id(fn)] = before + isinstance(fn, MatMul)
    return longest.get(id(out.creator), 0)
    # <<<
