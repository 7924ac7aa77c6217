"""A program that trains keeps freed array memory for reuse (glibc's malloc thresholds raised by
``allocator.from_environment()`` at its start); ``import minitensor`` alone changes nothing."""
import os
import subprocess
import sys
import textwrap

import pytest

import minitensor as mt

LINUX_GLIBC = sys.platform.startswith("linux") and os.confstr("CS_GNU_LIBC_VERSION") is not None

FAULTS = textwrap.dedent("""
    import resource, sys, numpy as np
    import minitensor
    if sys.argv[1] == "program":
        minitensor.allocator.from_environment()
    x = np.ones((1408, 128), np.float32)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(20):      # like a training step: many activations alive, then all freed
        ys = [x * 2.0 for _ in range(40)]          # 40 fresh 704 KiB arrays
        del ys
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before, minitensor.allocator.status()["applied"])
""")


def _faults(env_value: str, how: str = "program") -> tuple[int, bool]:
    """(page faults of 20 steps, whether the thresholds were raised) in a fresh process that
    imports minitensor and, as a ``program``, calls from_environment (or only imports)."""
    env = {**os.environ, "MINITENSOR_KEEP_FREED_MEMORY": env_value}
    out = subprocess.run([sys.executable, "-c", FAULTS, how], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    return int(out[0]), out[1] == "True"


@pytest.mark.skipif(not LINUX_GLIBC, reason="the thresholds are glibc's")
def test_a_program_raises_the_thresholds_so_freed_arrays_are_reused_without_page_faults():
    kept, applied = _faults("1")
    returned, not_applied = _faults("0")
    assert applied and not not_applied
    # without: the freed heap top is trimmed and every step's arrays are page-faulted in
    # again (176 pages of 4 KiB each)
    assert returned > 19 * 40 * 176 / 2, returned
    # with: only the first step's arrays fault in; later steps reuse them
    assert kept < 1.5 * 40 * 176 and returned > 10 * kept, (kept, returned)


BIG_STEP = textwrap.dedent("""
    import resource, numpy as np
    import minitensor
    minitensor.allocator.from_environment()
    before = None
    for step in range(4):    # a step that frees ~400 MB at its end (a multi30k-cpu update frees ~500)
        ys = [np.ones((20_000_000,), np.float32) for _ in range(5)]
        del ys
        if step == 0:
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
""")


@pytest.mark.skipif(not LINUX_GLIBC, reason="the thresholds are glibc's")
def test_a_step_that_frees_more_than_256_mib_gets_its_memory_back_without_page_faults():
    env = {**os.environ, "MINITENSOR_KEEP_FREED_MEMORY": "1"}
    later = int(subprocess.run([sys.executable, "-c", BIG_STEP], env=env, capture_output=True, text=True,
                               check=True).stdout)
    one_step_pages = 5 * 20_000_000 * 4 // 4096
    assert later < 0.05 * one_step_pages, later  # steps 2-4 reuse step 1's pages


def test_status_says_why_when_switched_off():
    env = {**os.environ, "MINITENSOR_KEEP_FREED_MEMORY": "0"}
    out = subprocess.run([sys.executable, "-c", "import minitensor; minitensor.allocator.from_environment(); "
                          "print(minitensor.allocator.status())"], env=env, capture_output=True, text=True,
                         check=True).stdout
    assert "'applied': False" in out and "MINITENSOR_KEEP_FREED_MEMORY=0" in out


@pytest.mark.skipif(not LINUX_GLIBC, reason="the thresholds are glibc's")
def test_importing_minitensor_leaves_the_processs_malloc_as_it_is():
    """A library has no process-wide effect of its own: importing it, even with the variable at 1,
    raises no threshold, and the freed arrays of every step fault in again."""
    faults, applied = _faults("1", how="import")
    returned, _ = _faults("0")
    assert not applied
    assert faults > returned / 2, (faults, returned)


def test_the_command_line_and_the_copy_task_example_raise_the_thresholds_at_their_start(monkeypatch, tmp_path):
    import importlib.util
    from pathlib import Path

    from transformer import cli
    asked = []
    monkeypatch.setattr(mt.allocator, "keep_freed_memory", lambda *a, **k: asked.append("keep") or True)
    monkeypatch.delenv("MINITENSOR_KEEP_FREED_MEMORY", raising=False)
    with pytest.raises(SystemExit):      # argparse's --help: the program started, and stops after the help
        cli.run(["--help"])
    assert asked == ["keep"]
    spec = importlib.util.spec_from_file_location("copy_task_example",
                                                  Path(__file__).parents[2] / "examples" / "copy_task.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    summary = dict(exact_match=1.0, token_accuracy=1.0, train_seconds=0.0, steps=0, parameters=0, stopped_by=None)
    monkeypatch.setattr(example, "train_copy_task", lambda settings: summary)
    example.main(["--run-dir", str(tmp_path)])
    assert asked == ["keep", "keep"]


RELEASE = textwrap.dedent("""
    import numpy as np
    import minitensor
    minitensor.allocator.from_environment()

    def resident_mib():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096 / 2**20

    ys = [np.ones((250_000,), np.float32) for _ in range(400)]   # 400 MB of 1 MB arrays, on the heap
    del ys
    kept = resident_mib()
    minitensor.allocator.release_free_memory()
    print(kept, resident_mib())
""")


@pytest.mark.skipif(not LINUX_GLIBC, reason="malloc_trim is glibc's")
def test_release_free_memory_hands_back_what_the_thresholds_keep():
    env = {**os.environ, "MINITENSOR_KEEP_FREED_MEMORY": "1"}
    kept, released = map(float, subprocess.run([sys.executable, "-c", RELEASE], env=env, capture_output=True, text=True,
                                               check=True).stdout.split())
    assert kept - released > 300, (kept, released)  # the freed 400 MB stayed resident until released
