"""The project on a system without POSIX's ``fcntl`` module and without ``SIGHUP`` and ``SIGPIPE``
(Windows): every module imports, the command line and the copy task answer ``--help``, and
the copy task trains and writes its run directory.

Simulated here on Linux in a fresh interpreter: ``fcntl`` cannot be imported and the two
signals are removed from :mod:`signal` before the project is imported. portalocker, the one
dependency that locks files, is imported first, as it brings its own lock for each system
(``msvcrt`` on Windows).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

WITHOUT_POSIX = """
import signal, sys
import portalocker  # its own lock for each system, imported while fcntl still can be
sys.modules["fcntl"] = None  # 'import fcntl' now raises ImportError, as on Windows
for name in ("SIGHUP", "SIGPIPE"):
    delattr(signal, name)
"""


def _run(code: str, *argv, cwd=ROOT, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WITHOUT_POSIX + code, *map(str, argv)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def test_the_simulation_takes_fcntl_and_the_two_signals_away():
    done = _run("import importlib\n"
                "try:\n    importlib.import_module('fcntl')\nexcept ImportError:\n    print('no fcntl')\n"
                "print(hasattr(signal, 'SIGHUP'), hasattr(signal, 'SIGPIPE'))")
    assert done.stdout.split("\n")[:2] == ["no fcntl", "False False"], done.stderr


def test_every_module_of_the_library_imports_without_fcntl_and_the_posix_signals():
    code = ("import pkgutil, importlib, minitensor, transformer\n"
            "names = [m.name for p in (minitensor, transformer) for m in pkgutil.walk_packages(p.__path__, p.__name__ + '.')]\n"
            "skipped = {'minitensor.cuda.emulator.__main__'}\n"  # a program, not a module to import
            "for n in names:\n    if n not in skipped: importlib.import_module(n)\n"
            "print(len(names))")
    done = _run(code)
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split()[-1]) > 50


@pytest.mark.parametrize("program", ["cli", "copy_task"])
def test_the_command_line_and_the_copy_task_answer_help_without_fcntl_and_the_posix_signals(program):
    code = ("from transformer.cli import run\nsys.exit(run(sys.argv[1:]))" if program == "cli" else
            "sys.argv[0] = 'examples/copy_task.py'\nimport runpy\nrunpy.run_path('examples/copy_task.py', run_name='__main__')")
    done = _run(code, "--help")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "usage:" in done.stdout


def test_the_copy_task_trains_and_writes_its_run_without_fcntl_and_the_posix_signals(tmp_path):
    run = tmp_path / "run"
    code = ("sys.argv[0] = 'examples/copy_task.py'\nimport runpy\n"
            "runpy.run_path('examples/copy_task.py', run_name='__main__')")
    done = _run(code, "--steps", "3", "--eval-every", "2", "--eval-size", "8", "--test-size", "8",
                "--stop-at", "none", "--no-progress", "--run-dir", run)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((run / "summary.json").read_text())["steps"] == 3
