"""benchmarks/gpu_session.sh proves before it times: a step that fails or outlives its limit ends
the session with the step named and its log's tail, and nothing after it runs; the first run's
limits fit a 10-minute GPU session. Driven here with a stand-in for Python (no GPU needed)."""
from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_session.sh"


def session(tmp_path: Path, what: str, python_body: str, **env) -> subprocess.CompletedProcess:
    """Run ``gpu_session.sh what`` with PYTHON a shell script of ``python_body`` ("$*": its arguments)."""
    fake = tmp_path / "python"
    fake.write_text("#!/usr/bin/env bash\n" + python_body + "\n")
    fake.chmod(0o755)
    full = {**os.environ, "PYTHON": str(fake), "OUT": str(tmp_path / "out"), **env}
    # a session of its own, so that a script gone wrong is ended whole (its steps are subshells)
    proc = subprocess.Popen(["bash", str(SCRIPT), what], cwd=ROOT, env=full, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_the_first_run_goes_through_its_four_steps_within_six_minutes_of_limits(tmp_path):
    done = session(tmp_path, "first", 'echo "ran: $*"')
    assert done.returncode == 0, done.stderr
    logs = sorted(p.name for p in (tmp_path / "out").glob("first_*.log"))
    assert logs == ["first_attention.log", "first_references.log", "first_step.log", "first_tests.log"]
    limits = [int(n) for p in (tmp_path / "out").glob("first_*.log") for n in re.findall(r"\(limit (\d+)s", p.read_text())]
    assert len(limits) == 4 and all(n > 0 for n in limits) and sum(limits) <= 360, limits
    attention = (tmp_path / "out" / "first_attention.log").read_text()
    assert "--attention-dtypes bfloat16 --lengths 1024,4096" in attention
    assert "--precisions bf16" in (tmp_path / "out" / "first_step.log").read_text()


def test_a_failing_step_ends_the_session_naming_it_and_nothing_after_it_runs(tmp_path):
    body = 'echo "ran: $*"; if [[ "$*" == *benchmarks/kernels.py* ]]; then echo "the flash_wgmma route differs"; exit 1; fi'
    done = session(tmp_path, "first", body)
    assert done.returncode == 1
    assert "stopping: 'attention in bf16 at 1024 and 4096 keys, beside SDPA' failed (rc=1)" in done.stderr
    assert "the flash_wgmma route differs" in done.stderr  # the tail of the step's log
    assert not (tmp_path / "out" / "first_step.log").exists()


def test_a_step_past_its_limit_is_stopped_and_ends_the_session(tmp_path):
    done = session(tmp_path, "first", "sleep 30", LIMIT_TESTS="1")
    assert done.returncode == 1 and "failed (rc=124)" in done.stderr
    assert not (tmp_path / "out" / "first_references.log").exists()


@pytest.mark.parametrize("what", ["kernels", "step"])
def test_every_mode_s_steps_stop_the_session_on_failure(tmp_path, what):
    done = session(tmp_path, what, "exit 3")
    assert done.returncode == 1 and "failed (rc=3)" in done.stderr
