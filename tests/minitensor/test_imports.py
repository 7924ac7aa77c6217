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


# the modules a library built on minitensor may import (minitensor.ops, autograd's Context and
# the like are the engine's inside)
PUBLIC_MODULES = {"minitensor", "minitensor.functional", "minitensor.nn", "minitensor.optim", "minitensor.amp",
                  "minitensor.cuda", "minitensor.distributed", "minitensor.profiler", "minitensor.backend",
                  "minitensor.blas", "minitensor.threads", "minitensor.allocator", "minitensor.environment",
                  "minitensor.kinds", "minitensor.speed.fusions"}


def private_uses(path: Path) -> list[str]:
    """Where the file at ``path`` reaches past minitensor's public face: an import of a module
    not in PUBLIC_MODULES, or of a name with a leading underscore, or an attribute with a leading
    underscore read off a name bound to minitensor (``mt.Tensor._wrap``)."""
    tree = ast.parse(path.read_text())
    bound, found = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "minitensor":
                    bound.add(a.asname or a.name.split(".")[0])
                    if a.name not in PUBLIC_MODULES:
                        found.append(f"{path.name}:{node.lineno}: import {a.name}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "minitensor":
            if node.module not in PUBLIC_MODULES:
                found.append(f"{path.name}:{node.lineno}: from {node.module} import ...")
            for a in node.names:
                bound.add(a.asname or a.name)
                if a.name.startswith("_"):
                    found.append(f"{path.name}:{node.lineno}: {a.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in bound:
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_transformer_reaches_minitensor_only_by_its_public_names():
    transformer = PACKAGE.parent / "transformer"
    assert [use for path in sorted(transformer.rglob("*.py")) for use in private_uses(path)] == []


def test_the_public_face_check_finds_a_planted_private_use(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("import minitensor as mt\nfrom minitensor.ops.dropout import check_probability\n"
                       "x = mt.Tensor._wrap(None)\n")
    assert private_uses(planted) == ["planted.py:2: from minitensor.ops.dropout import ...",
                                     "planted.py:3: mt.Tensor._wrap"]
