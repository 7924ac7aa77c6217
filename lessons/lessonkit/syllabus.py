"""The lessons as a course: what each one teaches, what it uses, and whether the order holds.

Each lesson's first cell ends with two lines a reader sees:

    **Teaches:** `F.softmax`, `mt.gradcheck`; gradient checking, softmax.
    **Uses:** reverse-mode differentiation, broadcasting.

Names in backticks are parts of the package (only the last dotted part counts: `F.softmax`
is ``softmax``); the other items are concepts, written the same way wherever they appear.
"**Uses:** nothing …" declares no prerequisite. From these and the lessons' code,
:func:`problems` finds every place where the order breaks:

- a concept a lesson uses that no earlier lesson (nor itself) teaches;
- a name a lesson's code uses (imports it, reads it as an attribute, passes it as a keyword,
  or calls a check that needs it) that a *later* lesson teaches;
- a name imported from ``minitensor`` or ``transformer`` that no lesson up to there teaches;
- a name or concept taught twice, or a taught name the lesson's code never mentions.
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import types
from dataclasses import dataclass, field
from pathlib import Path

LESSONS = Path(__file__).resolve().parents[1]
PACKAGES = ("minitensor", "transformer")


@dataclass
class Lesson:
    number: int
    file: Path
    title: str
    paper: str                                 # the sections in the title's parentheses, or "—"
    teaches_names: list[str] = field(default_factory=list)
    teaches_concepts: list[str] = field(default_factory=list)
    uses_concepts: list[str] = field(default_factory=list)
    code: str = ""                             # the code cells, joined
    prose: str = ""                            # the markdown cells, joined


def lesson_files() -> list[Path]:
    return sorted(LESSONS.glob("[0-9][0-9]_*.py"))


def _cells(text: str) -> list[tuple[str, str]]:
    """[(kind, source)] of a py:percent script: kind "markdown" (comment prefix removed) or "code"."""
    cells, kind, lines = [], None, []
    for line in text.splitlines():
        if line.startswith("# %%"):
            if kind is not None:
                cells.append((kind, "\n".join(lines)))
            kind, lines = ("markdown" if "[markdown]" in line else "code"), []
        elif kind == "markdown":
            lines.append(line[2:] if line.startswith("# ") else line.lstrip("#"))
        elif kind is not None:
            lines.append(line)
    if kind is not None:
        cells.append((kind, "\n".join(lines)))
    return cells


def _declared(markdown: str, label: str) -> str:
    m = re.search(rf"\*\*{label}:\*\*(.*?)(?=\n\s*\n|\*\*\w+:\*\*|\Z)", markdown, re.S)
    if m is None:
        raise ValueError(f"no **{label}:** line")
    return " ".join(m.group(1).split()).rstrip(".")


def _items(declared: str) -> tuple[list[str], list[str]]:
    """(names, concepts) of a declaration."""
    if declared.lower().startswith("nothing"):
        return [], []
    names = [n.split(".")[-1].strip("()") for n in re.findall(r"`([^`]+)`", declared)]
    rest = re.sub(r"`[^`]+`", "", declared)
    concepts = [c.strip() for c in re.split(r"[,;]", rest) if c.strip()]
    return names, concepts


def parse(path: Path, text: str | None = None) -> Lesson:
    text = path.read_text() if text is None else text
    cells = _cells(text)
    intro = cells[0][1]
    m = re.match(r"# Lesson (\d+) — (.*)", intro.strip().splitlines()[0])
    if m is None:
        raise ValueError(f"{path.name}: the first line must be '# Lesson N — Title'")
    title = m.group(2).strip()
    paper = re.search(r"\((Sections? [^)]*)\)\s*$", title)
    names, concepts = _items(_declared(intro, "Teaches"))
    used_names, used = _items(_declared(intro, "Uses"))
    if used_names:
        raise ValueError(f"{path.name}: **Uses:** lists concepts only; the code's names are found by reading it")
    return Lesson(int(m.group(1)), path, title, paper.group(1) if paper else "—", names, concepts, used,
                  "\n".join(src for kind, src in cells if kind == "code"),
                  "\n".join(src for kind, src in cells if kind != "code"))


def course(texts: dict[str, str] | None = None) -> list[Lesson]:
    """Every lesson in file order (``texts``: file name -> text, to check an edited copy)."""
    texts = texts or {}
    return [parse(p, texts.get(p.name)) for p in lesson_files()]


def _check_needs() -> dict[str, tuple]:
    from . import checks  # noqa: PLC0415

    return {name: getattr(fn, "needs", ()) for name, fn in vars(checks).items() if callable(fn)}


def used_names(code: str) -> tuple[set[str], set[str]]:
    """(every name the code refers to, the names it imports from the packages)."""
    tree = ast.parse(code)
    needs = _check_needs()
    seen, imported, foreign = set(), set(), set()
    for node in ast.walk(tree):     # modules from elsewhere (np, plt, math): their attributes are not ours
        if isinstance(node, ast.Import):
            foreign.update((a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] not in PACKAGES)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                seen.add(alias.name)
                if node.module.split(".")[0] in PACKAGES:
                    imported.add((node.module, alias.name))
        elif isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id in foreign:
                continue
            seen.add(node.attr)
            if isinstance(node.value, ast.Name) and node.value.id == "checks":
                seen.update(needs.get(node.attr, ()))
        elif isinstance(node, ast.keyword) and node.arg:
            seen.add(node.arg)
    modules = set()
    for module, name in imported:   # modules (nn, data, amp) are namespaces, not things a lesson teaches
        parent = importlib.import_module(module)
        if isinstance(getattr(parent, name, None), types.ModuleType) or \
                hasattr(parent, "__path__") and importlib.util.find_spec(f"{module}.{name}") is not None:
            modules.add(name)
    return seen, {name for _, name in imported} - modules


def problems(lessons: list[Lesson]) -> list[str]:
    """Every break of the reading order (empty: the course reads front to back)."""
    out = []
    taught_name, taught_concept = {}, {}
    for lesson in lessons:
        for n in dict.fromkeys(lesson.teaches_names):
            if n in taught_name:
                out.append(f"lesson {lesson.number}: `{n}` is already taught by lesson {taught_name[n]}")
            taught_name.setdefault(n, lesson.number)
            if not re.search(rf"\b{re.escape(n)}\b", lesson.code):
                out.append(f"lesson {lesson.number}: teaches `{n}` but its code never mentions it")
        for c in lesson.teaches_concepts:
            if c in taught_concept:
                out.append(f"lesson {lesson.number}: '{c}' is already taught by lesson {taught_concept[c]}")
            taught_concept.setdefault(c, lesson.number)
    for lesson in lessons:
        for c in lesson.uses_concepts:
            where = taught_concept.get(c)
            if where is None:
                out.append(f"lesson {lesson.number}: uses '{c}', which no lesson teaches")
            elif where > lesson.number:
                out.append(f"lesson {lesson.number}: uses '{c}', taught later, in lesson {where}")
        seen, imported = used_names(lesson.code)
        for n in sorted(seen):
            where = taught_name.get(n)
            if where is not None and where > lesson.number:
                out.append(f"lesson {lesson.number}: its code uses `{n}`, taught later, in lesson {where}")
        for n in sorted(imported):
            if n not in taught_name:
                out.append(f"lesson {lesson.number}: imports `{n}`, which no lesson teaches")
        for n in sorted(prose_names(lesson.prose)):
            where = taught_name.get(n)
            if where is not None and where > lesson.number:
                out.append(f"lesson {lesson.number}: its prose names `{n}`, taught later, in lesson {where}")
    return out


def prose_names(markdown: str) -> set[str]:
    """The identifiers inside the prose's `code spans` (`TrainSettings(update_freq=k)` names
    TrainSettings and update_freq): what a reader is told to use."""
    return {ident for span in re.findall(r"`([^`\n]+)`", markdown)
            for ident in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", span)}
