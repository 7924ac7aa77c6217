"""The package's layers: no module of ``minitensor`` imports, directly or through others, a
module that imports it back. Every import counts, at the top of a file or inside a function
(a deferred import hides a circle, it does not remove it)."""
import ast
from pathlib import Path

import minitensor

PACKAGE = Path(minitensor.__file__).resolve().parent


def module_name(path: Path) -> str:
    parts = ("minitensor",) + path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports(name: str) -> set:
    """The package's modules that ``name`` imports: ``from pkg import x`` names the submodule
    pkg.x when there is one, else pkg itself (whose __init__ defines x)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in MODULES}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            if base not in MODULES:
                continue
            subs = {f"{base}.{a.name}" for a in node.names} & set(MODULES)
            found |= subs or {base}
            if len(subs) < len(node.names):
                found.add(base)
    found.discard(name)
    return found


def find_cycle(graph: dict) -> list | None:
    """One import circle as a list of modules (first = last), or None."""
    state, stack = {}, []

    def visit(n):
        state[n] = "open"
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == "open":
                return stack[stack.index(m):] + [m]
            if m not in state and (cycle := visit(m)):
                return cycle
        state[n] = "done"
        stack.pop()
        return None

    for n in sorted(graph):
        if n not in state and (cycle := visit(n)):
            return cycle
    return None


def test_no_module_of_the_package_imports_itself_back():
    graph = {name: imports(name) for name in MODULES}
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_the_cycle_finder_finds_a_planted_circle():
    graph = {name: imports(name) for name in MODULES}
    graph["minitensor.tensor"] = graph["minitensor.tensor"] | {"minitensor.functional"}   # the old circle
    cycle = find_cycle(graph)
    assert cycle and cycle[0] == cycle[-1] and "minitensor.tensor" in cycle
    assert "minitensor.tensor" in imports("minitensor.autograd") and "minitensor.ops.reduce" in imports("minitensor.ops.shape")
