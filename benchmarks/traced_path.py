"""The traced path of one training run, from ``main()`` to the end of the first update: how many
files and functions of the project (``minitensor/``, ``transformer/``) the run touches, how many
distinct calls cross from one file to another, and three detours a reader follows:

- the row maximum of attention's softmax: the project's frames between the attention op's
  forward and the NumPy call that takes the maximum;
- Adam: the functions (and their files) that run between the training loop's call of the loss
  scaler's ``step`` and the first frame of the function holding Adam's arithmetic (the first
  that calls ``sqrt``);
- ``loss.backward()``: the frames from the training loop's call into the engine to the first
  op's ``backward``.

It runs ``train`` in this process on a small Multi30k run (500 pairs, a tiny model, one update)
under a profile hook. A function is a code object (module bodies and comprehensions are not
counted: :data:`SKIPPED`); a call's caller is the nearest project frame above it (NumPy's own
frames, and comprehensions, in between are skipped).

    python benchmarks/traced_path.py --data-dir ../shared/data/multi30k
    PYTHONPATH=/tmp/old python benchmarks/traced_path.py --root /tmp/old ...   # another checkout
    MINITENSOR_ROUTES=off python benchmarks/traced_path.py ... -- --fused false   # the reference alone
    python benchmarks/traced_path.py ... --merge transformer/=transformer/one.py   # a layout sketched

``--merge PREFIX=FILE`` (repeatable) also counts the same run as if every file whose path starts
with PREFIX were one file FILE: what a layout of fewer, larger files would give, measured on the
calls the run made rather than argued.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
# not functions a reader opens: module bodies, and comprehensions (frames of their own in Python 3.11)
SKIPPED = {"<module>", "<listcomp>", "<genexpr>", "<dictcomp>", "<setcomp>"}


class Tracer:
    """The profile hook and what it gathers (see the module's docstring)."""

    def __init__(self, root: Path):
        self.root = root
        self.packages = (root / "transformer", root / "minitensor")
        self.functions: set = set()
        self.edges: set = set()
        self.update_frame = None
        self.done = False
        self.row_max: list | None = None
        self.adam_start: int | None = None
        self.adam: list | None = None
        self.calls: list = []           # every project function called, in order (for Adam's detour)
        self.backward: list | None = None

    def place(self, code) -> str | None:
        path = Path(code.co_filename)
        if any(p in path.parents for p in self.packages):
            return str(path.relative_to(self.root))
        return None

    def project_stack(self, frame) -> list:
        """(file, function) of each project frame from ``frame`` up, innermost first."""
        out = []
        while frame is not None:
            if (where := self.place(frame.f_code)) is not None and frame.f_code.co_name not in SKIPPED:
                out.append((where, frame.f_code.co_qualname))
            frame = frame.f_back
        return out

    def hook(self, frame, event, arg):
        if self.done:
            return
        if event == "return" and frame is self.update_frame:
            self.done = True
            return
        if event == "c_call":
            self.c_call(frame, arg)
            return
        if event != "call" or frame.f_code.co_name in SKIPPED:
            return
        where = self.place(frame.f_code)
        if where is None:
            return
        me = (where, frame.f_code.co_qualname)
        self.functions.add(me)
        self.calls.append(me)
        caller = frame.f_back
        while caller is not None and (self.place(caller.f_code) is None or caller.f_code.co_name in SKIPPED):
            caller = caller.f_back
        if caller is not None and (up := self.place(caller.f_code)) != where:
            self.edges.add(((up, caller.f_code.co_qualname), me))
        name = frame.f_code.co_qualname
        if self.update_frame is None and where == "transformer/train.py" and name == "Trainer.update":
            self.update_frame = frame
        if self.update_frame is None:
            return
        if name == "LossScaler.step" and self.adam_start is None:
            self.adam_start = len(self.calls) - 1
        if self.backward is None and frame.f_code.co_name == "backward" and \
                where.startswith(("minitensor/ops/", "minitensor/speed/", "minitensor/cuda/")):
            stack = self.project_stack(frame)
            engine = [i for i, (f, _) in enumerate(stack) if f.startswith("minitensor/")]
            self.backward = stack[:engine[-1] + 1][::-1]  # from the first frame of the engine

    def c_call(self, frame, fn) -> None:
        if self.update_frame is None:
            return
        name = getattr(fn, "__name__", "")
        owner = getattr(fn, "__self__", None)
        if self.row_max is None and ((name == "max" and isinstance(owner, np.ndarray)) or
                                     (name == "reduce" and owner is np.maximum)):
            stack = self.project_stack(frame)
            forward = [i for i, (f, fn_) in enumerate(stack)
                       if f.startswith("minitensor/") and "Attention" in fn_ and fn_.endswith(".forward")]
            if forward:
                self.row_max = stack[:forward[0] + 1][::-1]
        if self.adam is None and self.adam_start is not None and name == "sqrt":
            self.adam = self.calls[self.adam_start:]


def trace(root: Path, argv: list[str]) -> Tracer:
    sys.path.insert(0, str(root))
    from transformer import cli  # noqa: PLC0415

    t = Tracer(root)
    sys.setprofile(t.hook)
    threading.setprofile(t.hook)  # the worker threads too (Adam's pieces run there)
    try:
        cli.run(argv)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    if t.update_frame is None:
        raise SystemExit("the run made no update")
    return t


def merged(functions: set, edges: set, merges: list[tuple[str, str]]) -> dict:
    """Files and cross-file edges of the same calls, each file renamed by the first matching
    ``(prefix, file)`` of ``merges``: two functions of files merged into one no longer cross."""
    def rename(path: str) -> str:
        return next((into for prefix, into in merges if path.startswith(prefix)), path)
    files = {rename(f) for f, _ in functions}
    crossing = {((rename(a), fa), (rename(b), fb)) for (a, fa), (b, fb) in edges if rename(a) != rename(b)}
    return {"merges": [f"{p}={f}" for p, f in merges], "files": len(files), "cross_file_edges": len(crossing)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", default=str(HERE.parent), help="the checkout to read (default: this one)")
    p.add_argument("--data-dir", default=str(HERE.parent.parent / "shared" / "data" / "multi30k"))
    p.add_argument("--out", help="also write the JSON here")
    p.add_argument("--merge", action="append", default=[], metavar="PREFIX=FILE",
                   help="also count as if the files under PREFIX were one FILE (repeatable, cumulative)")
    p.add_argument("flags", nargs="*", help="more flags for train, after -- (e.g. -- --fused false)")
    a = p.parse_args()
    if bad := [m for m in a.merge if m.count("=") != 1]:
        p.error(f"--merge takes PREFIX=FILE, got {bad[0]!r}")
    root = Path(a.root).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["train", "--run-dir", str(Path(tmp) / "run"), "--data-dir", a.data_dir, "--limit", "500",
                "--vocab-size", "300", "--d-model", "32", "--n-heads", "2", "--d-ff", "64", "--max-steps", "1",
                "--eval-every", "1000", "--bleu-sentences", "0", "--no-progress", *a.flags]
        t = trace(root, argv)
    files = {f for f, _ in t.functions}
    adam_functions = list(dict.fromkeys(t.adam or []))
    out = {"root": str(root), "argv": argv, "files": len(files), "functions": len(t.functions),
           "cross_file_edges": len(t.edges),
           "row_max": {"hops": len(t.row_max or []) - 1, "files": len({f for f, _ in t.row_max or []}),
                       "frames": t.row_max},
           "adam": {"functions": len(adam_functions), "files": len({f for f, _ in adam_functions}),
                    "calls": adam_functions},
           "backward": {"frames": len(t.backward or []), "stack": t.backward}}
    out["per_file"] = dict(sorted(Counter(f for f, _ in t.functions).items(), key=lambda kv: -kv[1]))
    print(f"from main() to the end of the first update: {out['files']} files, {out['functions']} functions, "
          f"{out['cross_file_edges']} distinct cross-file calls")
    print("functions per file: " + ", ".join(f"{f} {n}" for f, n in out["per_file"].items()))
    for name, key in (("attention's row maximum", "row_max"),):
        print(f"{name}: {out[key]['hops']} hops over {out[key]['files']} files: "
              + " -> ".join(f"{f}:{fn}" for f, fn in out[key]["frames"] or []))
    print(f"Adam: {out['adam']['functions']} functions over {out['adam']['files']} files from LossScaler.step to "
          f"its arithmetic: " + " -> ".join(f"{f}:{fn}" for f, fn in adam_functions))
    print(f"loss.backward(): {out['backward']['frames']} frames to the first op's backward: "
          + " -> ".join(f"{f}:{fn}" for f, fn in out["backward"]["stack"] or []))
    if a.merge:
        out["merged"] = merged(t.functions, t.edges, [tuple(m.split("=")) for m in a.merge])
        print(f"merged ({', '.join(out['merged']['merges'])}): {out['merged']['files']} files, "
              f"{out['merged']['cross_file_edges']} distinct cross-file calls")
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
