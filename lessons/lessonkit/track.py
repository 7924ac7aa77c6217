"""The exercise track: the learner's own engine, one file per lesson, each importing the earlier
ones by module name (``from ex05_module_and_adam import Linear``).

Two tracks exist side by side: the learner's (``lessons/exercises/exNN_*.py``) and the
reference solutions (``tests/lessons/solutions/``, where a learner does not stumble on them).
Both use the same module names, so a track is imported inside :func:`importing`, which puts
its directory first on ``sys.path`` and keeps every ``exNN_*`` module it imports apart from
the other track's: a module keeps the objects it imported, so the two never mix.
"""
from __future__ import annotations

import ast
import importlib
import re
import sys
import traceback
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LEARNER = ROOT / "lessons" / "exercises"
SOLUTIONS = ROOT / "tests" / "lessons" / "solutions"
NAME = re.compile(r"ex(\d\d)_\w+$")


def _ours(name: str) -> bool:
    return NAME.match(name) is not None


@contextmanager
def importing(directory: Path):
    """Inside: ``import exNN_...`` finds ``directory``'s files, fresh."""
    directory = str(Path(directory).resolve())
    saved = {k: sys.modules.pop(k) for k in list(sys.modules) if _ours(k)}
    sys.path.insert(0, directory)
    try:
        yield
    finally:
        sys.path.remove(directory)
        for k in [k for k in sys.modules if _ours(k)]:
            del sys.modules[k]
        sys.modules.update(saved)


@contextmanager
def in_scope(module):
    """Inside: ``import exNN_...`` anywhere (a function's own import, run while it is graded)
    gives the modules of ``module``'s track, the very ones it was loaded with."""
    saved = {k: sys.modules.pop(k) for k in list(sys.modules) if _ours(k)}
    sys.modules.update({m.__name__: m for m in getattr(module, "__track__", {}).values()})
    try:
        yield
    finally:
        for k in [k for k in sys.modules if _ours(k)]:
            del sys.modules[k]
        sys.modules.update(saved)


def where(e: BaseException, number: str | None = None) -> str:
    """'ex08_attention.py, in attention, line 12: s = q @ k.T' for the deepest frame of ``e`` in
    a track's files (this exercise's and the earlier ones it uses), or ''. With ``number``, the
    graded exercise's own deepest frame comes first when the error arose deeper, in an earlier
    exercise's file ('ex12_...py, in forward, line 35: ...; inside ex02_...py, in masked_fill, ...')."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if _ours(Path(f.filename).stem)]
    if not frames:
        return ""
    shown = [frames[-1]]
    own = [f for f in frames if number is not None and Path(f.filename).stem.startswith(f"ex{number}_")]
    if own and own[-1] is not frames[-1]:
        shown.insert(0, own[-1])
    return "; inside ".join(_frame(f) for f in shown)


def _frame(f) -> str:
    at = f"{Path(f.filename).name}, in {f.name}, line {f.lineno}"
    return f"{at}: {f.line}" if f.line else at


def path(directory: Path, number: str) -> Path | None:
    """The file of exercise ``number`` in ``directory`` (None if there is none)."""
    found = sorted(Path(directory).glob(f"ex{number}_*.py"))
    return found[0] if found else None


def builds_on(directory: Path, number: str, reaches=()) -> list[str]:
    """The earlier exercises that exercise ``number`` of the track in ``directory`` imports,
    directly or through one another, read from the files' import statements (a file that does
    not parse adds none of its own); ``reaches``: those its grader calls into besides, with
    what they import."""
    found, todo = set(reaches), [number, *reaches]
    while todo:
        file = path(directory, todo.pop())
        try:
            tree = ast.parse(file.read_text(encoding="utf-8")) if file else None
        except (SyntaxError, ValueError, OSError):
            tree = None
        names = [] if tree is None else \
            [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names] + \
            [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module and not n.level]
        for name in names:
            if (m := NAME.match(name.split(".")[0])) and m.group(1) not in found and m.group(1) < number:
                found.add(m.group(1))
                todo.append(m.group(1))
    return sorted(found)


def load(directory: Path, number: str):
    """Exercise ``number`` of the track in ``directory``, imported fresh after every earlier one
    (its ``__track__`` holds them all: the grader builds on the learner's earlier answers)."""
    file = path(directory, number)
    if file is None:
        raise FileNotFoundError(f"no ex{number}_*.py in {directory}")
    with importing(directory):
        for earlier in sorted(Path(directory).glob("ex[0-9][0-9]_*.py")):   # the learner's engine so far
            if earlier.stem < file.stem:
                importlib.import_module(earlier.stem)
        module = importlib.import_module(file.stem)
        _remember_track()
    return module


def load_all(directory: Path) -> dict:
    """Every exercise of the track in ``directory``, imported together (number -> module)."""
    with importing(directory):
        modules = {NAME.match(p.stem).group(1): importlib.import_module(p.stem)
                   for p in sorted(Path(directory).glob("ex[0-9][0-9]_*.py"))}
        _remember_track()
    return modules


def _remember_track() -> None:
    """Give every track module imported so far ``__track__``: number -> module, this track's
    (the grader reaches the learner's Tensor of exercise 01 through any later exercise)."""
    modules = {NAME.match(k).group(1): m for k, m in sys.modules.items() if _ours(k)}
    for m in modules.values():
        m.__track__ = modules


BLOCK = re.compile(r"^(?P<indent>[ \t]*)# >>> exercise: write (?P<what>[\w.]+)\n(?P<body>.*?)^[ \t]*# <<<\n",
                   re.S | re.M)   # a piece the learner writes


def stub_text(solution: str, number: str) -> str:
    """A solution's text with every ``# >>> exercise: write X`` ... ``# <<<`` block replaced by
    ``raise NotImplementedError("exercise NN: write X")``: the learner's starting file."""
    return BLOCK.sub(lambda m: f'{m["indent"]}raise NotImplementedError("exercise {number}: write {m["what"]}")\n',
                      solution)


def write_stubs(target: Path = LEARNER) -> list:
    """(Maintainers) write every stub from its solution; the test suite checks that they agree."""
    written = []
    for p in sorted(SOLUTIONS.glob("ex[0-9][0-9]_*.py")):
        (Path(target) / p.name).write_text(stub_text(p.read_text(), NAME.match(p.stem).group(1)))
        written.append(p.name)
    return written
