"""Small helpers shared by the tests."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import minitensor as mt


def leaf(array, device="cpu", grad=True):
    """A float64 (or given-dtype) leaf tensor on ``device``."""
    return mt.tensor(np.asarray(array), requires_grad=grad, device=device)


def close(tensor, expected, atol=1e-10, rtol=1e-7):
    np.testing.assert_allclose(tensor.numpy() if isinstance(tensor, mt.Tensor) else tensor, expected, atol=atol, rtol=rtol)


def translation_batch(rng, B=5, S=11, T=9, V=37):
    """(src, tgt_in, tgt_out) token ids for a vocabulary of V, with some padding (id 0)."""
    src = rng.integers(3, V, (B, S))
    tgt = rng.integers(3, V, (B, T + 1))
    src[1, 7:] = 0
    tgt[2, 6:] = 0
    return src, tgt[:, :-1], tgt[:, 1:]


# The Multi30k files the tests read: $MULTI30K_DIR (conftest.py points it at ../shared/data/multi30k
# when that exists), else that folder; tests that need them skip when it is missing
MULTI30K = Path(os.environ.get("MULTI30K_DIR") or Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k")
needs_multi30k = pytest.mark.skipif(not (MULTI30K / "train.en.gz").exists(),
                                    reason=f"no Multi30k files in {MULTI30K}: set MULTI30K_DIR")


def require(condition: bool, reason: str) -> None:
    """Skip the test when ``condition`` is false, except in CI (``MINITENSOR_STRICT_TESTS=1``,
    set by .ci/run), where what CI installs must be there: there it fails instead."""
    if condition:
        return
    if os.environ.get("MINITENSOR_STRICT_TESTS") == "1":
        pytest.fail(f"required in CI: {reason}")
    pytest.skip(reason)


def strict_json(text: str):
    """json.loads that refuses NaN and Infinity, as strict readers (jq, browsers) do."""
    def refuse(name):
        raise ValueError(f"{name} is not JSON")
    return json.loads(text, parse_constant=refuse)


# ---------------------------------------------------------------------------- the command line
REPO = Path(__file__).resolve().parents[1]
# a model that trains in seconds: the subprocess tests of the command line train it
SMALL = ["--data-dir", str(MULTI30K), "--limit", "300", "--vocab-size", "250", "--d-model", "32", "--n-heads", "2",
         "--d-ff", "64", "--layers", "1", "--max-tokens", "800", "--warmup", "10", "--eval-every", "1000",
         "--bleu-sentences", "0", "--no-progress"]


def cli(*args, env=None, code=None, stdin=None, timeout=300):
    """Run ``python -m transformer ARGS`` (or ``python -c CODE ARGS``) with ``stdin`` (bytes or
    text) as its input; (exit status, stdout, stderr)."""
    cmd = [sys.executable, *(["-c", code] if code else ["-m", "transformer"]), *map(str, args)]
    binary = isinstance(stdin, bytes)
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=not binary, timeout=timeout,
                       input=stdin if stdin is not None else ("" if not binary else b""),
                       env={**os.environ, "MINITENSOR_DEBUG": "0", **(env or {})})
    out, err = (p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")) if binary else (p.stdout, p.stderr)
    return p.returncode, out, err


def first_error_line(stderr: str) -> str:
    """The first line the CLI itself printed (the BLAS note and skipped-checkpoint notes aside)."""
    lines = [x for x in stderr.splitlines() if x.startswith("error:") or x.startswith("stopped at")]
    assert lines, stderr
    return lines[0]


def assert_clean(status, stderr, expected_status, expected_start):
    """Exit status ``expected_status``, no traceback, and a first error line that starts as expected."""
    assert status == expected_status, stderr
    assert "Traceback" not in stderr
    assert first_error_line(stderr).startswith(expected_start), stderr


def copy_run(run: Path, tmp_path: Path) -> Path:
    """A copy of a run directory (``tmp_path/run``), for a test that changes what is in it."""
    shutil.copytree(run, tmp_path / "run")
    return tmp_path / "run"


# ``python -c PAUSING ARGS``: the command line, stopped (SIGSTOP, to itself) at the $PAUSE_NTH
# (default 1) write of a name that matches the regular expression $PAUSE_AT: just after os.open
# creates it (O_CREAT), just after flock locks it, or just before os.replace, os.link or
# os.rename puts a file under it. $ARCHIVES (JSON) stands in for WMT14's table of archives.
PAUSING = """
import fcntl, json, os, re, signal, sys
pattern, nth, seen, opened = re.compile(os.environ.get("PAUSE_AT", "^$")), int(os.environ.get("PAUSE_NTH", "1")), [0], {}
def pause(path):
    if pattern.search(str(path)):
        seen[0] += 1
        if seen[0] == nth:
            os.kill(os.getpid(), signal.SIGSTOP)
def before(f):
    def call(source, dest, *a, **k):
        pause(dest)
        return f(source, dest, *a, **k)
    return call
def created(f):
    def call(path, flags, *a, **k):
        fd = f(path, flags, *a, **k)
        opened[fd] = path
        if flags & os.O_CREAT:
            pause(path)
        return fd
    return call
def locked(f):
    def call(fd, operation):
        done = f(fd, operation)
        if operation & fcntl.LOCK_EX and fd in opened:
            pause(opened[fd])
        return done
    return call
os.replace, os.link, os.rename, os.open = before(os.replace), before(os.link), before(os.rename), created(os.open)
fcntl.flock = locked(fcntl.flock)
from transformer import wmt14
if os.environ.get("ARCHIVES"):
    wmt14.ARCHIVES = {n: wmt14.Archive(*a) for n, a in json.loads(os.environ["ARCHIVES"]).items()}
from transformer.cli import run
sys.exit(run(sys.argv[1:]))
"""


def default_sigint() -> None:
    """For ``preexec_fn``: the child starts with SIGINT at its default, whatever this process has.
    A test run as a background job of a script (``pytest &``) has SIGINT ignored, and an ignored
    signal is inherited across exec: Python would then keep ignoring it, as ``nohup`` intends."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(*args, pause_at: str = "^$", nth: int = 1, stdin=subprocess.DEVNULL, env=None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", PAUSING, *map(str, args)], cwd=REPO, text=True, stdin=stdin,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "MINITENSOR_DEBUG": "0", "PAUSE_AT": pause_at, "PAUSE_NTH": str(nth),
                                 **(env or {})})


def stopped(proc: subprocess.Popen, timeout: float = 240) -> bool:
    """Wait until ``proc`` has stopped itself (True), or ended (False)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            return False
        with open(f"/proc/{proc.pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "T":
                return True
        time.sleep(0.02)
    proc.kill()
    raise AssertionError("the command neither stopped nor ended")


def resume(proc: subprocess.Popen, timeout: float = 240) -> tuple[int, str, str]:
    proc.send_signal(signal.SIGCONT)
    if proc.stdin is not None and proc.stdin.closed:
        proc.stdin = None  # (its input was given whole before it stopped)
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def torch_or_skip():
    """PyTorch, for the tests that compare with it or hand it tensors: never a dependency of the
    project, installed by .ci/run (so in CI its absence fails) and by hand elsewhere."""
    try:
        import torch  # noqa: PLC0415
    except ImportError:
        require(False, "PyTorch is not installed (pip install torch; CI installs torch==2.13.0, the CPU build)")
    return torch
