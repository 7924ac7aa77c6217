"""Mutation testing of the grader: does every wrong answer fail?

A *mutant* is a reference solution with one small change in a piece the learner writes (the
lines between ``# >>> exercise: write X`` and ``# <<<``): an operator swapped, a constant moved
by one, an axis or a ``keepdims`` changed, a transpose or a call left out, a slice bound
moved, a statement dropped, two arguments swapped, a ``training`` flag fixed. The grader
*kills* a mutant when it fails it (a case that differs, an exception, a hang); a mutant that
passes is either an *equivalent* program, one no input can tell from the reference (listed in
``EQUIVALENT`` below with the reason, after review), or a gap in the grader's cases.

    cd lessons && python -m lessonkit.mutants             # every exercise, the score of each
    cd lessons && python -m lessonkit.mutants 03 15 -v    # two exercises, each survivor shown

The score of an exercise is killed / (mutants − equivalent); the test suite keeps it at 100%
(``tests/lessons/test_mutants.py``: a sample in the default run, every mutant with
``--all-mutants``, as ``.ci/run`` does) for every exercise.
"""
from __future__ import annotations

import argparse
import ast
import copy
import dataclasses
import random
import shutil
import sys
import tempfile
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from . import grader, track
from .exercises import EXERCISES



@dataclass(frozen=True)
class Mutant:
    number: str         # the exercise
    where: str          # the piece it is in ("Tensor.backward")
    line: int           # its line in the solution
    operator: str       # the kind of change ("swap + and -")
    before: str         # the statement as the solution writes it (its first line)
    after: str          # the statement as the mutant writes it
    source: str         # the mutant's whole file
    nth: int = 0        # how many earlier mutants of the piece change the same statement the same way

    @property
    def key(self) -> tuple:
        """What names a mutant in ``EQUIVALENT``: stable when lines move (the nth same change of
        the same statement text in a piece, counted from 0 down the file, is named with n)."""
        base = (self.number, self.where, self.before, self.after)
        return base if self.nth == 0 else base + (self.nth,)

    def __str__(self):
        return f"ex{self.number} {self.where}, line {self.line} ({self.operator}):\n    {self.before}\n  → {self.after}"


# ---------------------------------------------------------------- the changes
_BINOP_SWAPS = {ast.Add: [ast.Sub], ast.Sub: [ast.Add], ast.Mult: [ast.Div], ast.Div: [ast.Mult, ast.FloorDiv],
                ast.FloorDiv: [ast.Div], ast.Mod: [ast.FloorDiv], ast.Pow: [ast.Mult], ast.MatMult: [ast.Mult],
                ast.BitAnd: [ast.BitOr], ast.BitOr: [ast.BitAnd]}
_NOT_COMMUTING = (ast.Sub, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.MatMult)
_COMPARE_SWAPS = {ast.Lt: [ast.LtE, ast.Gt], ast.LtE: [ast.Lt], ast.Gt: [ast.GtE, ast.Lt], ast.GtE: [ast.Gt],
                  ast.Eq: [ast.NotEq], ast.NotEq: [ast.Eq], ast.In: [ast.NotIn], ast.NotIn: [ast.In],
                  ast.Is: [ast.IsNot], ast.IsNot: [ast.Is]}
_COMMUTING_CALLS = {"max", "min", "maximum", "minimum", "broadcast_shapes", "swapaxes"}   # swapping their arguments
_AUG_SWAPS = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult}
# names a slip of the pen turns into one another
_NAME_SWAPS = {"max": "min", "min": "max", "sum": "mean", "mean": "sum", "sin": "cos", "cos": "sin",
               "argmax": "argmin", "argmin": "argmax", "tril": "triu", "triu": "tril", "zeros": "ones",
               "ones": "zeros", "zeros_like": "ones_like", "ones_like": "zeros_like", "exp": "log", "log": "exp",
               "w_q": "w_k", "w_k": "w_v", "w_v": "w_q", "sub1": "sub2", "sub2": "sub3", "sub3": "sub1",
               "query": "key", "key": "value", "value": "query", "src_mask": "tgt_mask", "tgt_mask": "src_mask",
               "src": "tgt_in", "tgt_in": "src", "encoder": "decoder", "decoder": "encoder",
               "self_attn": "cross_attn", "cross_attn": "self_attn", "w_1": "w_2", "w_2": "w_1",
               "b1": "b2", "b2": "b1", "m": "v", "v": "m", "beta": "gamma", "gamma": "beta",
               "fan_in": "fan_out", "fan_out": "fan_in", "eos": "pad", "pad": "eos", "bos": "eos"}


def _changes(node: ast.AST, parent: ast.AST | None):
    """(operator, change) for every mutation of ``node``: ``change(node)`` edits the node in
    place, or returns what replaces it."""
    if isinstance(node, ast.BinOp):
        for new in _BINOP_SWAPS.get(type(node.op), []):
            yield f"{_sym(node.op)} → {_sym(new())}", lambda n, new=new: setattr(n, "op", new())
        if isinstance(node.op, _NOT_COMMUTING):
            yield "swap the operands", lambda n: ast.BinOp(left=n.right, op=n.op, right=n.left)
        yield "keep the left operand", lambda n: n.left
        yield "keep the right operand", lambda n: n.right
    elif isinstance(node, ast.Compare) and len(node.ops) == 1:
        for new in _COMPARE_SWAPS.get(type(node.ops[0]), []):
            yield f"{_sym(node.ops[0])} → {_sym(new())}", lambda n, new=new: setattr(n, "ops", [new()])
    elif isinstance(node, ast.BoolOp):
        other = ast.Or if isinstance(node.op, ast.And) else ast.And
        yield f"{_sym(node.op)} → {_sym(other())}", lambda n, other=other: setattr(n, "op", other())
        for i in range(len(node.values)):
            yield "drop a term", lambda n, i=i: n.values[0] if len(n.values) == 2 and i == 1 else \
                n.values[1] if len(n.values) == 2 else setattr(n, "values", n.values[:i] + n.values[i + 1:])
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub, ast.Invert)):
        yield f"drop {_sym(node.op)}", lambda n: n.operand
    elif isinstance(node, ast.Constant) and not isinstance(parent, ast.Expr):
        v = node.value
        if isinstance(v, bool):
            yield f"{v} → {not v}", lambda n: setattr(n, "value", not n.value)
        elif isinstance(v, int):
            for w in ([v + 1, v - 1] if v != 0 else [1, -1]):
                yield f"{v} → {w}", lambda n, w=w: setattr(n, "value", w)
        elif isinstance(v, float):
            for w in ([v * 2, v / 2] if v != 0 else [1.0]):
                yield f"{v!r} → {w!r}", lambda n, w=w: setattr(n, "value", w)
    elif isinstance(node, ast.AugAssign):
        yield f"{_sym(node.op)}= → =", lambda n: ast.Assign(targets=[n.target], value=n.value, lineno=n.lineno)
        if type(node.op) in _AUG_SWAPS:
            new = _AUG_SWAPS[type(node.op)]
            yield f"{_sym(node.op)}= → {_sym(new())}=", lambda n, new=new: setattr(n, "op", new())
    elif isinstance(node, ast.Call):
        positional = [a for a in node.args if not isinstance(a, ast.Starred)]
        callee = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
        if len(positional) == len(node.args) and callee not in _COMMUTING_CALLS:
            for i in range(len(node.args) - 1):
                yield "swap two arguments", lambda n, i=i: setattr(
                    n, "args", n.args[:i] + [n.args[i + 1], n.args[i]] + n.args[i + 2:])
        for i, kw in enumerate(node.keywords):
            if kw.arg is not None:
                yield f"drop {kw.arg}=", lambda n, i=i: setattr(n, "keywords", n.keywords[:i] + n.keywords[i + 1:])
        if len(node.args) == 1 and not node.keywords and not isinstance(node.args[0], ast.Starred):
            yield "drop the call", lambda n: n.args[0]
        if isinstance(node.func, ast.Attribute) and not node.args and not node.keywords:
            yield f"drop .{node.func.attr}()", lambda n: n.func.value
    elif isinstance(node, ast.Slice):
        for part in ("lower", "upper", "step"):
            if getattr(node, part) is not None:
                yield f"drop the slice's {part} bound", lambda n, part=part: setattr(n, part, None)
    elif isinstance(node, ast.IfExp):
        yield "always the first branch", lambda n: n.body
        yield "always the second branch", lambda n: n.orelse
    elif isinstance(node, (ast.If, ast.While)):
        if isinstance(node, ast.If):
            yield "the condition always true", lambda n: setattr(n, "test", ast.Constant(True))
        yield "the condition always false", lambda n: setattr(n, "test", ast.Constant(False))
    if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
        name = node.id if isinstance(node, ast.Name) else node.attr
        if name == "training":
            for v in (True, False):
                yield f"training → {v}", lambda n, v=v: ast.Constant(v)
        elif name in _NAME_SWAPS and not (isinstance(parent, ast.Call) and parent.func is node and
                                          isinstance(node, ast.Name) and name in ("max", "min", "sum")):
            new = _NAME_SWAPS[name]
            yield f"{name} → {new}", lambda n, new=new: setattr(n, "id" if isinstance(n, ast.Name) else "attr", new)
    if isinstance(node, (ast.Assign, ast.AugAssign, ast.Expr, ast.Break, ast.Continue)) and \
            not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
        yield "drop the statement", lambda n: ast.Pass()
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple) and len(node.slice.elts) >= 2:
        yield "drop the last index", lambda n: setattr(n.slice, "elts", n.slice.elts[:-1])


def _sym(op) -> str:
    return {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
            ast.Pow: "**", ast.MatMult: "@", ast.BitAnd: "&", ast.BitOr: "|", ast.Lt: "<", ast.LtE: "<=",
            ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=", ast.In: "in", ast.NotIn: "not in",
            ast.Is: "is", ast.IsNot: "is not", ast.And: "and", ast.Or: "or", ast.Not: "not", ast.USub: "-",
            ast.Invert: "~"}[type(op)]


# ---------------------------------------------------------------- making the mutants
def _blocks(source: str) -> list:
    """(name, first line, last line) of each piece the learner writes."""
    out = []
    for m in track.BLOCK.finditer(source):
        first = source.count("\n", 0, m.start()) + 2
        out.append((m["what"], first, first + m["body"].count("\n") - 1))
    return out


def _nodes(tree):
    """Every node of ``tree`` with its parent, in one fixed order."""
    todo = [(tree, None)]
    while todo:
        node, parent = todo.pop(0)
        yield node, parent
        todo.extend((child, node) for child in ast.iter_child_nodes(node))


def _statement_of(node, parents):
    while not isinstance(node, ast.stmt):
        node = parents[id(node)]
    return node


def _head(stmt: ast.stmt) -> str:
    """A statement's first line as ``ast.unparse`` writes it (a compound one's header)."""
    if isinstance(stmt, (ast.If, ast.While, ast.For, ast.With, ast.FunctionDef)):
        stmt = copy.copy(stmt)
        stmt.body, stmt.orelse = [ast.Pass()], []
    return ast.unparse(stmt).splitlines()[0]


def mutants(number: str, directory: Path = track.SOLUTIONS) -> list:
    """Every mutant of exercise ``number``'s solution, one change each, in the pieces the learner
    writes; those that do not compile or write the same program as another are left out."""
    source = track.path(directory, number).read_text()
    blocks = _blocks(source)
    tree = ast.parse(source)
    original = ast.dump(tree)
    sites = [(i, node, parent) for i, (node, parent) in enumerate(_nodes(tree))
             if hasattr(node, "lineno") and any(a <= node.lineno <= b for _, a, b in blocks)]
    out, seen = [], {original}
    for i, node, parent in sites:
        where = next(name for name, a, b in blocks if a <= node.lineno <= b)
        for k, (operator, _) in enumerate(_changes(node, parent)):
            mutated = copy.deepcopy(tree)
            nodes = list(_nodes(mutated))
            target, target_parent = nodes[i]
            parents = {id(n): p for n, p in nodes}
            before = _head(_statement_of(target, parents))
            change = list(_changes(target, target_parent))[k][1]
            replacement = change(target)
            if replacement is not None and replacement is not target:
                _replace(target_parent, target, replacement)
                parents[id(replacement)] = target_parent
                target = replacement
            ast.fix_missing_locations(mutated)
            dumped = ast.dump(mutated)
            if dumped in seen:
                continue
            seen.add(dumped)
            try:
                text = ast.unparse(mutated)
                compile(text, f"ex{number}", "exec")
            except (SyntaxError, ValueError, TypeError):
                continue
            after = _head(_statement_of(target, parents)) if not isinstance(target, ast.stmt) else _head(target)
            out.append(Mutant(number, where, node.lineno, operator, before, after, text))
    out.sort(key=lambda m: m.line)
    counts = Counter()
    for i, m in enumerate(out):
        same = (m.where, m.before, m.after)
        out[i] = dataclasses.replace(m, nth=counts[same])
        counts[same] += 1
    return out


def _replace(parent, old, new) -> None:
    for name, value in ast.iter_fields(parent):
        if value is old:
            setattr(parent, name, new)
            return
        if isinstance(value, list):
            for j, item in enumerate(value):
                if item is old:
                    value[j] = new
                    return
    raise AssertionError("the node is not its parent's child")


# ---------------------------------------------------------------- grading them
def verdict(mutant: Mutant, track_dir: Path) -> str:
    """'killed: ...' or 'survived', grading ``mutant`` in ``track_dir`` (a copy of the solutions,
    whose file of the mutant's exercise this writes and puts back)."""
    file = track.path(track_dir, mutant.number)
    kept = file.read_text()
    file.write_text(mutant.source)
    try:       # the grader limits each case's time (grader.LIMIT): a mutant that hangs fails
        try:
            answer = track.load(track_dir, mutant.number)
        except Exception as e:  # noqa: BLE001 - a file that does not load fails
            return f"killed: does not load ({type(e).__name__})"
        ok, report = grader.grade(EXERCISES[mutant.number], answer)
    except RecursionError:
        return "killed: RecursionError"
    finally:
        file.write_text(kept)
    return "survived" if ok else "killed: " + report.splitlines()[0]


@contextmanager
def solved_track():
    """A temporary copy of the reference solutions to grade mutants in."""
    with tempfile.TemporaryDirectory() as d:
        for p in track.SOLUTIONS.glob("ex*.py"):
            shutil.copy(p, d)
        yield Path(d)


LIMIT = 3.0   # seconds a mutant may take on one case (grader.LIMIT while mutants are graded)


def score(numbers=None, sample: int | None = None, seed: int = 0, say=None) -> dict:
    """number -> {"mutants", "equivalent", "killed", "survivors": [Mutant]} for the exercises
    ``numbers`` (default all); ``sample``: that many mutants per exercise, drawn with ``seed``."""
    limit, grader.LIMIT = grader.LIMIT, LIMIT
    try:
        return _score(numbers, sample, seed, say)
    finally:
        grader.LIMIT = limit


def _score(numbers, sample, seed, say) -> dict:
    results = {}
    with solved_track() as d:
        for number in numbers or list(EXERCISES):
            every = mutants(number)
            chosen = every if sample is None or sample >= len(every) else \
                random.Random(f"{seed}:{number}").sample(every, sample)
            equivalent = [m for m in chosen if m.key in EQUIVALENT]
            survivors, killed = [], 0
            for m in chosen:
                if m.key in EQUIVALENT:
                    continue
                if verdict(m, d) == "survived":
                    survivors.append(m)
                else:
                    killed += 1
            results[number] = {"mutants": len(chosen), "equivalent": len(equivalent), "killed": killed,
                               "survivors": survivors}
            if say:
                say(_line(number, results[number]))
        for number in results:    # no mutant changed the grader's cases: the reference still passes
            ok, report = grader.grade(EXERCISES[number], track.load(d, number))
            if not ok:
                raise AssertionError(f"after its mutants, the reference of exercise {number} fails: {report}")
    return results


def _line(number, r) -> str:
    judged = r["mutants"] - r["equivalent"]
    pct = 100.0 * r["killed"] / judged if judged else 100.0
    return f"ex{number}  {r['killed']:>4} killed of {judged:>4} non-equivalent ({r['equivalent']} equivalent)  {pct:6.2f}%"


# ---------------------------------------------------------------- reviewed: mutants no input can tell apart
# (exercise, piece, the statement as written, the statement as mutated) -> why it is the same program
EQUIVALENT: dict = {
    ("01", "Tensor.backward", "continue", "pass"):
        "the continue after order.append: the tensor is in seen, so the next test continues the loop anyway",
    ("01", "Tensor.backward", "if t.requires_grad:", "if True:"):
        "a leaf reaches grads only through the edge test, which keeps out a tensor that needs no gradient",
    ("01", "Tensor.backward", "if gx is not None and x.requires_grad:", "if gx is not None:"):
        "a tensor that needs no gradient has no creator, so it is a leaf, and the leaf test gives it no .grad",
    ("02", "sum_to", "shape = tuple(shape)", "pass"): "shape is only iterated and measured, which a list allows too",
    ("02", "sum_to", "shape = tuple(shape)", "shape = shape"):
        "shape is only iterated and measured, which a list allows too",
    ("02", "sum_to", "if extra > 0:", "if True:"): "summing over no axes (axis=()) changes nothing",
    ("02", "sum_to", "if extra > 0:", "if extra >= 0:"): "summing over no axes (axis=()) changes nothing",
    ("02", "sum_to", "if extra > 0:", "if extra > -1:"): "summing over no axes (axis=()) changes nothing",
    ("02", "sum_to", "return grad.sum(axis=axes, keepdims=True) if axes else grad",
     "return grad.sum(axis=axes, keepdims=True)"): "summing over no axes (axis=()) changes nothing",
    ("02", "sum_to", "axes = tuple((i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1))",
     "axes = tuple((i for i, n in enumerate(shape) if n == 1))"):
        "summing an axis of size 1 with keepdims changes nothing",
    ("02", "sum_to", "axes = tuple((i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1))",
     "axes = tuple((i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 0))"):
        "summing an axis of size 1 with keepdims changes nothing (and no gradient has an axis of size 0)",
    ("03", "numerical_gradient", "g = np.zeros_like(x)", "g = np.ones_like(x)"):
        "the loop sets every entry of g, so its first values never show",
    ("03", "gradcheck", "inputs = [Tensor(a.copy(), requires_grad=True) for a in arrays]",
     "inputs = [Tensor(a, requires_grad=True) for a in arrays]"):
        "nothing writes into an input's array (numerical_gradient works on its own copy)",
    ("03", "gradcheck", "numeric = numerical_gradient(loss, arrays[k].copy(), eps)",
     "numeric = numerical_gradient(loss, arrays[k], eps)"):
        "numerical_gradient leaves x as it was given, exactly (x[i] = kept)",
    ("03", "gradcheck", "(out * Tensor(w)).sum().backward()", "(out * Tensor(w)).backward()"):
        "backward() of a tensor of many entries starts from ones: the gradient of its sum",
    ("03", "gradcheck", "(out * Tensor(w)).sum().backward()", "(out * w).sum().backward()"):
        "Function.apply wraps an array in a Tensor that needs no gradient, as Tensor(w) does",
    ("03", "gradcheck", "return float((fn(*ts).data * w).sum())", "return (fn(*ts).data * w).sum()"):
        "a NumPy float64 is a Python float: numerical_gradient computes the same",
    ("03", "gradcheck", "if not np.all(np.abs(analytic - numeric) <= atol + rtol * np.abs(numeric)):",
     "if not np.all(np.abs(numeric - analytic) <= atol + rtol * np.abs(numeric)):"): "|a − b| = |b − a|",
    ("04", "cross_entropy", "np.put_along_axis(q, np.where(real, target, 0)[..., None], 1 - smoothing + smoothing / V, "
     "axis=-1)", "np.put_along_axis(q, np.where(real, target, 1)[..., None], 1 - smoothing + smoothing / V, axis=-1)"):
        "the class written at a pad position is any valid one: q *= real zeroes that row after",
    ("04", "cross_entropy", "np.put_along_axis(q, np.where(real, target, 0)[..., None], 1 - smoothing + smoothing / V, "
     "axis=-1)", "np.put_along_axis(q, np.where(real, target, -1)[..., None], 1 - smoothing + smoothing / V, axis=-1)"):
        "the class written at a pad position is any valid one (−1 is the last): q *= real zeroes that row after",
    ("04", "cross_entropy", "target = np.asarray(target)", "pass"): "target is an integer array, as the docstring says",
    ("04", "cross_entropy", "target = np.asarray(target)", "target = target"):
        "target is an integer array, as the docstring says",
    ("04", "cross_entropy", "return -(log_softmax(logits) * Tensor(q)).sum() / max(1, int(real.sum()))",
     "return -(log_softmax(logits) * Tensor(q)).sum() / max(1, real.sum())"):
        "a NumPy integer divides as a Python int does",
    ("04", "cross_entropy", "return -(log_softmax(logits) * Tensor(q)).sum() / max(1, int(real.sum()))",
     "return -(log_softmax(logits) * q).sum() / max(1, int(real.sum()))"):
        "Function.apply wraps an array in a Tensor that needs no gradient, as Tensor(q) does",
    ("05", "Adam.step", "for p, m, v in zip(self.params, self.m, self.v):",
     "for p, m, v in zip(self.params, self.v, self.m):"):
        "self.m and self.v start as the same zeros: which list keeps which moment is Adam's own affair",
    ("06", "dropout", "return Dropout.apply(x, p=p, rng=rng) if training and p > 0 else x",
     "return Dropout.apply(x, p=p, rng=rng) if training else x"):
        "dropout with p = 0 keeps every entry and scales by 1 (it draws from rng, which no case compares after)",
    ("06", "dropout", "return Dropout.apply(x, p=p, rng=rng) if training and p > 0 else x",
     "return Dropout.apply(x, p=p, rng=rng) if training and p >= 0 else x"):
        "dropout with p = 0 keeps every entry and scales by 1",
    ("06", "dropout", "return Dropout.apply(x, p=p, rng=rng) if training and p > 0 else x",
     "return Dropout.apply(x, p=p, rng=rng) if training and p > -1 else x"):
        "dropout with p = 0 keeps every entry and scales by 1",
    ("06", "Dropout.forward", "self.scale = (rng.random(x.shape) >= p) / (1.0 - p)",
     "self.scale = (rng.random(x.shape) > p) / (1.0 - p)"):
        "a uniform draw equals p with probability about 2⁻⁵³",
    ("10", "Embeddings.forward", "ids = np.asarray(ids)", "pass"): "ids is an integer array, as the docstring says",
    ("10", "Embeddings.forward", "ids = np.asarray(ids)", "ids = ids"): "ids is an integer array, as the docstring says",
    ("10", "sinusoidal_table", "table = np.zeros((T, d))", "table = np.ones((T, d))"):
        "the next two lines set every column, so the first values never show",
    ("10", "sinusoidal_table", "table[:, 0::2] = np.sin(angle)", "table[:, ::2] = np.sin(angle)"):
        "0::2 and ::2 are the same slice",
    ("10", "Embeddings.forward", "x = Embedding.apply(self.weight, ids=ids) * np.sqrt(d) + Tensor(positions)",
     "x = Embedding.apply(self.weight, ids=ids) * np.sqrt(d) + positions"):
        "Function.apply wraps an array in a Tensor that needs no gradient, as Tensor(positions) does",
    ("10", "Embeddings.forward", "positions = self.table[offset:offset + ids.shape[-1]].astype(self.weight.dtype)",
     "positions = self.table[offset:offset + ids.shape[1]].astype(self.weight.dtype)"):
        "ids is (B, T), as the docstring says: its last axis is axis 1",
    ("07", "LayerNormFunction.forward", "var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)",
     "var = ((mu - x) ** 2).mean(axis=-1, keepdims=True)"): "(x − μ)² = (μ − x)²",
    ("08", "attention", "scores = scores.masked_fill(~np.asarray(mask, bool), -1000000000.0)",
     "scores = scores.masked_fill(~np.asarray(mask, bool), -2000000000.0)"):
        "any score below the row's largest by more than about 745 gets a weight of exactly 0 after exp",
    ("08", "attention", "scores = scores.masked_fill(~np.asarray(mask, bool), -1000000000.0)",
     "scores = scores.masked_fill(~np.asarray(mask, bool), -500000000.0)"):
        "any score below the row's largest by more than about 745 gets a weight of exactly 0 after exp",
    ("14", "padding_mask", "return (np.asarray(ids) != pad)[:, None, None, :]",
     "return (np.asarray(ids) != pad)[:, None, None]"): "a trailing : selects what leaving it out selects",
    ("14", "padding_mask", "return (np.asarray(ids) != pad)[:, None, None, :]",
     "return (ids != pad)[:, None, None, :]"): "ids is an integer array, as the docstring says",
    ("14", "target_mask", "return padding_mask(ids, pad) & causal_mask(np.shape(ids)[1])",
     "return padding_mask(pad, ids) & causal_mask(np.shape(ids)[1])"):
        "padding_mask computes ids != pad, and != gives the same array with its operands swapped",
    ("14", "Transformer.encode", "mask = padding_mask(src, self.pad)", "mask = padding_mask(self.pad, src)"):
        "padding_mask computes ids != pad, and != gives the same array with its operands swapped",
    ("14", "Transformer.forward",
     "return self.generator(self.decode(tgt_in, self.encode(src), padding_mask(src, self.pad)))",
     "return self.generator(self.decode(tgt_in, self.encode(src), padding_mask(self.pad, src)))"):
        "padding_mask computes ids != pad, and != gives the same array with its operands swapped",
    ('15', 'greedy_decode', 'src = np.asarray(src)',
     'pass'):
        'src is an integer array, as the docstring says',
    ('15', 'greedy_decode', 'src = np.asarray(src)',
     'src = src'):
        'src is an integer array, as the docstring says',
    ('15', 'greedy_decode', 'src_mask = padding_mask(src, pad)',
     'src_mask = padding_mask(pad, src)'):
        'padding_mask computes ids != pad, and != gives the same array with its operands swapped',
    ('15', 'greedy_decode', 'ys = np.full((B, 1), bos, dtype=np.int64)',
     'ys = np.full((B, 1), bos)'):
        'bos is an int: np.full makes an integer array of it',
    ('15', 'rank_extensions', "best = np.argsort(-total, axis=1, kind='stable')[:, :n]",
     "best = np.argsort(-total, kind='stable')[:, :n]"):
        "argsort's axis is -1 by default, axis 1 of the (B, K·V) array",
    ('15', 'rank_extensions', 'return (best // V, best % V, np.take_along_axis(total, best, axis=1))',
     'return (best // V, best % V, np.take_along_axis(total, best))'):
        "take_along_axis's axis is -1 by default, axis 1 of the (B, n) arrays",
    ('15', 'beam_search', 'src = np.asarray(src)[None]',
     'src = src[None]'):
        'src is an integer array, as the docstring says',
    ('15', 'beam_search', 'lp = lambda n: ((5.0 + n) / 6.0) ** alpha',
     'lp = lambda n: ((5.0 + n) * 6.0) ** alpha'):
        'lp changes by the factor 36^alpha at every length: every score is divided by the same number, and the ranking stays',
    ('15', 'beam_search', 'lp = lambda n: ((5.0 + n) / 6.0) ** alpha',
     'lp = lambda n: (5.0 + n) ** alpha'):
        'lp changes by the factor 6^alpha at every length: every score is divided by the same number, and the ranking stays',
    ('15', 'beam_search', 'lp = lambda n: ((5.0 + n) / 6.0) ** alpha',
     'lp = lambda n: ((5.0 + n) / 12.0) ** alpha'):
        'lp changes by the factor 2^-alpha at every length: every score is divided by the same number, and the ranking stays',
    ('15', 'beam_search', 'lp = lambda n: ((5.0 + n) / 6.0) ** alpha',
     'lp = lambda n: ((5.0 + n) / 3.0) ** alpha'):
        'lp changes by the factor 2^alpha at every length: every score is divided by the same number, and the ranking stays',
    ('15', 'beam_search', 'src_mask, memory = (padding_mask(src, pad), model.encode(src))',
     'src_mask, memory = (padding_mask(pad, src), model.encode(src))'):
        'padding_mask computes ids != pad, and != gives the same array with its operands swapped',
    ('15', 'beam_search', 'ys = np.array([[bos] + tokens for tokens, _ in open_])',
     'ys = [[bos] + tokens for tokens, _ in open_]'):
        'the decoder turns the list of equal-length rows into the same array (np.asarray in the embedding)',
    ('15', 'greedy_decode', 'logits = model.generator(x).data[:, -1].copy()',
     'logits = model.generator(x).data[:, -1]'):
        "the logits' array is a fresh one each step that nothing else reads: banning in place changes nothing else",
    ('15', 'beam_search', 'logits = model.generator(h).data[:, -1].copy()',
     'logits = model.generator(h).data[:, -1]'):
        "the logits' array is a fresh one each step that nothing else reads: banning in place changes nothing else",
    ('15', 'beam_search', 'break', 'pass'):
        "the break at the first −∞ extension: every later one is −∞ too, and they never win",
    ('15', 'beam_search', 'break', 'pass', 1):
        "the break once beam have finished: no later step finishes another (fewer than beam are needed), and "
        "done stays true, so the open prefixes never count",
    ('15', 'beam_search', 'if not np.isfinite(s):',
     'if False:'):
        'an extension of log probability −∞ (a banned token) ranks after every real one, fills an open slot only when no real extension is left, and never wins',
    ('15', 'beam_search', 'if not np.isfinite(s):',
     'if not s:'):
        'an extension of log probability −∞ (a banned token) ranks after every real one, fills an open slot only when no real extension is left, and never wins',
    ('15', 'beam_search', 'hypotheses = list(finished)',
     'hypotheses = finished'):
        'finished is not read again after hypotheses is made from it',
    ('15', 'beam_search', 'if not done or not hypotheses:',
     'if not done:'):
        'done with nothing finished needs no prefix left open, and a prefix always has an extension besides eos (the vocabulary holds tokens besides pad, bos and eos)',
    ('15', 'beam_search', 'if len(finished) >= beam or not kept:',
     'if len(finished) >= beam:'):
        'no prefix is left open only if every extension is eos, and a prefix always has an extension besides eos',
    ('15', 'beam_search', 'if j < beam and len(finished) < beam:',
     'if j < beam:'):
        'an eos finishing past the beam-th comes in the same step as one ranked above it: the same length, a lower log P, so a lower score; it never wins',
    ('15', 'beam_search', 'if j < beam and len(finished) < beam:',
     'if j < beam and len(finished) <= beam:'):
        'an eos finishing past the beam-th comes in the same step as one ranked above it: the same length, a lower log P, so a lower score; it never wins',
    ('15', 'greedy_decode', 'caches = [{} for _ in model.decoder.layers]',
     'caches = [{} for _ in model.encoder.layers]'):
        'the Transformer has as many encoder layers as decoder layers (n_layers each)',
    ('15', 'greedy_decode', 'nxt = logits.argmax(axis=-1)',
     'nxt = logits.argmax(axis=1)'):
        'the logits are (B, V): axis 1 is the last',
    ('15', 'greedy_decode', 'logits = model.generator(x).data[:, -1].copy()',
     'logits = model.generator(x).data[:, -0].copy()'):
        'each step runs one position, so its first position is its last',
    ('15', 'beam_search', 'n = min(2 * beam, logp.size)',
     'n = min(3 * beam, logp.size)'):
        'at most beam of the extensions are eos (one per open prefix), so the first 2·beam already hold beam to keep open',
    ('15', 'beam_search', 'k, w, s = (int(which[0, j]), int(token[0, j]), float(total[0, j]))',
     'k, w, s = (which[0, j], int(token[0, j]), float(total[0, j]))'):
        'a NumPy integer indexes a list as an int does',
    ('15', 'beam_search', 'k, w, s = (int(which[0, j]), int(token[0, j]), float(total[0, j]))',
     'k, w, s = (int(which[0, j]), token[0, j], float(total[0, j]))'):
        'a NumPy integer compares and joins the token list as an int does (the answer is compared as integers)',
    ('15', 'beam_search', 'k, w, s = (int(which[0, j]), int(token[0, j]), float(total[0, j]))',
     'k, w, s = (int(which[0, j]), int(token[0, j]), total[0, j])'):
        'a NumPy float64 is a float',
    ('15', 'beam_search', 'k, w, s = (int(which[0, j]), int(token[0, j]), float(total[0, j]))',
     'k, w, s = (int(which[-1, j]), int(token[0, j]), float(total[0, j]))'):
        'one sentence: row −1 is row 0',
    ('15', 'beam_search', 'k, w, s = (int(which[0, j]), int(token[0, j]), float(total[0, j]))',
     'k, w, s = (int(which[0, j]), int(token[-1, j]), float(total[0, j]))'):
        'one sentence: row −1 is row 0',
    ('15', 'beam_search', 'k, w, s = (int(which[0, j]), int(token[0, j]), float(total[0, j]))',
     'k, w, s = (int(which[0, j]), int(token[0, j]), float(total[-1, j]))'):
        'one sentence: row −1 is row 0',
    ("17", "silent_parameters", "named = list(model.named_parameters())", "named = model.named_parameters()"):
        "named_parameters returns a list (exercise 05's docstring, graded there)",
    ("17", "silent_parameters",
     "norms = [0.0 if p.grad is None else float(np.linalg.norm(p.grad)) for _, p in named]",
     "norms = [0.0 if p.grad is None else np.linalg.norm(p.grad) for _, p in named]"): "a NumPy float64 is a float",
    ("20", "corpus_bleu", "h = Counter((tuple(hyp[i:i + n]) for i in range(len(hyp) - n + 1)))",
     "h = Counter((tuple(hyp[i:i + n]) for i in range(len(hyp) + n + 1)))"):
        "the extra windows past the end are shorter than n (down to the empty tuple) and appear on one side "
        "only, so they never match; the totals are counted apart",
    ("20", "corpus_bleu", "h = Counter((tuple(hyp[i:i + n]) for i in range(len(hyp) - n + 1)))",
     "h = Counter((tuple(hyp[i:i + n]) for i in range(len(hyp) + 1)))"):
        "the extra windows past the end are shorter than n (down to the empty tuple) and appear on one side "
        "only, so they never match; the totals are counted apart",
    ("20", "corpus_bleu", "h = Counter((tuple(hyp[i:i + n]) for i in range(len(hyp) - n + 1)))",
     "h = Counter((tuple(hyp[i:i + n]) for i in range(len(hyp) - n + 2)))"):
        "the extra windows past the end are shorter than n (down to the empty tuple) and appear on one side "
        "only, so they never match; the totals are counted apart",
    ("20", "corpus_bleu", "f = Counter((tuple(ref[i:i + n]) for i in range(len(ref) - n + 1)))",
     "f = Counter((tuple(ref[i:i + n]) for i in range(len(ref) + n + 1)))"):
        "the extra windows past the end are shorter than n (down to the empty tuple) and appear on one side "
        "only, so they never match; the totals are counted apart",
    ("20", "corpus_bleu", "f = Counter((tuple(ref[i:i + n]) for i in range(len(ref) - n + 1)))",
     "f = Counter((tuple(ref[i:i + n]) for i in range(len(ref) + 1)))"):
        "the extra windows past the end are shorter than n (down to the empty tuple) and appear on one side "
        "only, so they never match; the totals are counted apart",
    ("20", "corpus_bleu", "f = Counter((tuple(ref[i:i + n]) for i in range(len(ref) - n + 1)))",
     "f = Counter((tuple(ref[i:i + n]) for i in range(len(ref) - n + 2)))"):
        "the extra windows past the end are shorter than n (down to the empty tuple) and appear on one side "
        "only, so they never match; the totals are counted apart",
    ("20", "corpus_bleu", "matches, totals = ([0] * 4, [0] * 4)", "matches, totals = ([0] * 4, [0] * 5)"):
        "zip with the four matches stops before the fifth total",
    ("20", "corpus_bleu", "matches[n - 1] += sum((min(k, f[g]) for g, k in h.items()))",
     "matches[1 - n] += sum((min(k, f[g]) for g, k in h.items()))"):
        "BLEU takes the product of the four ratios, (m1·m2·m3·m4)/(t1·t2·t3·t4), so putting the counts of one"
        " list in other slots changes neither the product nor the smallest count (1 − n sends n = 2 and 4 to "
        "each other's slot)",
    ("20", "corpus_bleu", "matches[n - 1] += sum((min(k, f[g]) for g, k in h.items()))",
     "matches[n - 2] += sum((min(k, f[g]) for g, k in h.items()))"):
        "BLEU takes the product of the four ratios, (m1·m2·m3·m4)/(t1·t2·t3·t4), so putting the counts of one"
        " list in other slots changes neither the product nor the smallest count (n − 2 turns the slots round"
        " by one)",
    ("20", "corpus_bleu", "totals[n - 1] += max(0, len(hyp) - n + 1)", "totals[1 - n] += max(0, len(hyp) - n + 1)"):
        "BLEU takes the product of the four ratios, (m1·m2·m3·m4)/(t1·t2·t3·t4), so putting the counts of one"
        " list in other slots changes neither the product nor the smallest count (1 − n sends n = 2 and 4 to "
        "each other's slot)",
    ("20", "corpus_bleu", "totals[n - 1] += max(0, len(hyp) - n + 1)", "totals[n - 2] += max(0, len(hyp) - n + 1)"):
        "BLEU takes the product of the four ratios, (m1·m2·m3·m4)/(t1·t2·t3·t4), so putting the counts of one"
        " list in other slots changes neither the product nor the smallest count (n − 2 turns the slots round"
        " by one)",
    ("20", "corpus_bleu", "if c == 0 or min(matches) == 0:", "if min(matches) == 0:"):
        "with no hypothesis words (c = 0) there are no matches either, so min(matches) == 0 already returns 0",
    ("20", "corpus_bleu", "if c == 0 or min(matches) == 0:", "if c == 1 or min(matches) == 0:"):
        "a corpus of one word has no 2-gram to match, so min(matches) == 0 already returns 0",
    ("20", "corpus_bleu", "if c == 0 or min(matches) == 0:", "if c == -1 or min(matches) == 0:"):
        "a length is never negative",
    ("20", "corpus_bleu", "bp = 1.0 if c > r else math.exp(1 - r / c)", "bp = 1.0 if c >= r else math.exp(1 - r / c)"):
        "when c = r, exp(1 − r/c) = exp(0) = 1",
    ("21", "token_batches", "order = np.argsort(np.asarray(lengths), kind='stable')",
     "order = np.argsort(lengths, kind='stable')"):
        "argsort makes an array of the list itself",
    ("21", "token_batches", "if current and (len(current) + 1) * lengths[i] > max_tokens:",
     "if (len(current) + 1) * lengths[i] > max_tokens:"):
        "every example fits alone (the docstring's lengths[i] <= max_tokens), so the test never passes while "
        "the batch is empty",
    ("21", "token_batches", "current.append(int(i))", "current.append(i)"):
        "a NumPy integer is an index as an int is",
    ("21", "average", "return {name: sum((s[name] for s in states)) / len(states) for name in states[0]}",
     "return {name: sum((s[name] for s in states)) / len(states) for name in states[-1]}"):
        "the states have the same names (the docstring's)",
    ("22", "accumulate", "n = int((np.asarray(tgt_out) != pad).sum())", "n = (np.asarray(tgt_out) != pad).sum()"):
        "a NumPy integer multiplies, adds and divides as an int does",
    ("22", "accumulate", "n = int((np.asarray(tgt_out) != pad).sum())", "n = int((tgt_out != pad).sum())"):
        "the micro-batches are integer arrays (the docstring's), which != compares entry by entry already",
    ("23", "blockwise_attention", "l = np.zeros((Tq, 1))", "l = np.ones((Tq, 1))"):
        "the first block rescales ℓ by exp(m − m') = exp(−∞) = 0, so its first value never shows",
    ("23", "blockwise_attention", "a = np.zeros((Tq, v.shape[1]))", "a = np.ones((Tq, v.shape[1]))"):
        "the first block rescales a by exp(m − m') = exp(−∞) = 0, so its first value never shows",
    ("23", "blockwise_attention", "a = np.zeros((Tq, v.shape[1]))", "a = np.zeros((Tq, m.shape[1]))"):
        "a (Tq, 1) zero broadcasts against the first block's (Tq, d_v) sum, and the result has that shape "
        "from then on",
    ("24", "ring_all_reduce", "chunks = [[c.copy() for c in np.array_split(np.asarray(a).ravel(), R)] for a in arrays]",
     "chunks = [[c.copy() for c in np.array_split(a.ravel(), R)] for a in arrays]"):
        "the ranks' arrays are NumPy arrays (the docstring's), which have .ravel() already",
    ("24", "ring_all_reduce", "messages = [(r, (r - s) % R, chunks[r][(r - s) % R].copy()) for r in range(R)]",
     "messages = [(r, r - s, chunks[r][(r - s) % R].copy()) for r in range(R)]"):
        "r − s is at least −(R − 2), and a negative list index counts from the end as % R does",
    ("24", "ring_all_reduce", "messages = [(r, (r - s) % R, chunks[r][(r - s) % R].copy()) for r in range(R)]",
     "messages = [(r, (r - s) % R, chunks[r][r - s].copy()) for r in range(R)]"):
        "r − s is at least −(R − 2), and a negative list index counts from the end as % R does",
    ("24", "ring_all_reduce", "messages = [(r, (r - s) % R, chunks[r][(r - s) % R].copy()) for r in range(R)]",
     "messages = [(r, (r - s) % R, chunks[r][(r - s) % R]) for r in range(R)]"):
        "a step adds into rank r + 1's chunk (r − s), never the chunk (r + 1 − s) that rank r + 1 sends in "
        "the same step, so no message changes before it is added",
    ("24", "ring_all_reduce", "messages = [(r, (r + 1 - s) % R, chunks[r][(r + 1 - s) % R].copy()) for r in range(R)]",
     "messages = [(r, (r + 1 - s) % R, chunks[r][(r + 1 - s) % R]) for r in range(R)]"):
        "the all-gather only rebinds chunks (=), never writes into one, so two ranks sharing a chunk's array "
        "is harmless",
    ("24", "ring_all_reduce", "shape = np.shape(arrays[0])", "shape = np.shape(arrays[-1])"):
        "every rank's array has the same shape (the docstring's)",
    ("25", "profile", "for cls in list(_all_subclasses(Function)):", "for cls in _all_subclasses(Function):"):
        "setting a method on a class leaves the subclass lists the generator walks unchanged",
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("numbers", nargs="*", help="exercises (default: every one)")
    ap.add_argument("--sample", type=int, help="this many mutants per exercise, drawn at random (with --seed)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-v", "--verbose", action="store_true", help="show every surviving mutant")
    args = ap.parse_args(argv)
    numbers = [n.zfill(2) for n in args.numbers] or None
    results = score(numbers, args.sample, args.seed, say=print)
    survivors = [m for r in results.values() for m in r["survivors"]]
    total = Counter()
    for r in results.values():
        total.update({k: r[k] for k in ("mutants", "equivalent", "killed")})
    print(_line("all", {**total, "survivors": survivors}).replace("exall", "all  "))
    if args.verbose:
        for m in survivors:
            print(f"survived: {m}")
    return 0 if not survivors else 1


if __name__ == "__main__":
    sys.exit(main())
