"""Shared test set-up: hypothesis profiles, the device fixture, the lesson kit on the path,
Multi30k from ../shared/data for the lessons unless MULTI30K_DIR says otherwise, and the
suite's share of the machine on each of pytest-xdist's workers (pyproject.toml's addopts)."""
import inspect
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

import minitensor as mt
from minitensor import distributed

# CI: derandomized (the same examples every run), no deadline (2 slow cores).
settings.register_profile("ci", derandomize=True, deadline=None, max_examples=50,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.register_profile("dev", deadline=None, max_examples=25, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lessons"))   # the lessons' kit (lessonkit) and their scripts, for the lesson tests
SHARED_MULTI30K = ROOT.parent / "shared" / "data" / "multi30k"
if "MULTI30K_DIR" not in os.environ and SHARED_MULTI30K.exists():
    os.environ["MULTI30K_DIR"] = str(SHARED_MULTI30K)   # tests never download: they read the shared copy

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def pytest_addoption(parser):
    parser.addoption("--cupy-double", action="store_true",
                     help="run with the strict CuPy double (tests/cupy_double) in place of CuPy: the GPU-marked "
                          "tests run on the CPU; CUPY_DOUBLE_DEVICES sets how many devices it shows (default 1)")
    parser.addoption("--fuzz-examples", type=int, default=None,
                     help="examples each command-line fuzzer tries (tests/transformer/test_cli_fuzz.py; default: "
                          "the bounded number CI runs)")
    parser.addoption("--all-mutants", action="store_true",
                     help="grade every mutant of the exercises' solutions (tests/lessons/test_mutants.py; default: a "
                          "sample of each exercise's)")
    parser.addoption("--fuzz-scale", type=int, default=1,
                     help="each command-line fuzzer tries this many times the examples CI runs")


# Fixtures too costly to make on every worker that runs a test needing them: the tests that use
# one run in one worker (pytest-xdist's loadgroup). Cheaper shared fixtures (a small trained run)
# are made once per worker instead.
COSTLY_FIXTURES = {
    "built": "the book, every lesson executed (tests/lessons/conftest.py)",
    "compiled": "every kernel compiled with NVRTC for two architectures (tests/minitensor/cuda/test_nvrtc.py)",
    "_compile_for_the_emulator_in_parallel": "the kernels' emulator builds (tests/minitensor/cuda/test_kernels.py)",
}


def costly_fixtures(item) -> set[str]:
    """The fixtures of COSTLY_FIXTURES that ``item`` uses: as arguments (or autouse), or asked for
    by name in its body (``request.getfixturevalue("built")``)."""
    used = COSTLY_FIXTURES.keys() & set(getattr(item, "fixturenames", ()))
    function = getattr(item, "function", None)
    if "getfixturevalue" in getattr(getattr(function, "__code__", None), "co_names", ()):
        source = inspect.getsource(function)
        used |= {n for n in COSTLY_FIXTURES if f'getfixturevalue("{n}")' in source}
    return used


# the thread variables the user set (before a worker sets its share), for tests/test_workers.py
USER_THREAD_VARIABLES = {v: os.environ[v] for v in distributed.THREAD_VARIABLES if os.environ.get(v)}


def workers() -> int:
    """How many pytest-xdist workers run the suite (1: it runs in one process)."""
    return int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))


def pytest_configure(config):
    if workers() > 1:
        # Workers share the cores as ranks on one machine do: else each worker's OpenBLAS starts a
        # thread per core, and its threads that wait for work spin on the cores the others need.
        # The processes the tests start (the command line, the lessons) inherit the share.
        if (share := distributed.share_cores(workers())) is not None:
            os.environ["OPENBLAS_NUM_THREADS"] = str(share)
    mt.allocator.from_environment()   # the suite trains as the programs do: freed arrays reused
    if config.getoption("--cupy-double"):
        from tests.cupy_double import install  # noqa: PLC0415

        install(devices=int(os.environ.get("CUPY_DOUBLE_DEVICES", "1")))


@pytest.fixture
def cupy_double():
    """The CuPy double with 2 devices in place of CuPy for one test (the installed one when the
    whole run is under --cupy-double), and whatever was there before put back afterwards."""
    from minitensor import backend  # noqa: PLC0415
    from tests.cupy_double import double  # noqa: PLC0415

    if double.installed():
        yield sys.modules["cupy"]
        return
    real = {n: m for n, m in sys.modules.items() if n.split(".")[0] in ("cupy", "cupyx", "cupy_backends")}
    cached = backend._cupy, backend._cupy_error                # what minitensor imported as cupy, if anything
    for n in real:
        del sys.modules[n]
    backend._cupy = backend._cupy_error = None
    try:
        yield double.install(devices=2)
    finally:
        double.uninstall()
        sys.modules.update(real)
        backend._cupy, backend._cupy_error = cached


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        for name in costly_fixtures(item):
            item.add_marker(pytest.mark.xdist_group(name))
    if config.getoption("--cupy-double"):
        for item in items:
            if (mark := item.get_closest_marker("hardware")) is not None:
                item.add_marker(pytest.mark.skip(reason=f"the CuPy double cannot model {mark.args[0]}"))
    if mt.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU / CuPy on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(params=DEVICES, scope="session")
def device(request):
    """Run a test once per device: "cpu" always, "cuda" when a GPU is present."""
    return request.param


@pytest.fixture(autouse=True)
def _seed():
    mt.manual_seed(0)
    np.random.seed(0)
    yield
