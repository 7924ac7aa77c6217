"""Exercise 25 (lesson 25) — where the time goes, in your engine.

Write ``profile(fn)``: call ``fn()`` (a function of no arguments that runs your engine: a
forward, a backward, an update) and, while it runs, time every Function's ``forward`` and
``backward``. Return a dict: Function class name -> {"forward": calls, "backward": calls,
"seconds": the time spent in both}. Count under the class of the object being run (a
``BroadcastMul`` that inherits ``Mul.forward`` counts as BroadcastMul). Only Functions that ran
appear. Afterwards every Function class must be as it was: wrap the methods, and put the
originals back even when ``fn()`` raises (``try``/``finally``).

Your capstone's per-update time divided this way shows where your engine differs from
minitensor's (whose ``minitensor.profile()`` does the same for its ops).

Check it with:  python lessons/check.py 25
"""
import time

from ex01_tensor import Function
import ex02_broadcasting  # noqa: F401 - the operations that fn runs


def _all_subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _all_subclasses(sub)


def profile(fn):
    # >>> exercise: write profile
    table, originals = {}, []

    def timed(method, kind):
        def run(self, *args, **kwargs):
            t0 = time.perf_counter()
            try:
                return method(self, *args, **kwargs)
            finally:
                row = table.setdefault(type(self).__name__, {"forward": 0, "backward": 0, "seconds": 0.0})
                row[kind] += 1
                row["seconds"] += time.perf_counter() - t0
        return run

    for cls in list(_all_subclasses(Function)):
        for kind in ("forward", "backward"):
            if kind in vars(cls):
                originals.append((cls, kind, vars(cls)[kind]))
                setattr(cls, kind, timed(vars(cls)[kind], kind))
    try:
        fn()
    finally:
        for cls, kind, method in originals:
            setattr(cls, kind, method)
    return table
    # <<<
