"""The arithmetic the benchmarks report with (benchmarks/base_step_vs_torch.py): a step's GPU
busy time as the union of its kernels' intervals, and the spread of a sitting's rounds."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import base_step_vs_torch as bench  # noqa: E402

sys.path.pop(0)


def kernel(ts: float, dur: float, cat: str = "kernel") -> dict:
    return {"cat": cat, "ts": ts, "dur": dur, "name": "k"}


def test_busy_time_is_the_union_of_the_gpu_s_intervals_in_milliseconds():
    trace = {"traceEvents": [kernel(0, 100), kernel(50, 100),          # overlapping: 0-150
                             kernel(400, 50, "gpu_memcpy"),             # a copy counts
                             kernel(1000, 10, "gpu_memset"),
                             {"cat": "cuda_runtime", "ts": 0, "dur": 5000},  # the host's launch calls do not
                             {"cat": "kernel", "ts": 2000}]}            # an instant without a duration neither
    assert bench.busy_ms(trace) == pytest.approx((150 + 50 + 10) / 1000)
    assert bench.busy_ms({"traceEvents": [{"cat": "cpu_op", "ts": 0, "dur": 9}]}) is None


def test_the_spread_of_rounds_is_in_milliseconds_around_the_median():
    s = bench.spread([0.010, 0.012, 0.011, 0.030])
    assert s == {"median": 11.5, "min": 10.0, "p25": 10.75, "p75": 16.5, "max": 30.0}
