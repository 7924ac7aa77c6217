"""The exercises of the lessons: what each asks for, the cases it is graded on, the mistakes
the grader recognises, and the reference answers.

Each exercise is a stub in ``lessons/exercises/NN_*.py`` (NN is the lesson's number) with
functions to write; ``python lessons/check.py NN`` imports the stub and calls :func:`grade`.

**Cases.** An exercise has a fixed list of cases, smallest first: sizes grow, and the edge
cases come early (T = 1, a single head, step = warmup, a single micro-batch, ...). The
inputs are fixed (drawn once from seeded generators, most of them rounded to one or two
decimals so that the report prints them exactly), so every run sees the same cases. The
grader runs the cases in order and stops at the first one the answer gets wrong, so the
case it reports is the smallest failing one by construction.

**What is compared.** A case compares one or more values: the result, or each of several
(Adam's theta, m and v; the cache and the output after each step of decoding; each
parameter's gradient). The expected values are the reference's (below), except in three
exercises, which are judged against what the answer must equal, computed another way: the
LayerNorm backward (07) against central differences of ``F.layer_norm`` with the case's
cotangent (the report shows ``layer_norm_backward_reference`` as the expected value); the
cached attention step (12) against attention over the whole sequence under the causal
mask, and its cache against the keys and values so far; the micro-batches (21) against the
gradient of the whole batch's per-token loss of a small float64 Transformer
(``lessonkit.checks.shard_gradients``).

**The report.** On a failure the grader prints the case's input (small arrays, few
digits, every parameter of the call), the expected value and the answer's, which entries
differ and by how much, or a wrong shape or dtype as such. Each exercise lists known
mistakes, each a plausible wrong answer with a one-line hint. The grader runs them on the
failing case, and when one gives what the answer gave (the same values, to a hundredth of
the case's tolerance, or the same exception), prints its hint. An answer that raises is
reported with the exception and the line of the answer that raised it;
``NotImplementedError`` means the function is not written yet.

**References.** ``reference(NN)`` is a namespace with the stub's functions. 03, 07, 08, 10,
15 and 16 call the package's function (``numerical_gradient``,
``layer_norm_backward_reference``, ``causal_mask`` and ``F.scaled_dot_product_attention``,
``sinusoidal_table``, ``rank_extensions``, ``noam_lr``); 09 calls the ``split_heads`` and
``merge_heads`` of a ``MultiHeadAttention``. Where the package has no function of the
stub's shape, the reference composes package calls: 04 differentiates ``F.cross_entropy``;
05 sets an ``optim.Adam`` to step t − 1 with ``load_state_dict`` and steps it; 12 runs the
decoding cache of a one-head ``MultiHeadAttention`` whose projections are the identity; 14
loads E into a ``ScaledEmbedding`` and projects with ``F.linear`` as
``Transformer.generator`` does. 21's reference is the grader's own sum-then-divide (the
trainer accumulates inside its update, with no function to call); its cases judge it
against the package's whole-batch gradient. ``tests/lessons/test_exercises.py`` proves that
every reference passes, every stub as shipped fails, and every known mistake fails with
its hint.
"""
from __future__ import annotations

import functools
import math
import traceback
import types
import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

import minitensor as mt
import minitensor.functional as F
import transformer
from minitensor.gradcheck import numerical_gradient as _package_numerical_gradient
from minitensor.ops.norm import layer_norm_backward_reference
from transformer.decoding import rank_extensions as _package_rank_extensions

from .checks import shard_gradients


# ---------------------------------------------------------------- what an exercise is
@dataclass(frozen=True)
class Expect:
    """One value a case compares: ``label`` says which ("the new m", "after the step of
    t = 1: cache['k']", or "" when a case compares one value only). ``kind``: "f" numbers, "i" integers, "b"
    booleans. A number passes within ``atol + rtol·|expected|``. With ``judge``, the answer
    is judged against it and ``value`` is what the report shows as expected."""
    label: str
    value: object
    kind: str = "f"
    atol: float = 1e-9
    rtol: float = 1e-7
    judge: object = None


@dataclass(frozen=True)
class Case:
    """One input. ``run(answer)`` calls the answer's functions on fresh copies of the input
    and yields the values to compare, in the order of ``expected``. ``call`` and ``inputs``
    are what the report shows; ``detail(i)``, when given, adds inputs that matter to the
    i-th compared value only."""
    title: str
    call: str
    inputs: dict
    run: Callable
    expected: list
    detail: Callable | None = None


@dataclass(frozen=True)
class Mistake:
    """A plausible wrong answer (``answer``: the functions it replaces) and the hint shown
    when an answer gives what it gives."""
    hint: str
    answer: dict


@dataclass(frozen=True)
class Exercise:
    number: str                 # the lesson's number
    title: str
    functions: tuple            # what the stub must define
    make_cases: Callable        # () -> list of Case, smallest first
    reference: dict             # name -> the package's answer
    mistakes: tuple = field(default=())

    def cases(self) -> list:
        return _cases(self.number)


class Missing:
    """A value the answer should have produced and did not (a cache without "k")."""

    def __init__(self, reason: str):
        self.reason = reason


class Malformed(Exception):
    """The answer returned something of the wrong form (two values where three belong)."""


@functools.lru_cache(maxsize=None)
def _cases(number: str) -> list:
    return EXERCISES[number].make_cases()


# ---------------------------------------------------------------- grading
@dataclass
class _Outcome:
    index: int                  # which compared value failed (or raised)
    seen: list                  # the answer's values up to and including it
    got: object = None
    lines: list = field(default_factory=list)
    raised: BaseException | None = None


def _array(value):
    """The answer's value as a NumPy array (minitensor tensors and lists are converted)."""
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        value = value.numpy()
    try:
        a = np.asarray(value)
    except (ValueError, TypeError):
        raise Malformed(f"got a {type(value).__name__} that NumPy cannot turn into an array") from None
    if a.dtype == object:
        raise Malformed(f"got a {type(value).__name__}, not an array of numbers")
    return a


def _quiet(fn):
    """Run ``fn()`` without NumPy's warnings (overflow, nan): the report says what went wrong."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return fn()


def _compare(got, exp: Expect) -> list:
    """What is wrong with ``got`` against ``exp`` (lines for the report); [] when it passes."""
    if isinstance(got, Missing):
        return [f"got nothing: {got.reason}"]
    if got is None:
        return ["got None: the function returns nothing (is a `return` missing?)"]
    try:
        g = _array(got)
    except Malformed as e:
        return [str(e)]
    e = np.asarray(exp.value)
    if g.shape != e.shape:
        return [f"wrong shape: expected {e.shape}, got {g.shape}"]
    if exp.kind == "b" and g.dtype != bool:
        return [f"wrong dtype: expected a bool array, got {g.dtype}"]
    if exp.kind == "i" and not np.issubdtype(g.dtype, np.integer):
        return [f"wrong dtype: expected integers, got {g.dtype}"]
    if exp.kind == "f" and g.dtype.kind not in "fiu":
        return [f"wrong dtype: expected numbers, got {g.dtype}"]
    judge = np.asarray(exp.value if exp.judge is None else exp.judge)
    if exp.kind in "bi":
        bad = g != judge
        diff = None
    else:
        diff = np.abs(g.astype(np.float64) - judge.astype(np.float64))
        bad = ~(diff <= exp.atol + exp.rtol * np.abs(judge))   # nan counts as off
        same_inf = np.isinf(g) & np.isinf(judge) & (np.sign(g) == np.sign(judge))
        bad &= ~same_inf
    if not bad.any():
        return []
    n, size = int(bad.sum()), bad.size
    allowed = "" if diff is None else f" (allowed: {exp.atol:g} + {exp.rtol:g}·|expected|)"
    if diff is not None:
        finite = diff[bad & np.isfinite(diff)]
        by = f"{n - finite.size} of them nan or inf" if finite.size < n else f"largest difference {finite.max():.3g}"
    if g.ndim == 0:
        return [f"off by {diff.item():.3g}{allowed}" if diff is not None and np.isfinite(diff.item()) else "off"]
    if n == size:
        where = {1: "off in its one entry", 2: "off in both entries"}.get(size, f"off in all {size} entries")
    elif n <= 6:
        at = ", ".join(str(tuple(int(i) for i in ix)) for ix in np.argwhere(bad))
        where = f"off in {n} of {size} entries, at {at}"
    else:
        where = f"off in {n} of {size} entries"
    lines = [where if diff is None else f"{where}; {by}{allowed}"]
    if 6 < n < size:
        lines.append("the entries off (1):\n" + np.array2string(bad.astype(int), separator=" "))
    return lines


def _first_failure(case: Case, answer) -> _Outcome | None:
    """Run the case; the first compared value that fails (or the exception), or None."""
    seen = []
    values = case.run(answer)
    for i, exp in enumerate(case.expected):
        try:
            got = _quiet(lambda: next(values))
        except NotImplementedError:
            raise
        except Malformed as e:
            seen.append(("malformed", str(e)))
            return _Outcome(i, seen, lines=[str(e)])
        except Exception as e:  # noqa: BLE001 - the answer raised: the report says so
            seen.append(("raised", f"{type(e).__name__}: {e}"))
            return _Outcome(i, seen, raised=e)
        seen.append(("value", got))
        lines = _compare(got, exp)
        if lines:
            return _Outcome(i, seen, got=got, lines=lines)
    return None


def _values(case: Case, answer, upto: int) -> list:
    """What ``answer`` gives for the case's first ``upto + 1`` compared values (as _first_failure records them)."""
    seen = []
    values = case.run(answer)
    try:
        for _ in range(upto + 1):
            seen.append(("value", _quiet(lambda: next(values))))
    except Malformed as e:
        seen.append(("malformed", str(e)))
    except Exception as e:  # noqa: BLE001 - a mistake may raise, as the answer may
        seen.append(("raised", f"{type(e).__name__}: {e}"))
    return seen


def _same(a, b, exp: Expect) -> bool:
    """Two recorded values agree: the same shape, both bool or both numbers, and the numbers
    a hundred times closer than the case allows (or to round-off), nan with nan."""
    (ka, va), (kb, vb) = a, b
    if ka != kb:
        return False
    if ka != "value":
        return va == vb
    if isinstance(va, Missing) or isinstance(vb, Missing):
        return isinstance(va, Missing) and isinstance(vb, Missing) and va.reason == vb.reason
    if va is None or vb is None:
        return va is None and vb is None
    try:
        x, y = _array(va), _array(vb)
    except Malformed:
        return False
    if x.shape != y.shape or (x.dtype == bool) != (y.dtype == bool):
        return False
    return bool(np.allclose(x.astype(np.float64), y.astype(np.float64), rtol=max(exp.rtol / 100, 1e-12),
                            atol=exp.atol / 100, equal_nan=True))


def _hints(ex: Exercise, case: Case, outcome: _Outcome) -> list:
    """The hints of the known mistakes that give what the answer gave, up to the failure."""
    found = []
    for mistake in ex.mistakes:
        wrong = types.SimpleNamespace(**{**ex.reference, **mistake.answer})
        theirs = _values(case, wrong, outcome.index)
        if len(theirs) == len(outcome.seen) and \
                all(_same(a, b, e) for a, b, e in zip(theirs, outcome.seen, case.expected)) \
                and mistake.hint not in found:
            found.append(mistake.hint)
    return found


def _decimals(a) -> int:
    """Decimals that show the largest entry of ``a`` to four significant digits (at least 4)."""
    a = np.asarray(a, dtype=np.float64)
    a = np.abs(a[np.isfinite(a)])
    m = a.max() if a.size else 0.0
    return 4 if m == 0 or m >= 0.1 else min(12, 3 - math.floor(math.log10(m)))


def _show(value, precision: int | None = None, indent: int = 0) -> str:
    """A value as the report prints it: arrays with four significant digits, numbers with six
    (``precision``: more decimals for arrays, more digits for numbers)."""
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, (bool, np.bool_, int, np.integer)):
        return str(value)
    if isinstance(value, (float, np.floating)):
        return f"{float(value) + 0.0:.{precision or 6}g}"       # + 0.0: no "-0"
    if isinstance(value, (tuple, list)) and all(np.isscalar(v) for v in value):
        inner = ", ".join(_show(v) for v in value)
        return f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
    a = np.asarray(value)
    if a.ndim == 0:
        return _show(a.item(), precision)
    if a.dtype.kind == "f":
        precision = _decimals(a) if precision is None else precision
        a = np.where(np.abs(a) < 0.5 * 10.0**-precision, 0.0, a)   # no "-0."
    text = np.array2string(a, precision=precision or 4, suppress_small=True, max_line_width=96, threshold=400)
    return text.replace("\n", "\n" + " " * indent)


def _precision(got, exp: Expect) -> int | None:
    """Digits that show where ``got`` and the expected value differ: for arrays, decimals for
    four significant digits of the largest entry of either, more when the two agree to
    those; for a number, six significant digits, more when they agree to six."""
    e = np.asarray(exp.value)
    if e.dtype.kind != "f":
        return None
    try:
        g = _array(got).astype(np.float64)
    except (Malformed, ValueError, TypeError):
        g = None
    if g is None or g.shape != e.shape:
        return _decimals(e) if e.ndim else None
    d = np.abs(g - e)
    finite = d[np.isfinite(d) & (d > 0)]
    if e.ndim == 0:
        if finite.size == 0:
            return None
        rel = finite.max() / max(abs(float(e)), 1e-300)
        return min(15, max(6, math.ceil(-math.log10(rel)) + 2))
    p = _decimals(np.concatenate([e.ravel(), g.ravel()]))
    return p if finite.size == 0 else min(12, max(p, math.ceil(-math.log10(finite.max())) + 1))


def _where_raised(e: BaseException, answer) -> str:
    """'in attention, line 12: s = q @ k.T' for the answer's deepest frame, or ''."""
    files = {f.__code__.co_filename for f in vars(answer).values() if hasattr(f, "__code__")} \
        if hasattr(answer, "__dict__") else set()
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename in files]
    if not frames:
        return ""
    f = frames[-1]
    return f"in {f.name}, line {f.lineno}: {f.line}" if f.line else f"in {f.name}, line {f.lineno}"


def _report(ex: Exercise, cases: list, n: int, outcome: _Outcome, answer) -> str:
    case = cases[n - 1]
    lines = [f"case {n} of {len(cases)}: {case.title}", f"  {case.call} with"]
    inputs = dict(case.inputs)
    if case.detail is not None:
        inputs.update(case.detail(outcome.index))
    width = max(len(k) for k in inputs)
    for name, value in inputs.items():
        lines.append(f"    {name:<{width}} = {_show(value, indent=width + 7)}")
    exp = case.expected[outcome.index]
    if outcome.raised is not None:
        e = outcome.raised
        lines.append(f"  your code raised {type(e).__name__}: {e}")
        where = _where_raised(e, answer)
        if where:
            lines.append(f"    {where}")
    else:
        p = _precision(outcome.got, exp)
        pad = "  "
        if exp.label:
            lines.append(f"  {exp.label}:")
            pad = "    "
        lines.append(f"{pad}expected {_show(exp.value, p, indent=len(pad) + 9)}")
        if outcome.got is not None and not isinstance(outcome.got, Missing):
            try:
                shown = _show(_array(outcome.got), p, indent=len(pad) + 9)
            except Malformed:
                shown = repr(outcome.got)
            lines.append(f"{pad}got      {shown}")
        for line in outcome.lines:
            lines.append(pad + line.replace("\n", "\n" + pad))
    lines += [f"  hint: {h}" for h in _hints(ex, case, outcome)]
    if n > 1:
        lines.append(f"(cases 1–{n - 1} of {len(cases)} pass)" if n > 2 else f"(case 1 of {len(cases)} passes)")
    return "\n".join(lines)


def grade(number: str, answer) -> tuple[bool, str]:
    """(passed, report) for ``answer``, a module or namespace with the exercise's functions.
    The cases run in order; the report describes the first one that fails."""
    ex = EXERCISES[number]
    missing = [f for f in ex.functions if not callable(getattr(answer, f, None))]
    if missing:
        return False, f"missing: {', '.join(missing)} (the file must define {', '.join(ex.functions)})"
    cases = ex.cases()
    for n, case in enumerate(cases, 1):
        try:
            outcome = _first_failure(case, answer)
        except NotImplementedError as e:
            passed = f"; cases 1–{n - 1} of {len(cases)} pass" if n > 1 else ""
            return False, f"not written yet ({e}){passed}"
        if outcome is not None:
            return False, _report(ex, cases, n, outcome, answer)
    return True, f"all {len(cases)} cases pass"


def reference(number: str) -> types.SimpleNamespace:
    """The package's answer to exercise ``number`` (a namespace with the stub's functions)."""
    return types.SimpleNamespace(**EXERCISES[number].reference)


def _r(rng, shape, scale=1.0, decimals=1):
    """Normal numbers rounded to ``decimals``: inputs the report can print exactly."""
    return np.round(rng.standard_normal(shape) * scale, decimals)


def _c(a):
    return None if a is None else np.array(a, copy=True)


# ---------------------------------------------------------------- 03: numerical gradients
def _numerical_gradient(f, x, eps):
    return _package_numerical_gradient(f, x, eps)


def _cases_03():
    rng = np.random.default_rng(3)
    specs = [((1,), 1e-4, "one entry"), ((2,), 1e-4, "two entries"), ((3,), 1e-4, "three entries"),
             ((2, 3), 1e-4, "a (2, 3) array"), ((1, 4, 1), 1e-4, "size-1 axes"),
             ((2, 2), 1e-2, "a larger eps: the result must use the eps it is given")]
    cases = []
    for shape, eps, title in specs:
        x, c = _r(rng, shape), _r(rng, shape)
        f = (lambda c: lambda a: float((c * a**3).sum()))(c)

        def run(ns, f=f, x=x, eps=eps):
            mine = x.copy()
            yield ns.numerical_gradient(f, mine, eps)
            yield mine

        want = _package_numerical_gradient(f, x.copy(), eps)
        cases.append(Case(title, "numerical_gradient(f, x, eps)",
                          {"f(x)": "sum(c * x**3)", "c": c, "x": x, "eps": eps}, run,
                          [Expect("the result", want, atol=1e-7, rtol=1e-7),
                           Expect("x after the call (every entry must be put back)", x, atol=1e-12, rtol=0)]))
    return cases


def _one_sided(f, x, eps, sign=1):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[i] = sign * eps
        g[i] = (f(x + step) - f(x)) / (sign * eps)
    return g


def _central(f, x, eps, denominator=2):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[i] = eps
        g[i] = (f(x + step) - f(x - step)) / (denominator * eps)
    return g


def _not_restored(f, x, eps):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        x[i] += eps
        plus = f(x)
        x[i] -= 2 * eps
        g[i] = (plus - f(x)) / (2 * eps)    # x[i] stays eps below where it was
    return g


MISTAKES_03 = (
    Mistake("this is the one-sided difference (f(x + eps·e_i) − f(x)) / eps: its error is O(eps), the central "
            "one's O(eps²)", dict(numerical_gradient=_one_sided)),
    Mistake("this is the one-sided difference (f(x) − f(x − eps·e_i)) / eps: its error is O(eps), the central "
            "one's O(eps²)", dict(numerical_gradient=lambda f, x, eps: _one_sided(f, x, eps, -1))),
    Mistake("twice the gradient: the two points x ± eps·e_i are 2·eps apart",
            dict(numerical_gradient=lambda f, x, eps: _central(f, x, eps, 1))),
    Mistake("every entry is the same number: you moved all of x at once; move one entry at a time",
            dict(numerical_gradient=lambda f, x, eps: np.full_like(x, (f(x + eps) - f(x - eps)) / (2 * eps)))),
    Mistake("your result does not change with eps: use the eps you are given",
            dict(numerical_gradient=lambda f, x, eps: _central(f, x, 1e-6))),
    Mistake("x is left changed after each entry: put every entry back before moving the next one",
            dict(numerical_gradient=_not_restored)),
)


# ---------------------------------------------------------------- 04: the label-smoothed gradient
def _label_smoothed_gradient(logits, target, eps):
    x = mt.tensor(np.asarray(logits, dtype=np.float64), requires_grad=True)
    F.cross_entropy(x, mt.tensor(np.asarray(target)), label_smoothing=eps, reduction="sum").backward()
    return x.grad.numpy()


def _cases_04():
    rng = np.random.default_rng(4)
    specs = [(1, 2, 0.0, "no smoothing (ε = 0): plain cross-entropy"), (1, 2, 0.1, "two classes"),
             (1, 3, 0.1, "three classes"), (2, 3, 0.1, "two examples"), (2, 4, 0.2, "two examples, ε = 0.2"),
             (3, 5, 1.0, "ε = 1: the target is uniform"),
             (2, 4, 0.1, "logits near 1000: exp overflows unless the row's largest logit is subtracted")]
    cases = []
    for N, V, eps, title in specs:
        logits = _r(rng, (N, V)) + (1000.0 if "1000" in title else 0.0)
        target = rng.integers(0, V, N)

        def run(ns, logits=logits, target=target, eps=eps):
            yield ns.label_smoothed_gradient(logits.copy(), target.copy(), eps)

        cases.append(Case(title, "label_smoothed_gradient(logits, target, eps)",
                          {"logits": logits, "target": target, "eps": eps}, run,
                          [Expect("", _label_smoothed_gradient(logits, target, eps))]))
    return cases


def _softmax(s, axis=-1):
    e = np.exp(s - s.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _smoothed(logits, target, true, other, softmax=_softmax):
    """softmax(logits) − q with q = ``true`` on the target class and ``other`` elsewhere."""
    N, V = logits.shape
    onehot = np.eye(V)[target]
    return softmax(logits) - (onehot * true + (1 - onehot) * other)


def _naive_softmax(s):
    e = np.exp(s)
    return e / e.sum(-1, keepdims=True)


MISTAKES_04 = (
    Mistake("this is the gradient without smoothing: ε is not used",
            dict(label_smoothed_gradient=lambda x, t, eps: _smoothed(x, t, 1.0, 0.0))),
    Mistake("your target q gives ε/(V−1) to each wrong class; lesson 4 (PyTorch's definition) gives ε/V to every "
            "class, the true one included", dict(label_smoothed_gradient=lambda x, t, eps: _smoothed(
                x, t, 1 - eps, eps / (x.shape[1] - 1)))),
    Mistake("your target gives the true class 1 + ε/V: its one-hot part must shrink to 1 − ε, so that q sums to 1",
            dict(label_smoothed_gradient=lambda x, t, eps: _smoothed(x, t, 1 + eps / x.shape[1], eps / x.shape[1]))),
    Mistake("your target leaves ε/V off the true class: every class gets ε/V, and the true one 1 − ε on top",
            dict(label_smoothed_gradient=lambda x, t, eps: _smoothed(x, t, 1 - eps, eps / x.shape[1]))),
    Mistake("the sign is flipped: the gradient of the loss is p − q, not q − p",
            dict(label_smoothed_gradient=lambda x, t, eps: -_label_smoothed_gradient(x, t, eps))),
    Mistake("you divided by N: the loss here is summed over the examples, not averaged",
            dict(label_smoothed_gradient=lambda x, t, eps: _label_smoothed_gradient(x, t, eps) / len(t))),
    Mistake("the softmax ran over the examples (axis 0): it must run over each row's V classes, the last axis",
            dict(label_smoothed_gradient=lambda x, t, eps: _smoothed(
                x, t, 1 - eps + eps / x.shape[1], eps / x.shape[1], lambda s: _softmax(s, 0)))),
    Mistake("nan: exp overflows for large logits; subtract each row's largest logit first, which changes nothing "
            "else (lesson 4)", dict(label_smoothed_gradient=lambda x, t, eps: _smoothed(
                x, t, 1 - eps + eps / x.shape[1], eps / x.shape[1], _naive_softmax))),
)


# ---------------------------------------------------------------- 05: one Adam update
def _adam_update(theta, grad, m, v, t, lr, betas, eps):
    p = mt.tensor(np.array(theta, dtype=np.float64), requires_grad=True)
    opt = mt.optim.Adam([p], lr=lr, betas=betas, eps=eps)
    opt.load_state_dict({"steps": t - 1,            # the optimizer as it stands after step t − 1
                         "hyper": {"lr": lr, "betas": list(betas), "eps": eps, "weight_decay": 0.0},
                         "state": [{"m": np.array(m, dtype=np.float64), "v": np.array(v, dtype=np.float64)}]})
    p.grad = mt.tensor(np.array(grad, dtype=np.float64))
    opt.step()
    state = opt.state_dict()["state"][0]
    return p.numpy().copy(), state["m"], state["v"]


def _cases_05():
    rng = np.random.default_rng(5)
    paper = (0.01, (0.9, 0.98), 1e-9)
    specs = [((1,), 1, paper, "the first step (t = 1, m = v = 0), one weight"), ((2,), 1, paper, "the first step"),
             ((2,), 2, paper, "the second step"), ((3,), 10, paper, "step 10"),
             ((2, 3), 1000, paper, "step 1000: the bias corrections are nearly 1"),
             ((2,), 3, (0.1, (0.5, 0.8), 1e-3), "other settings of lr, betas and eps")]
    cases = []
    for shape, t, (lr, betas, eps), title in specs:
        theta, grad = _r(rng, shape), _r(rng, shape)
        if t == 1:
            m, v = np.zeros(shape), np.zeros(shape)
        else:
            m, v = _r(rng, shape, 0.1, 2), np.round(0.01 + 0.1 * rng.random(shape), 3)

        def run(ns, a=(theta, grad, m, v, t, lr, betas, eps)):
            out = ns.adam_update(_c(a[0]), _c(a[1]), _c(a[2]), _c(a[3]), *a[4:])
            if not isinstance(out, (tuple, list)) or len(out) != 3:
                got = f"{len(out)} values" if isinstance(out, (tuple, list)) else f"a {type(out).__name__}"
                raise Malformed(f"adam_update must return three arrays (theta, m, v); it returned {got}")
            yield from out

        new = _adam_update(theta, grad, m, v, t, lr, betas, eps)
        cases.append(Case(title, "adam_update(theta, grad, m, v, t, lr, betas, eps)",
                          {"theta": theta, "grad": grad, "m": m, "v": v, "t": t, "lr": lr, "betas": betas, "eps": eps},
                          run, [Expect(f"the new {name}", value, atol=1e-12, rtol=1e-8)
                                for name, value in zip(("theta", "m", "v"), new)]))
    return cases


def _adam(theta, grad, m, v, t, lr, betas, eps, correct=True, shift=0, eps_inside=False, sign=-1, swap=False,
          keep=False):
    b1, b2 = betas
    m2 = b1 * grad + (1 - b1) * m if swap else b1 * m + (1 - b1) * grad
    v2 = b2 * grad * grad + (1 - b2) * v if swap else b2 * v + (1 - b2) * grad * grad
    c1, c2 = (1 - b1 ** (t + shift), 1 - b2 ** (t + shift)) if correct else (1.0, 1.0)
    denominator = np.sqrt(v2 / c2 + eps) if eps_inside else np.sqrt(v2 / c2) + eps
    new = theta + sign * lr * (m2 / c1) / denominator
    return (new, m, v) if keep else (new, m2, v2)


MISTAKES_05 = (
    Mistake("this is Adam without its bias corrections: m and v start at 0, and lesson 5 divides them by "
            "1 − β₁ᵗ and 1 − β₂ᵗ", dict(adam_update=functools.partial(_adam, correct=False))),
    Mistake("the bias corrections use t + 1: t is this step's number, counted from 1",
            dict(adam_update=functools.partial(_adam, shift=1))),
    Mistake("ε went inside the square root: Adam adds it to √v̂",
            dict(adam_update=functools.partial(_adam, eps_inside=True))),
    Mistake("θ moved up the gradient: Adam subtracts its step", dict(adam_update=functools.partial(_adam, sign=1))),
    Mistake("the averages give the new gradient the weight β: it gets 1 − β, and the old average β",
            dict(adam_update=functools.partial(_adam, swap=True))),
    Mistake("the m and v you return are the ones you were given: return the updated moments, the next step starts "
            "from them", dict(adam_update=functools.partial(_adam, keep=True))),
    Mistake("your answer ignores the lr, betas or eps it is given (it uses the paper's): use the arguments",
            dict(adam_update=lambda theta, grad, m, v, t, lr, betas, eps: _adam(theta, grad, m, v, t, 0.01,
                                                                                (0.9, 0.98), 1e-9))),
)


# ---------------------------------------------------------------- 07: the LayerNorm backward
def _layer_norm_backward(grad, xhat, r, weight):
    return layer_norm_backward_reference(np, grad, xhat, r, weight, (True, False, False))[0]


def _layer_norm_parts(x):
    mu = x.mean(-1, keepdims=True)
    r = 1 / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
    return (x - mu) * r, r


def _cases_07():
    rng = np.random.default_rng(7)
    specs = [((1, 1), True, "D = 1: x̂ is 0 whatever x is"),
             ((1, 2), True, "D = 2, γ = 1: x̂ is (1, −1) or (−1, 1), up to ε, whatever x is"),
             ((1, 3), True, "D = 3, γ = 1"), ((1, 3), False, "D = 3, γ ≠ 1"), ((2, 4), False, "two rows"),
             ((2, 2, 3), False, "three axes: the last one is normalised"), ((3, 6), False, "three rows of six")]
    cases = []
    for shape, unit, title in specs:
        x, grad = _r(rng, shape, 2.0), _r(rng, shape)
        weight = np.ones(shape[-1]) if unit else np.round(rng.uniform(0.5, 1.5, shape[-1]), 1)
        xhat, r = _layer_norm_parts(x)
        cotangent = (lambda g, w: lambda a: float(
            (g * F.layer_norm(mt.tensor(a), mt.tensor(w), None, eps=1e-5).numpy()).sum()))(grad, weight)
        numeric = _package_numerical_gradient(cotangent, x.copy(), 1e-6)
        shown = _layer_norm_backward(grad, xhat, r, weight)
        assert np.allclose(shown, numeric, atol=1e-6), "the package's backward disagrees with central differences"

        def run(ns, a=(grad, xhat, r, weight)):
            yield ns.layer_norm_backward(*(_c(v) for v in a))

        call = "layer_norm_backward(grad, xhat, r, weight), the backward at x of y = weight ⊙ xhat,"
        cases.append(Case(title, call, {"x": x, "grad": grad, "xhat": xhat, "r": r, "weight": weight}, run,
                          [Expect("", shown, atol=1e-5, rtol=1e-4, judge=numeric)]))
    return cases


def _ln(grad, xhat, r, weight, mean=True, variance=True, gamma=True, scale=True, reduce=np.mean):
    g = grad * weight if gamma else grad
    out = g.copy()
    if mean:
        out = out - reduce(g, axis=-1, keepdims=True)
    if variance:
        out = out - xhat * reduce(g * xhat, axis=-1, keepdims=True)
    return r * out if scale else out


MISTAKES_07 = (
    Mistake("this backward forgets the path through the variance: x̂ depends on every x_j through σ² too (lesson 7)",
            dict(layer_norm_backward=functools.partial(_ln, variance=False))),
    Mistake("this backward forgets the path through the mean: x̂ depends on every x_j through μ too (lesson 7)",
            dict(layer_norm_backward=functools.partial(_ln, mean=False))),
    Mistake("this backward keeps only the direct path: x_i also reaches every x̂_j through μ and σ²",
            dict(layer_norm_backward=functools.partial(_ln, mean=False, variance=False))),
    Mistake("γ is missing: the cotangent that reaches x̂ is grad ⊙ γ",
            dict(layer_norm_backward=functools.partial(_ln, gamma=False))),
    Mistake("the factor r = 1/√(σ² + ε) is missing",
            dict(layer_norm_backward=functools.partial(_ln, scale=False))),
    Mistake("sums over the last axis where means belong: each sum must be divided by D",
            dict(layer_norm_backward=functools.partial(_ln, reduce=np.sum))),
)


# ---------------------------------------------------------------- 08: the causal mask and attention
def _causal_mask(T):
    return transformer.causal_mask(T).numpy()


def _attention(q, k, v, mask):
    return F.scaled_dot_product_attention(
        *(mt.tensor(a) for a in (q, k, v)), mask=None if mask is None else mt.tensor(mask)).numpy()


def _cases_08():
    cases = []
    for T in (1, 2, 3, 4, 6):
        def run(ns, T=T):
            yield ns.causal_mask(T)
        cases.append(Case(f"T = {T}", "causal_mask(T)", {"T": T}, run, [Expect("", _causal_mask(T), kind="b")]))
    rng = np.random.default_rng(8)
    pad = np.array([[True, True, True, True], [True, True, False, False]])[:, None, :]   # (B, 1, T): 2 pad keys
    specs = [((1, 1, 1), None, "one position, d = 1"), ((1, 2, 1), None, "two positions, d = 1, no mask"),
             ((1, 2, 2), None, "d = 2: the scale 1/√d_k matters"), ((1, 3, 2), "causal", "a causal mask"),
             ((2, 3, 4), "causal", "two sequences, a causal mask"),
             ((2, 4, 3), pad, "a padding mask of shape (B, 1, T): sequence 1 has two pad keys"),
             ((2, 5, 8), "causal", "a causal mask, d = 8")]
    for (B, T, d), mask, title in specs:
        q, k, v = (_r(rng, (B, T, d)) for _ in range(3))
        if isinstance(mask, str):
            mask = _causal_mask(T)

        def run(ns, a=(q, k, v, mask)):
            yield ns.attention(*(_c(x) for x in a))

        cases.append(Case(title, "attention(q, k, v, mask)", {"q": q, "k": k, "v": v, "mask": mask}, run,
                          [Expect("", _attention(q, k, v, mask))]))
    return cases


def _attend(q, k, v, mask, scale=None, invert=False, axis=-1, after=False, transpose=lambda k: k.swapaxes(-1, -2)):
    d = q.shape[-1]
    s = q @ transpose(k) / (np.sqrt(d) if scale is None else scale(d))
    if mask is not None and not after:
        s = np.where(~mask if invert else mask, s, -np.inf)
    p = _softmax(s, axis)
    if mask is not None and after:
        p = p * mask
    return p @ v


MISTAKES_08 = (
    Mistake("the diagonal is False: query i may attend to key i, itself",
            dict(causal_mask=lambda T: np.tril(np.ones((T, T), bool), -1))),
    Mistake("this is the upper triangle: query i may attend to the keys j ≤ i, the past and itself",
            dict(causal_mask=lambda T: np.triu(np.ones((T, T), bool)))),
    Mistake("True here marks the future keys: the mask says where attention is allowed, not where it is blocked",
            dict(causal_mask=lambda T: np.triu(np.ones((T, T), bool), 1))),
    Mistake("the entries are right but not bool: return a bool array",
            dict(causal_mask=lambda T: np.tril(np.ones((T, T))))),
    Mistake("k.T reverses all three axes of a (B, T, d) array: swap only the last two, k.swapaxes(-1, -2)",
            dict(attention=functools.partial(_attend, transpose=lambda k: k.T))),
    Mistake("the scores are not divided by √d_k (equation 1)",
            dict(attention=functools.partial(_attend, scale=lambda d: 1))),
    Mistake("the scores are divided by d_k: divide them by its square root",
            dict(attention=functools.partial(_attend, scale=lambda d: d))),
    Mistake("the scores are multiplied by √d_k: divide them by it",
            dict(attention=functools.partial(_attend, scale=lambda d: 1 / np.sqrt(d)))),
    Mistake("−∞ went where the mask is True: True means may attend",
            dict(attention=functools.partial(_attend, invert=True))),
    Mistake("the mask has no effect: where it is False the score must be −∞ before the softmax",
            dict(attention=lambda q, k, v, mask: _attend(q, k, v, None))),
    Mistake("the mask was applied after the softmax: a query's weights no longer sum to 1; mask the scores before it",
            dict(attention=functools.partial(_attend, after=True))),
    Mistake("the softmax ran over the queries: each query's weights over the keys (the last axis) must sum to 1",
            dict(attention=functools.partial(_attend, axis=-2))),
)


# ---------------------------------------------------------------- 09: heads
@functools.lru_cache(maxsize=None)
def _mha(d_model: int, h: int):
    return transformer.MultiHeadAttention(d_model, h)


def _split_heads(x, h):
    return _mha(x.shape[-1], h).split_heads(mt.tensor(x)).numpy()


def _merge_heads(x):
    B, h, T, dk = x.shape
    return _mha(h * dk, h).merge_heads(mt.tensor(x)).numpy()


_HEAD_SPECS = [((1, 1, 1), 1, "one position, one head, d_model = 1"), ((1, 1, 4), 2, "one position, two heads"),
               ((1, 3, 4), 1, "a single head"), ((1, 2, 6), 3, "two positions, three heads"),
               ((2, 3, 4), 2, "two sequences, two heads"), ((2, 2, 8), 4, "four heads of d_k = 2"),
               ((1, 3, 4), 4, "d_k = 1")]


def _cases_09():
    cases = []
    for shape, h, title in _HEAD_SPECS:
        x = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)

        def run(ns, x=x, h=h):
            yield ns.split_heads(x.copy(), h)

        cases.append(Case(f"split_heads: {title}", "split_heads(x, h)", {"x": x, "h": h}, run,
                          [Expect("", _split_heads(x, h), atol=0, rtol=0)]))
    for shape, h, title in _HEAD_SPECS:
        x = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
        heads = _split_heads(x, h)

        def run(ns, heads=heads):
            yield ns.merge_heads(heads.copy())

        cases.append(Case(f"merge_heads: {title}", "merge_heads(x)", {"x": heads}, run,
                          [Expect("", _merge_heads(heads), atol=0, rtol=0)]))
    return cases


def _split_no_transpose(x, h):
    B, T, D = x.shape
    return x.reshape(B, h, T, D // h)


def _split_strided(x, h):
    B, T, D = x.shape
    return x.reshape(B, T, D // h, h).transpose(0, 3, 1, 2)


def _split_no_swap(x, h):
    B, T, D = x.shape
    return x.reshape(B, T, h, D // h)


MISTAKES_09 = (
    Mistake("a plain reshape to (B, h, T, d_k) mixes positions into heads: split d_model into (h, d_k), then move "
            "the head axis before the positions", dict(split_heads=_split_no_transpose)),
    Mistake("head i got every h-th column (i, i + h, …): its columns are the block i·d_k … (i+1)·d_k − 1",
            dict(split_heads=_split_strided)),
    Mistake("the axes come out as (B, T, h, d_k): the head axis goes before the positions",
            dict(split_heads=_split_no_swap)),
    Mistake("a plain reshape of (B, h, T, d_k) to (B, T, d_model) mixes positions: move the head axis back after "
            "the positions first", dict(merge_heads=lambda x: x.reshape(x.shape[0], x.shape[2], -1))),
    Mistake("the heads' columns came out interleaved: head i's d_k columns sit side by side, after head i − 1's",
            dict(merge_heads=lambda x: x.transpose(0, 2, 3, 1).reshape(x.shape[0], x.shape[2], -1))),
)


# ---------------------------------------------------------------- 10: sinusoids
def _sinusoidal_table(n, d):
    return transformer.sinusoidal_table(n, d)


def _cases_10():
    cases = []
    for n, d, title in [(1, 2, "position 0 only, one pair"), (2, 2, "two positions, one pair"),
                        (1, 4, "position 0 only, two pairs"), (2, 4, "two positions, two pairs"),
                        (3, 6, "three pairs"), (5, 8, "four pairs"), (10, 16, "d = 16"), (50, 32, "50 positions")]:
        def run(ns, n=n, d=d):
            yield ns.sinusoidal_table(n, d)
        cases.append(Case(title, "sinusoidal_table(n, d)", {"n": n, "d": d}, run,
                          [Expect("", _sinusoidal_table(n, d).astype(np.float64), atol=1e-5, rtol=0)]))
    return cases


def _table(n, d, exponent=lambda two_i, d: two_i / d, order="interleaved", start=0):
    pos = np.arange(start, start + n, dtype=np.float64)[:, None]
    two_i = np.arange(0, d, 2, dtype=np.float64)
    angle = pos / 10000 ** exponent(two_i, d)
    if order == "blocks":
        return np.concatenate([np.sin(angle), np.cos(angle)], 1)
    out = np.zeros((n, d))
    even, odd = (np.cos(angle), np.sin(angle)) if order == "swapped" else (np.sin(angle), np.cos(angle))
    out[:, 0::2], out[:, 1::2] = even, odd
    return out


def _table_by_column(n, d):
    j = np.arange(d, dtype=np.float64)
    angle = np.arange(n, dtype=np.float64)[:, None] / 10000 ** (j / d)
    return np.where(j % 2 == 0, np.sin(angle), np.cos(angle))


MISTAKES_10 = (
    Mistake("all the sines come first, then all the cosines: they alternate, column 2i a sine and 2i + 1 the cosine "
            "of the same angle", dict(sinusoidal_table=functools.partial(_table, order="blocks"))),
    Mistake("sine and cosine are swapped: the even columns hold sines", dict(
        sinusoidal_table=functools.partial(_table, order="swapped"))),
    Mistake("pair i's wavelength uses 10000^(i/d): the exponent is 2i/d (Section 3.5)",
            dict(sinusoidal_table=functools.partial(_table, exponent=lambda two_i, d: two_i / 2 / d))),
    Mistake("the cosine column 2i + 1 has a frequency of its own in yours: it shares the sine's, that of pair i",
            dict(sinusoidal_table=_table_by_column)),
    Mistake("positions count from 0: row 0 is sin 0 = 0 and cos 0 = 1", dict(
        sinusoidal_table=functools.partial(_table, start=1))),
)


# ---------------------------------------------------------------- 12: one step of cached attention
@functools.lru_cache(maxsize=None)
def _identity_attention(d: int):
    """A one-head MultiHeadAttention whose four projections are the identity: what is left is
    its decoding cache and scaled dot-product attention."""
    mha = transformer.MultiHeadAttention(d, 1).astype(np.float64).eval()
    for lin in (mha.w_q, mha.w_k, mha.w_v, mha.w_o):
        lin.weight.data[...] = np.eye(d)
        lin.bias.data[...] = 0.0
    return mha


def _cached_attention_step(q, k, v, cache):
    mha = _identity_attention(q.shape[-1])
    inner = {"k": mt.tensor(cache["k"][:, None]), "v": mt.tensor(cache["v"][:, None])} if "k" in cache else {}
    out = mha(mt.tensor(q), mt.tensor(k), mt.tensor(v), cache=inner)   # appends the new key and value itself
    cache["k"], cache["v"] = inner["k"].numpy()[:, 0], inner["v"].numpy()[:, 0]
    return out.numpy()


def _cases_12():
    rng = np.random.default_rng(12)
    specs = [((1, 1, 1), "a single position"), ((1, 2, 1), "two positions, d = 1"), ((1, 2, 2), "two positions, d = 2"),
             ((1, 3, 2), "three positions"), ((2, 3, 4), "two sequences"), ((2, 5, 3), "five positions")]
    cases = []
    for (B, T, d), title in specs:
        q, k, v = (_r(rng, (B, T, d)) for _ in range(3))
        full = F.scaled_dot_product_attention(mt.tensor(q), mt.tensor(k), mt.tensor(v),
                                              mask=transformer.causal_mask(T)).numpy()

        def run(ns, q=q, k=k, v=v):
            cache = {}
            for t in range(q.shape[1]):
                out = ns.cached_attention_step(q[:, t:t + 1].copy(), k[:, t:t + 1].copy(), v[:, t:t + 1].copy(), cache)
                for key in ("k", "v"):
                    yield np.array(cache[key], copy=True) if key in cache else \
                        Missing(f"the cache has no {key!r} after this step")
                yield out

        expected = []
        for t in range(T):
            expected += [Expect(f"after the step of t = {t}: cache['k']", k[:, :t + 1]),
                         Expect(f"after the step of t = {t}: cache['v']", v[:, :t + 1]),
                         Expect(f"the step of t = {t}: the output", full[:, t:t + 1])]
        ts = ", ".join(map(str, range(T)))
        cases.append(Case(title, f"cached_attention_step(q[:, t:t+1], k[:, t:t+1], v[:, t:t+1], cache) for t = {ts}, "
                                 "starting from cache = {},", {"q": q, "k": k, "v": v}, run, expected))
    return cases


def _step(q, k, v, cache, append=True, attend="all", scale=True, order="append", axis=1, store=True,
          transpose=lambda k: k.swapaxes(1, 2)):
    if not store:
        return _softmax(q @ k.swapaxes(1, 2) / np.sqrt(q.shape[-1])) @ v
    if "k" in cache and append:
        pair = (cache["k"], k) if order == "append" else (k, cache["k"])
        cache["k"] = np.concatenate(pair, axis)
        cache["v"] = np.concatenate((cache["v"], v) if order == "append" else (v, cache["v"]), axis)
    else:
        cache["k"], cache["v"] = k, v
    K, V = (k, v) if attend == "new" else (cache["k"], cache["v"])
    s = q @ transpose(K) / (np.sqrt(q.shape[-1]) if scale else 1.0)
    if attend == "first":
        s = np.where(np.tril(np.ones((1, K.shape[1]), bool)), s, -np.inf)
    return _softmax(s) @ V


MISTAKES_12 = (
    Mistake("the cache holds only the newest position: append the new key and value to what it already holds",
            dict(cached_attention_step=functools.partial(_step, append=False))),
    Mistake("the output is the new position's value alone: the new query must attend over every cached key",
            dict(cached_attention_step=functools.partial(_step, attend="new"))),
    Mistake("the cache is empty after the step: store the keys and values of the positions so far under 'k' and 'v'",
            dict(cached_attention_step=functools.partial(_step, store=False))),
    Mistake("the scores are not divided by √d", dict(cached_attention_step=functools.partial(_step, scale=False))),
    Mistake("K.T reverses all three axes of a (B, t, d) array: swap only the last two, K.swapaxes(-1, -2)",
            dict(cached_attention_step=functools.partial(_step, transpose=lambda k: k.T))),
    Mistake("the newest position went first: append it at the end, so that position j sits at index j",
            dict(cached_attention_step=functools.partial(_step, order="prepend"))),
    Mistake("the cache grew along axis 0, the batch: the positions are axis 1",
            dict(cached_attention_step=functools.partial(_step, axis=0))),
    Mistake("a causal mask of one row lets the new query see only the first key: the newest position may see "
            "every cached key, and needs no mask",
            dict(cached_attention_step=functools.partial(_step, attend="first"))),
)


# ---------------------------------------------------------------- 14: the shared embedding
def _embed(ids, E):
    V, d = E.shape
    layer = transformer.ScaledEmbedding(V, d).astype(np.float64)
    layer.load_state_dict({"weight": np.asarray(E, dtype=np.float64)})
    return layer(mt.tensor(np.asarray(ids))).numpy()


def _logits(h, E):
    return F.linear(mt.tensor(np.asarray(h, dtype=np.float64)), mt.tensor(np.asarray(E, dtype=np.float64)).T).numpy()


def _cases_14():
    rng = np.random.default_rng(14)
    cases = []
    for (B, T, V, d), title in [((1, 1, 2, 1), "one token, d_model = 1"), ((1, 2, 3, 2), "two tokens, d_model = 2"),
                                ((1, 3, 4, 4), "a repeated token"), ((2, 3, 5, 4), "two sentences"),
                                ((2, 4, 6, 9), "d_model = 9")]:
        ids, E = rng.integers(0, V, (B, T)), _r(rng, (V, d))
        if title == "a repeated token":
            ids[0, 2] = ids[0, 0]

        def run(ns, ids=ids, E=E):
            yield ns.embed(ids.copy(), E.copy())

        cases.append(Case(f"embed: {title}", "embed(ids, E)", {"ids": ids, "E": E}, run, [Expect("", _embed(ids, E))]))
    for (B, T, V, d), title in [((1, 1, 2, 1), "one position, d_model = 1"),
                                ((1, 1, 3, 2), "one position, d_model = 2"),
                                ((1, 2, 2, 2), "V = d_model"), ((2, 3, 5, 4), "two sentences"),
                                ((2, 2, 6, 9), "d_model = 9")]:
        h, E = _r(rng, (B, T, d)), _r(rng, (V, d))

        def run(ns, h=h, E=E):
            yield ns.logits(h.copy(), E.copy())

        cases.append(Case(f"logits: {title}", "logits(h, E)", {"h": h, "E": E}, run, [Expect("", _logits(h, E))]))
    return cases


MISTAKES_14 = (
    Mistake("the rows are not multiplied by √d_model (Section 3.4, lesson 10)", dict(embed=lambda ids, E: E[ids])),
    Mistake("the rows are multiplied by d_model: the factor is its square root",
            dict(embed=lambda ids, E: E[ids] * E.shape[1])),
    Mistake("the rows are divided by √d_model: multiply them by it",
            dict(embed=lambda ids, E: E[ids] / np.sqrt(E.shape[1]))),
    Mistake("the rows are scaled by √V, the vocabulary's size: the factor is √d_model",
            dict(embed=lambda ids, E: E[ids] * np.sqrt(E.shape[0]))),
    Mistake("h E projects with E itself, (V, d_model): the logits use its transpose, (d_model, V)",
            dict(logits=lambda h, E: h @ E)),
    Mistake("the logits are scaled by √d_model too: only the embedding lookup is",
            dict(logits=lambda h, E: h @ E.T * np.sqrt(E.shape[1]))),
    Mistake("the logits are divided by √d_model: they are not scaled at all",
            dict(logits=lambda h, E: h @ E.T / np.sqrt(E.shape[1]))),
    Mistake("these are probabilities: return the logits, before any softmax",
            dict(logits=lambda h, E: _softmax(h @ E.T))),
)


# ---------------------------------------------------------------- 15: one step of beam search
def _rank_extensions(scores, logp, n):
    return _package_rank_extensions(scores, logp, n)


def _cases_15():
    rng = np.random.default_rng(15)
    specs = [((1, 1, 2, 1), "one beam, two tokens, the best one"), ((1, 1, 3, 2), "one beam, three tokens"),
             ((1, 2, 2, 2), "two beams"), ((1, 2, 3, 3), "two beams, three tokens"),
             ((1, 2, 3, 6), "n = K·V: every extension, in order"), ((2, 2, 3, 4), "two sentences"),
             ((2, 3, 4, 6), "three beams, four tokens"), ((1, 2, 3, 3), "beam 1 is unused (score −∞)")]
    cases = []
    for (B, K, V, n), title in specs:
        while True:   # no ties between the totals: the order is then unique
            scores = np.round(-rng.uniform(0, 3, (B, K)), 2)
            logp = np.round(np.log(rng.dirichlet(np.ones(V), (B, K))), 2)
            if "unused" in title:
                scores[:, 1] = -np.inf
            total = (scores[:, :, None] + logp).reshape(B, -1)
            gaps = np.diff(np.sort(total[np.isfinite(total)]))
            if gaps.size == 0 or gaps.min() > 1e-6:
                break

        def run(ns, scores=scores, logp=logp, n=n):
            out = ns.rank_extensions(scores.copy(), logp.copy(), n)
            if not isinstance(out, (tuple, list)) or len(out) != 3:
                got = f"{len(out)} values" if isinstance(out, (tuple, list)) else f"a {type(out).__name__}"
                raise Malformed(f"rank_extensions must return three arrays (beam, token, score); it returned {got}")
            yield from out

        beam, token, score = _rank_extensions(scores, logp, n)
        cases.append(Case(title, "rank_extensions(scores, logp, n)", {"scores": scores, "logp": logp, "n": n}, run,
                          [Expect("beam", beam, kind="i"), Expect("token", token, kind="i"),
                           Expect("score", score, atol=1e-12)]))
    return cases


def _rank(scores, logp, n, by="total", report="total", order=-1, divide_by="V"):
    B, K, V = logp.shape
    total = (scores[:, :, None] + logp).reshape(B, -1)
    key = total if by == "total" else logp.reshape(B, -1)
    top = np.argsort(order * key, axis=1, kind="stable")[:, :n]
    shown = total if report == "total" else logp.reshape(B, -1)
    width = V if divide_by == "V" else K
    return top // width, top % width, np.take_along_axis(shown, top, 1)


MISTAKES_15 = (
    Mistake("ranked by the token's log-probability alone: rank by the total, the beam's score plus the token's",
            dict(rank_extensions=functools.partial(_rank, by="logp"))),
    Mistake("ranked by the token's log-probability alone: rank by the total, the beam's score plus the token's",
            dict(rank_extensions=functools.partial(_rank, by="logp", report="logp"))),
    Mistake("the scores returned are the tokens' log-probabilities: return the totals you ranked by",
            dict(rank_extensions=functools.partial(_rank, report="logp"))),
    Mistake("worst first: the best extension, the highest total log-probability, comes first",
            dict(rank_extensions=functools.partial(_rank, order=1))),
    Mistake("extension (beam k, token w) sits at k·V + w of a flattened row: divide that index by V, not K",
            dict(rank_extensions=functools.partial(_rank, divide_by="K"))),
)


# ---------------------------------------------------------------- 16: the schedule
def _noam_lr(step, d_model, warmup):
    return transformer.noam_lr(step, d_model, warmup)


def _cases_16():
    specs = [(1, 16, 1, "step = warmup = 1: the two branches of the min agree"),
             (1, 512, 4000, "the first step of a long warm-up"), (2, 16, 1, "one step past a warm-up of 1"),
             (2, 512, 4000, "the second step of the warm-up"), (50, 1024, 8000, "still warming up, d_model = 1024"),
             (4000, 512, 4000, "the peak: step = warmup"), (4001, 512, 4000, "the step after the peak"),
             (100_000, 512, 4000, "step 100,000")]
    cases = []
    for step, d_model, warmup, title in specs:
        def run(ns, a=(step, d_model, warmup)):
            yield ns.noam_lr(*a)
        cases.append(Case(title, "noam_lr(step, d_model, warmup)", {"step": step, "d_model": d_model, "warmup": warmup},
                          run, [Expect("", _noam_lr(step, d_model, warmup), atol=0, rtol=1e-9)]))
    return cases


MISTAKES_16 = (
    Mistake("the warm-up branch uses warmup^−1: equation (3) has warmup^−1.5, so that both branches meet at step = "
            "warmup", dict(noam_lr=lambda s, d, w: d**-0.5 * min(s**-0.5, s * w**-1.0))),
    Mistake("there is no warm-up: for the first warmup steps the rate must grow linearly with step",
            dict(noam_lr=lambda s, d, w: d**-0.5 * s**-0.5)),
    Mistake("there is no decay: after warmup steps the rate must fall as step^−0.5",
            dict(noam_lr=lambda s, d, w: d**-0.5 * s * w**-1.5)),
    Mistake("max where equation (3) has min", dict(noam_lr=lambda s, d, w: d**-0.5 * max(s**-0.5, s * w**-1.5))),
    Mistake("the factor d_model^−0.5 is missing", dict(noam_lr=lambda s, d, w: min(s**-0.5, s * w**-1.5))),
)


# ---------------------------------------------------------------- 21: micro-batches
def _accumulate(grads, tokens):
    return [sum(parts) / sum(tokens) for parts in zip(*grads)]


def _cases_21():
    rng = np.random.default_rng(21)
    cfg = transformer.TransformerConfig(12, d_model=4, n_heads=2, d_ff=8, n_encoder_layers=1, n_decoder_layers=1,
                                        dropout=0.0)
    model = transformer.Transformer(cfg).astype(np.float64)
    for p in model.parameters():          # the grader's own weights, whatever mt's random state
        p.data[...] = rng.normal(0, 0.5, p.shape)
    names = [name for name, _ in model.named_parameters()]
    lengths = [6, 4, 2, 5, 5, 2]           # real target tokens of each sentence pair
    src = rng.integers(3, 12, (6, 5))
    tgt = np.zeros((6, 7), dtype=np.int64)
    tgt[:, 0] = cfg.bos_id
    for row, n in enumerate(lengths):
        tgt[row, 1:n + 1] = rng.integers(3, 12, n)
    order = sorted(range(len(names)), key=lambda i: model.parameters()[i].size)   # the smallest arrays first
    splits = [([(0, 6)], "one micro-batch: the whole batch"),
              ([(0, 3), (3, 6)], "two micro-batches with the same number of tokens"),
              ([(0, 2), (2, 6)], "two micro-batches with different numbers of tokens"),
              ([(0, 1), (1, 3), (3, 6)], "three micro-batches"),
              ([(i, i + 1) for i in range(6)], "six micro-batches of one sentence pair each")]
    cases = []
    for rows, title in splits:
        whole, grads, tokens = shard_gradients(model, src, tgt, cfg.pad_id, [slice(a, b) for a, b in rows])

        def run(ns, grads=grads, tokens=tokens):
            out = ns.accumulate([[g.copy() for g in micro] for micro in grads], list(tokens))
            if not isinstance(out, (tuple, list)) or len(out) != len(names):
                got = f"{len(out)} values" if isinstance(out, (tuple, list)) else f"a {type(out).__name__}"
                raise Malformed(f"accumulate must return a list of {len(names)} arrays, one per parameter; "
                                f"it returned {got}")
            for i in order:
                yield out[i]

        def detail(j, grads=grads):
            i = order[j]
            return {f"grads[{m}][{i}]": micro[i] for m, micro in enumerate(grads)}

        spans = ", ".join(f"{a}–{b - 1}" if b - a > 1 else f"{a}" for a, b in rows)
        cases.append(Case(title, "accumulate(grads, tokens)", {
            "micro-batches": f"sentence pairs {spans} of a batch of 6",
            "tokens": list(tokens),
            "grads": f"{len(grads)} list{'s' if len(grads) > 1 else ''} of {len(names)} arrays, one per parameter"},
            run, [Expect(f"parameter {i}, {names[i]} {tuple(whole[i].shape)}", whole[i], atol=1e-12, rtol=1e-9)
                  for i in order], detail))
    return cases


MISTAKES_21 = (
    Mistake("this averages each micro-batch's per-token gradient, so a token of a short micro-batch weighs more: "
            "sum the gradients, then divide once by all the tokens",
            dict(accumulate=lambda g, n: [sum(p / k for p, k in zip(parts, n)) / len(n) for parts in zip(*g)])),
    Mistake("the sum is not divided: the big batch's loss is per token, so divide by all its tokens",
            dict(accumulate=lambda g, n: [sum(parts) for parts in zip(*g)])),
    Mistake("divided by the number of micro-batches: divide by the number of tokens",
            dict(accumulate=lambda g, n: [sum(parts) / len(n) for parts in zip(*g)])),
    Mistake("each micro-batch's gradient is divided by its own tokens before the sum: divide the sum, once, by "
            "all the tokens",
            dict(accumulate=lambda g, n: [sum(p / k for p, k in zip(parts, n)) for parts in zip(*g)])),
)


EXERCISES = {e.number: e for e in [
    Exercise("03", "numerical gradients by central differences", ("numerical_gradient",), _cases_03,
             dict(numerical_gradient=_numerical_gradient), MISTAKES_03),
    Exercise("04", "the gradient of the label-smoothed cross-entropy", ("label_smoothed_gradient",), _cases_04,
             dict(label_smoothed_gradient=_label_smoothed_gradient), MISTAKES_04),
    Exercise("05", "one Adam update, written out", ("adam_update",), _cases_05, dict(adam_update=_adam_update),
             MISTAKES_05),
    Exercise("07", "the backward of LayerNorm", ("layer_norm_backward",), _cases_07,
             dict(layer_norm_backward=_layer_norm_backward), MISTAKES_07),
    Exercise("08", "the causal mask, and attention with it", ("causal_mask", "attention"), _cases_08,
             dict(causal_mask=_causal_mask, attention=_attention), MISTAKES_08),
    Exercise("09", "splitting into heads and merging them back", ("split_heads", "merge_heads"), _cases_09,
             dict(split_heads=_split_heads, merge_heads=_merge_heads), MISTAKES_09),
    Exercise("10", "the sinusoidal positional encoding", ("sinusoidal_table",), _cases_10,
             dict(sinusoidal_table=_sinusoidal_table), MISTAKES_10),
    Exercise("12", "one step of attention with a key-value cache", ("cached_attention_step",), _cases_12,
             dict(cached_attention_step=_cached_attention_step), MISTAKES_12),
    Exercise("14", "the shared embedding: lookup and output projection", ("embed", "logits"), _cases_14,
             dict(embed=_embed, logits=_logits), MISTAKES_14),
    Exercise("15", "one step of beam search", ("rank_extensions",), _cases_15,
             dict(rank_extensions=_rank_extensions), MISTAKES_15),
    Exercise("16", "the learning-rate schedule of equation (3)", ("noam_lr",), _cases_16, dict(noam_lr=_noam_lr),
             MISTAKES_16),
    Exercise("21", "the big batch's gradient from its micro-batches", ("accumulate",), _cases_21,
             dict(accumulate=_accumulate), MISTAKES_21),
]}
