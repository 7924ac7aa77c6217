"""The project as a user installs it: a wheel built from this checkout, installed with its
dependencies into a fresh virtual environment, run from a folder outside the checkout; and a
source distribution that carries the tests, lessons and examples whole.

Building fetches the build backend, and the fresh environment its dependencies, from the
package index: without one these tests skip (in CI, where the index is reachable, they fail).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.helpers import require

ROOT = Path(__file__).resolve().parents[1]
VERSION = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
pytestmark = pytest.mark.xdist_group("packaging")  # one build of the distributions for the module's tests


def _run(*cmd, cwd: Path, env=None, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def dists(tmp_path_factory) -> Path:
    """The sdist and the wheel of this checkout (``python -m build``)."""
    out = tmp_path_factory.mktemp("dist")
    try:
        import build  # noqa: F401, PLC0415
    except ImportError:
        require(False, "the 'build' package is not installed (pip install -e '.[test]')")
    done = _run(sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", out, ROOT, cwd=out)
    require(done.returncode == 0, "could not build the distributions (is the package index reachable?):\n"
            + done.stdout[-1500:] + done.stderr[-1500:])
    return out


@pytest.fixture(scope="module")
def installed(dists, tmp_path_factory) -> dict:
    """A fresh venv with the wheel and its dependencies from the index, and a folder outside the
    checkout to run in, with no ``PYTHONPATH``."""
    home = tmp_path_factory.mktemp("user")
    venv = home / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    bin_dir = venv / ("Scripts" if os.name == "nt" else "bin")
    wheel = next(dists.glob("*.whl"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    done = _run(bin_dir / "python", "-m", "pip", "install", "--quiet", wheel, cwd=home, env=env)
    require(done.returncode == 0, "could not install the wheel's dependencies (is the package index reachable?):\n"
            + done.stdout[-1500:] + done.stderr[-1500:])
    work = home / "work"
    work.mkdir()
    return {"python": bin_dir / "python", "bin": bin_dir, "env": env, "work": work, "venv": venv}


def test_the_installed_wheel_is_the_one_imported_not_the_checkout(installed):
    done = _run(installed["python"], "-c", "import minitensor, transformer; print(minitensor.__file__); "
                "print(transformer.__file__); print(minitensor.__version__)", cwd=installed["work"], env=installed["env"])
    assert done.returncode == 0, done.stderr
    mt_file, tf_file, version = done.stdout.split()
    for f in (mt_file, tf_file):
        assert Path(f).is_relative_to(installed["venv"]), f"{f} is not the installed copy"
    assert version == VERSION  # pyproject.toml's version, read from the installed metadata


def test_the_console_script_and_the_module_print_the_version_and_help(installed):
    for cmd in ([installed["bin"] / "minitensor-transformer"], [installed["python"], "-m", "transformer"]):
        version = _run(*cmd, "--version", cwd=installed["work"], env=installed["env"])
        assert version.returncode == 0, version.stderr
        assert re.match(rf"minitensor-transformer {re.escape(VERSION)} \(Python \d", version.stdout), version.stdout
        helped = _run(*cmd, "--help", cwd=installed["work"], env=installed["env"])
        assert helped.returncode == 0 and "train" in helped.stdout and "translate" in helped.stdout, helped.stderr
    usage = _run(installed["bin"] / "minitensor-transformer", "train", cwd=installed["work"], env=installed["env"])
    assert usage.returncode == 2 and "minitensor-transformer train --help" in usage.stderr, usage.stderr


def test_the_installed_wheel_trains_the_copy_task_and_passes_a_gradcheck(installed):
    work = installed["work"]
    shutil.copy(ROOT / "examples" / "copy_task.py", work / "copy_task.py")  # as a user with the sdist's examples
    run = work / "runs" / "copy"
    done = _run(installed["python"], "copy_task.py", "--steps", "4", "--eval-every", "2", "--eval-size", "8",
                "--test-size", "8", "--stop-at", "none", "--no-progress", "--run-dir", run, cwd=work,
                env=installed["env"], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 4
    check = ("import numpy as np, minitensor as mt\n"
             "x = mt.tensor(np.random.default_rng(0).standard_normal((3, 5)), requires_grad=True)\n"
             "w = mt.tensor(np.random.default_rng(1).standard_normal((5, 4)), requires_grad=True)\n"
             "assert mt.gradcheck(lambda x, w: (x @ w).tanh().softmax(-1), [x, w])\n"
             "assert not mt.gradcheck(lambda x, w: mt.from_array((x @ w).data) * x.sum(), [x, w],\n"
             "                        raise_exception=False)  # a detached product: the check must see it\n"
             "print('gradcheck ok')\n")
    done = _run(installed["python"], "-c", check, cwd=work, env=installed["env"])
    assert done.returncode == 0 and "gradcheck ok" in done.stdout, done.stderr[-3000:]


def _tracked(folder: str) -> set[str]:
    done = _run("git", "ls-files", folder, cwd=ROOT)
    require(done.returncode == 0, "not a git checkout: the tracked files are unknown")
    return set(done.stdout.split())


def test_the_sdist_carries_the_tests_lessons_and_examples_whole_and_no_outputs(dists):
    sdist = next(dists.glob("*.tar.gz"))
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for folder in ("tests", "lessons", "examples", "minitensor", "transformer"):
        missing = sorted(_tracked(folder) - names)
        assert not missing, f"the sdist lacks {len(missing)} tracked files of {folder}/, e.g. {missing[:3]}"
    assert {"LICENSE", "README.md", "pyproject.toml", "tests/conftest.py"} <= names
    outputs = sorted(n for n in names if re.search(r"(^|/)(__pycache__|\.hypothesis|\.pytest_cache)/|\.(pyc|ipynb)$|"
                                                   r"^(runs|data|book|build|dist)/", n))
    assert not outputs, f"the sdist carries outputs: {outputs[:5]}"
