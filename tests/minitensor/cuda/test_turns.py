"""minitensor/cuda/turns.py: the report of a wait for a turn that gave up, read by the host off the
update path. The kernels' side (common.cuh's bounded await_turn) is tested with the kernels, in
test_kernels.py (a wait that no block ends, on the emulator and a GPU) and test_emulator.py (the
one-pass backward whose blocks wait for one not started)."""
import numpy as np
import pytest

import minitensor as mt
from minitensor.cuda import emulator, turns


def test_a_stall_report_reaches_the_host_at_a_later_launch_and_never_makes_the_host_wait(cupy_double, monkeypatch):
    """minitensor.cuda.turns on the GPU route (the CuPy double): after_launch sends the report words
    to pinned host memory behind a launch and looks at them at a later one, so a report written
    on the device raises StalledTurns (naming the kernel, the turn, the flag and what it held) one
    launch after the copy that saw it, and nothing in it waits for the device (it runs under
    cupyx.allow_synchronize(False)); the report is then cleared, and mt.cuda.check_turns() reads at once."""
    import cupyx  # noqa: PLC0415

    monkeypatch.setattr(turns, "_watches", {})
    cp = cupy_double
    words = turns.stall_words(cp)
    report = cp.asarray(np.array([1, 3, 2, 5, 4], np.int32))   # as a block that gave up writes it
    message = r"a kernel: a block gave up waiting for turn 5 on the flag of row 3, tile 2, which held 4"
    with cupyx.allow_synchronize(False):
        turns.after_launch(cp, "a kernel", ("row", "tile"))
        words[...] = report
        turns.after_launch(cp, "a kernel", ("row", "tile"))   # read what the earlier copy saw; send again
        with pytest.raises(turns.StalledTurns, match=message):
            turns.after_launch(cp, "a kernel", ("row", "tile"))
        turns.after_launch(cp, "a kernel", ("row", "tile"))
        turns.after_launch(cp, "a kernel", ("row", "tile"))
    assert not words.get().any()
    words[...] = report
    with pytest.raises(turns.StalledTurns, match=message):
        mt.cuda.check_turns()
    mt.cuda.check_turns()


def test_check_turns_reads_every_device_that_ran_a_kernel_taking_turns(cupy_double, monkeypatch):
    """mt.cuda.check_turns (the trainer's, at the end of a run) does nothing where no kernel took
    turns (a CPU run), and raises a report that a device holds, on the GPU route and on the
    emulator alike."""
    monkeypatch.setattr(turns, "_watches", {})
    mt.cuda.check_turns()
    for xp in (cupy_double, emulator.arrays):
        turns.stall_words(xp)[...] = xp.asarray(np.array([1, 0, 1, 2, 1], np.int32))
        with pytest.raises(turns.StalledTurns, match="waiting for turn 2 on the flag of"):
            mt.cuda.check_turns()
        mt.cuda.check_turns()
