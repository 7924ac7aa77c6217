"""The environment variables (minitensor/environment.py): every one the project reads is declared
once, read through its declaration, parsed by its kind, and a bad value is named, never a
traceback at import."""
import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import transformer  # noqa: F401 (declares the command line's variables)
from minitensor import environment
from minitensor.environment import VariableError

ROOT = Path(__file__).resolve().parents[2]
CODE = [*sorted((ROOT / "minitensor").rglob("*.py")), *sorted((ROOT / "transformer").rglob("*.py")),
        *sorted((ROOT / "examples").glob("*.py"))]
OURS = re.compile(r"^(MINITENSOR_\w+|MULTI30K_DIR)$")


def names_read(path: Path) -> set[str]:
    """The string constants of ours (MINITENSOR_..., MULTI30K_DIR) in ``path``."""
    return {node.value for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and OURS.match(node.value)}


def test_every_variable_the_project_names_is_declared():
    named = set().union(*(names_read(p) for p in CODE))
    assert named - set(environment.VARIABLES) == set()


def test_only_the_declarations_read_the_environment_for_our_variables():
    """No module reads one of our variables past its declaration (os.environ.get("MINITENSOR_..."))."""
    raw = []
    for path in CODE:
        if path.name == "environment.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Call, ast.Subscript)):
                text = ast.unparse(node)
                if re.search(r"\bos\.environ\b|\bgetenv\b", text) and names_read_text(text):
                    raw.append(f"{path.relative_to(ROOT)}:{node.lineno}: {text}")
    assert raw == []


def names_read_text(text: str) -> bool:
    return bool(re.search(r"['\"](MINITENSOR_\w+|MULTI30K_DIR)['\"]", text))


def test_a_value_is_parsed_by_its_kind_and_unset_or_empty_is_the_default(monkeypatch):
    monkeypatch.setenv("MINITENSOR_THREADS", " 3 ")
    assert environment.value("MINITENSOR_THREADS") == 3
    monkeypatch.setenv("MINITENSOR_DIST_TIMEOUT", "2.5")
    assert environment.value("MINITENSOR_DIST_TIMEOUT") == 2.5
    for unset in ("", "  "):
        monkeypatch.setenv("MINITENSOR_THREADS", unset)
        assert environment.value("MINITENSOR_THREADS") is None
    monkeypatch.delenv("MINITENSOR_ATTENTION", raising=False)
    assert environment.value("MINITENSOR_ATTENTION") == "auto"


@pytest.mark.parametrize("name, text, said", [
    ("MINITENSOR_THREADS", "0", "MINITENSOR_THREADS must be a whole number in [1, 4096], got 0"),
    ("MINITENSOR_THREADS", "1.5", "MINITENSOR_THREADS must be a whole number in [1, 4096], got 1.5"),
    ("MINITENSOR_WGMMA", "2", "MINITENSOR_WGMMA must be one of 0, 1, got 2"),
    ("MINITENSOR_ATTENTION", "bogus", "MINITENSOR_ATTENTION must be one of auto, flash, fused, got bogus"),
    ("MINITENSOR_DIST_TIMEOUT", "nan", "MINITENSOR_DIST_TIMEOUT must be a finite number > 0, got nan"),
    ("MINITENSOR_CUDA", "gpu\n", "MINITENSOR_CUDA must be one of emulate, got 'gpu\\n'"),
])
def test_a_value_its_kind_refuses_is_named_with_the_kind_and_the_value(monkeypatch, name, text, said):
    monkeypatch.setenv(name, text)
    with pytest.raises(VariableError) as info:
        environment.value(name)
    assert str(info.value) == said
    with pytest.raises(VariableError):
        environment.check()


def test_a_name_is_declared_once():
    with pytest.raises(ValueError, match="MINITENSOR_THREADS is declared twice"):
        environment.declare("MINITENSOR_THREADS", environment.SWITCH, "0", "again")


@pytest.mark.parametrize("name", ["MINITENSOR_WGMMA", "MINITENSOR_CUDA", "MINITENSOR_ATTENTION",
                                  "MINITENSOR_KEEP_FREED_MEMORY", "MINITENSOR_THREADS"])
def test_a_bad_value_never_stops_the_import_and_is_named_where_it_is_used(name):
    code = "import minitensor, transformer.cli\nfrom minitensor import environment\nenvironment.check()"
    p = subprocess.run([sys.executable, "-c", code], env={**os.environ, name: "bogus"}, capture_output=True, text=True)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 1 and lines[-1].startswith(f"minitensor.environment.VariableError: {name} must be "), p.stderr
    assert "import minitensor" not in p.stderr  # the traceback is check()'s, not the import's


def test_one_cache_rule_for_downloads_and_kernels(monkeypatch, tmp_path):
    """MINITENSOR_CACHE first, then XDG_CACHE_HOME/minitensor, then ~/.cache/minitensor; the
    Multi30k download and the emulator's kernels both live under that one folder."""
    from minitensor.cuda import emulator
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in ("MINITENSOR_CACHE", "XDG_CACHE_HOME", "MINITENSOR_EMULATOR_CACHE"):
        monkeypatch.delenv(name, raising=False)
    assert environment.cache_folder() == tmp_path / "home" / ".cache" / "minitensor"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert environment.cache_folder() == tmp_path / "xdg" / "minitensor"
    monkeypatch.setenv("MINITENSOR_CACHE", str(tmp_path / "mine"))
    assert environment.cache_folder() == tmp_path / "mine"
    assert emulator.cache_dir() == tmp_path / "mine" / "emulator"
    monkeypatch.setenv("MINITENSOR_EMULATOR_CACHE", str(tmp_path / "kernels"))
    assert emulator.cache_dir() == tmp_path / "kernels"
