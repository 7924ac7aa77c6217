"""The autograder's machinery: what an exercise is, how an answer is run on its cases, and the
report of the smallest failing case (``python lessons/check.py NN`` prints it).

**Cases.** An exercise has a fixed list of cases, smallest first: sizes grow, and the edge
cases come early (one entry, one head, T = 1, step = warmup, ...). The inputs are fixed (drawn
once from seeded generators, most of them rounded to one or two decimals so that the report
prints them exactly), so every run sees the same cases. The grader runs the cases in order
and stops at the first one the answer gets wrong, so the case it reports is the smallest
failing one by construction.

**What is compared.** A case compares one or more values, in order: an output, then each
input's or parameter's gradient, or each step of a loop. The expected values are
minitensor's, in float64 (``lessonkit.exercises`` says which call gives each).

**The report.** On a failure the grader prints the case's input, the expected value and the
answer's, which entries differ and by how much, or a wrong shape or dtype as such. Each
exercise lists known mistakes: the reference solution with one piece replaced by a plausible
wrong one, and a one-line hint. The grader runs them on the failing case, and when one gives
what the answer gave (the same values, to a hundredth of the case's tolerance, or the same
exception), prints its hint. An answer that raises is reported with the exception and the
line of the learner's file that raised it; ``NotImplementedError`` means a piece is not
written yet.

**Drawn cases.** Once the fixed cases pass, an exercise with a ``drawn`` strategy has
hypothesis draw ``DRAWN`` more cases (derandomised: the same ones every run) and shrink the
first one the answer gets wrong to the simplest that still fails; the report shows it as it
shows a fixed case, and never hypothesis's own output.
"""
from __future__ import annotations

import math
import re
import signal
import threading
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from . import track


# ---------------------------------------------------------------- what an exercise is
@dataclass(frozen=True)
class Expect:
    """One value a case compares: ``label`` says which ("the new m", "after the step of
    t = 1: cache['k']", or "" when a case compares one value only). ``kind``: "f" numbers, "i" integers, "b"
    booleans, "s" a list of names. A number passes within ``atol + rtol·|expected|``. With ``judge``, the answer
    is judged against it and ``value`` is what the report shows as expected. With ``dtype``, the answer must
    have that dtype ("float32")."""
    label: str
    value: object
    kind: str = "f"
    atol: float = 1e-9
    rtol: float = 1e-7
    judge: object = None
    dtype: str | None = None


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
    """A plausible wrong answer and the hint shown when an answer gives what it gives.
    ``answer`` maps names of the exercise's module ("sum_to", or "Tensor.backward" for a
    method) to what replaces them in the reference solution."""
    hint: str
    answer: dict


@dataclass(frozen=True)
class Using:
    """A mistake's replacement made from the module it goes into: ``make(module)`` (a wrong
    backward that calls the module's own ``sum_to``, say)."""
    make: Callable


@dataclass(frozen=True)
class Exercise:
    number: str                 # the lesson's number
    title: str
    functions: tuple            # what the stub must define
    make_cases: Callable        # () -> list of Case, smallest first
    mistakes: tuple = field(default=())
    drawn: Callable | None = None   # () -> a hypothesis strategy of Cases, tried once the fixed cases pass
    reaches: tuple = ()         # earlier exercises the cases call into (a Tensor, a Transformer) that the file does not import

    def cases(self) -> list:
        if self.number not in _CASES:
            _CASES[self.number] = self.make_cases()
        return _CASES[self.number]


class Missing:
    """A value the answer should have produced and did not (a cache without "k")."""

    def __init__(self, reason: str):
        self.reason = reason


class Malformed(Exception):
    """The answer returned something of the wrong form (two values where three belong)."""


_CASES: dict = {}


def lookup(obj, dotted: str):
    """``obj.a.b`` for "a.b" (None where a name is missing)."""
    for name in dotted.split("."):
        obj = getattr(obj, name, None)
    return obj


def mistaken(number: str, mistake: Mistake):
    """The reference solution of exercise ``number``, freshly imported, with ``mistake`` made."""
    module = track.load(track.SOLUTIONS, number)
    for dotted, wrong in mistake.answer.items():
        *owner, name = dotted.split(".")
        wrong = wrong.make(module) if isinstance(wrong, Using) else wrong
        setattr(lookup(module, ".".join(owner)) if owner else module, name, wrong)
    return module


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


def _names(names: list, most: int = 6) -> str:
    return ", ".join(map(str, names[:most])) + (f" … ({len(names)} in all)" if len(names) > most else "")


def _compare_names(got: list, want: list) -> list:
    """What is wrong with a list of names against the expected one: those missing, those not
    expected, or the order."""
    if got == want:
        return []
    missing, extra = [n for n in want if n not in got], [n for n in got if n not in want]
    lines = ([f"missing: {_names(missing)}"] if missing else []) + ([f"not expected: {_names(extra)}"] if extra else [])
    return lines or ["the same names, but not in the same order (or one repeated)"]


def _compare(got, exp: Expect) -> list:
    """What is wrong with ``got`` against ``exp`` (lines for the report); [] when it passes."""
    if isinstance(got, Missing):
        return [f"got nothing: {got.reason}"]
    if got is None:
        return ["got None: the function returns nothing (is a `return` missing?)"]
    if exp.kind == "s":
        return _compare_names(list(got), list(exp.value))
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
    if exp.dtype is not None and g.dtype != np.dtype(exp.dtype):
        return [f"wrong dtype: expected {exp.dtype}, got {g.dtype}"]
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
        if diff is None:
            return ["off: a different value"]
        return [f"off by {diff.item():.3g}{allowed}" if np.isfinite(diff.item()) else "off: nan or inf"]
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


class TooSlow(Exception):
    """The answer ran past ``LIMIT`` seconds on one case."""


LIMIT = 10.0   # seconds an answer may take on one case (the reference takes milliseconds)


@contextmanager
def _limited(seconds: float):
    """Raise TooSlow inside the answer once it has run ``seconds`` (where the platform has
    interval timers and this is the main thread; elsewhere no limit)."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(*_):
        raise TooSlow(f"it ran longer than {seconds:g} s on this case (an endless loop, or work that grows "
                      "with the number of paths through the graph?)")
    before = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


def _first_failure(case: Case, answer) -> _Outcome | None:
    """Run the case; the first compared value that fails (or the exception), or None."""
    with _limited(LIMIT):
        return _run_case(case, answer)


def _run_case(case: Case, answer) -> _Outcome | None:
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
        with _limited(LIMIT):
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
    if x.dtype.kind == "U" or y.dtype.kind == "U":
        return x.shape == y.shape and bool((x == y).all())
    if x.shape != y.shape or (x.dtype == bool) != (y.dtype == bool):
        return False
    return bool(np.allclose(x.astype(np.float64), y.astype(np.float64), rtol=max(exp.rtol / 100, 1e-12),
                            atol=exp.atol / 100, equal_nan=True))


def _hints(ex: Exercise, cases: list, n: int, outcome: _Outcome, answer=None) -> list:
    """The hints of the known mistakes that pass the cases before case ``n``, as the answer
    did, fail case ``n`` too and give on it what the answer gave, up to the failure (a mistake
    that agrees in value but passes, where the answer failed on its dtype, is not the answer's);
    of those, only the ones that also agree with ``answer`` on at least half of the later cases,
    and when several do, those that agree on the most: a hint is printed for the mistake the
    answer makes, not for another that happens to agree on one case."""
    found = {}
    for mistake in ex.mistakes:
        wrong = mistaken(ex.number, mistake)
        theirs = _values(cases[n - 1], wrong, outcome.index)
        if len(theirs) == len(outcome.seen) and mistake.hint not in found and \
                all(_same(a, b, e) for a, b, e in zip(theirs, outcome.seen, cases[n - 1].expected)) and \
                all(_passes(c, wrong) for c in cases[:n - 1]) and not _passes(cases[n - 1], wrong):
            found[mistake.hint] = wrong
    later = cases[n:]
    if not found or answer is None or not later:
        return list(found)
    mine = [_values(c, answer, len(c.expected) - 1) for c in later]
    agree = {hint: sum(_agree(c, _values(c, wrong, len(c.expected) - 1), m) for c, m in zip(later, mine))
             for hint, wrong in found.items()}
    best = max(agree.values())
    return [hint for hint in found if agree[hint] == best and 2 * best >= len(later)]


def _agree(case: Case, a: list, b: list) -> bool:
    return len(a) == len(b) and all(_same(x, y, e) for x, y, e in zip(a, b, case.expected))


def _passes(case: Case, answer) -> bool:
    try:
        return _first_failure(case, answer) is None
    except NotImplementedError:
        return False


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
        return (f"({inner},)" if len(value) == 1 else f"({inner})") if isinstance(value, tuple) else f"[{inner}]"
    if isinstance(value, dict):                               # a state dict: one name per line
        step = " " * (indent + 1)
        inner = f",\n{step}".join(f"{k!r}: {_show(v, precision, indent + 3 + len(repr(k)))}" for k, v in value.items())
        return "{" + inner + "}"
    if isinstance(value, (tuple, list)) and _ragged(value):   # arrays of different shapes: one per line
        step = " " * (indent + 1)
        inner = f",\n{step}".join(_show(v, precision, indent + 1) for v in value)
        return f"[{inner}]"
    a = np.asarray(value)
    if a.dtype == object:
        return repr(value)
    if a.ndim == 0:
        return _show(a.item(), precision)
    if a.dtype.kind == "f":
        precision = _decimals(a) if precision is None else precision
        a = np.where(np.abs(a) < 0.5 * 10.0**-precision, 0.0, a)   # no "-0."
    text = np.array2string(a, precision=precision or 4, suppress_small=True, max_line_width=96, threshold=400)
    return text.replace("\n", "\n" + " " * indent)


def _ragged(values) -> bool:
    """A list NumPy cannot make one array of (items of different shapes)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return np.asarray(values).dtype == object
    except ValueError:
        return True


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
        return min(17, max(6, math.ceil(-math.log10(rel)) + 2))
    p = _decimals(np.concatenate([e.ravel(), g.ravel()]))
    return p if finite.size == 0 else min(17, max(p, math.ceil(-math.log10(finite.max())) + 1))


def _report(ex: Exercise, cases: list, n: int, outcome: _Outcome, drawn: bool = False, answer=None) -> str:
    case = cases[n - 1]
    head = f"a case drawn by hypothesis, the smallest it found that fails: {case.title}" if drawn \
        else f"case {n} of {len(cases)}: {case.title}"
    lines = [head, f"  {case.call} with"]
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
        where = track.where(e, ex.number)
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
                shown = _show(list(outcome.got) if exp.kind == "s" else _array(outcome.got), p, indent=len(pad) + 9)
            except (Malformed, TypeError):
                shown = repr(outcome.got)
            lines.append(f"{pad}got      {shown}")
        for line in outcome.lines:
            lines.append(pad + line.replace("\n", "\n" + pad))
    lines += [f"  hint: {h}" for h in _hints(ex, cases, n, outcome, answer)]
    if drawn:
        lines.append(f"(all {n - 1} fixed cases pass)")
    elif n > 1:
        lines.append(f"(cases 1–{n - 1} of {len(cases)} pass)" if n > 2 else f"(case 1 of {len(cases)} passes)")
    return "\n".join(lines)


def grade(ex: Exercise, answer, draw: bool = True) -> tuple[bool, str]:
    """(passed, report) for ``answer``, the learner's module of exercise ``ex`` (imported with
    :func:`lessonkit.track.load`). The cases run in order; the report describes the first one
    that fails. ``draw=False``: the fixed cases only, no drawn ones."""
    with track.in_scope(answer):   # an import inside the learner's function finds their own modules
        return _grade(ex, answer, draw)


def _grade(ex: Exercise, answer, draw: bool) -> tuple[bool, str]:
    missing = [f for f in ex.functions if not callable(lookup(answer, f))]
    if missing:
        return False, f"missing: {', '.join(missing)} (the file must define {', '.join(ex.functions)})"
    cases = ex.cases()
    for n, case in enumerate(cases, 1):
        try:
            outcome = _first_failure(case, answer)
        except NotImplementedError as e:
            passed = f"; cases 1–{n - 1} of {len(cases)} pass" if n > 1 else ""
            earlier = re.match(r"exercise (\d\d): write ([\w.]+)", str(e))
            if earlier and earlier.group(1) != ex.number:    # a piece of an earlier exercise this one uses
                return False, f"not written yet: this exercise uses your exercise {earlier.group(1)}, whose " \
                              f"{earlier.group(2)} is not written yet (python lessons/check.py {earlier.group(1)})"
            return False, f"not written yet ({e}){passed}"
        if outcome is not None:
            return False, _report(ex, cases, n, outcome, answer=answer)
    if ex.drawn is None or not draw:
        return True, f"all {len(cases)} cases pass"
    try:
        case = _drawn_failure(ex, answer)
    except ImportError:
        return True, f"all {len(cases)} cases pass (hypothesis is not installed, so no cases were drawn: " \
                     "pip install -e \".[lessons]\")"
    if case is None:
        return True, f"all {len(cases)} cases pass, and {DRAWN} more drawn by hypothesis"
    return False, _report(ex, cases + [case], len(cases) + 1, _first_failure(case, answer), drawn=True,
                          answer=answer)


DRAWN = 40   # inputs hypothesis draws per exercise, the same ones every run


def _drawn_failure(ex: Exercise, answer) -> Case | None:
    """The smallest case hypothesis finds among its drawn ones that ``answer`` gets wrong (it
    shrinks a failing case to the simplest that still fails), or None. Derandomised: every run
    draws the same cases; no example database is written."""
    from hypothesis import HealthCheck, find, settings
    from hypothesis.errors import NoSuchExample
    try:
        return find(ex.drawn(), lambda case: not _passes(case, answer),
                    settings=settings(max_examples=DRAWN, database=None, derandomize=True, deadline=None,
                                      suppress_health_check=list(HealthCheck)))
    except NoSuchExample:
        return None



def _r(rng, shape, scale=1.0, decimals=1):
    """Normal numbers rounded to ``decimals``: inputs the report can print exactly."""
    return np.round(rng.standard_normal(shape) * scale, decimals)


