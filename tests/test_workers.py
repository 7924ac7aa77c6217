"""The suite on pytest-xdist's workers (tests/conftest.py): each worker runs NumPy's BLAS,
minitensor's worker threads and the processes it starts on its share of the cores, and the tests
that need one costly fixture all run on one worker, which makes it once."""
import os
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest

from minitensor import blas, threads

from . import conftest
from .conftest import COSTLY_FIXTURES, ROOT


def test_a_worker_runs_on_its_share_of_the_cores_and_hands_it_to_the_processes_it_starts():
    n = conftest.workers()
    if n == 1 or conftest.USER_THREAD_VARIABLES:
        pytest.skip("the suite runs in one process (-n 0), or the user's thread variables decide")
    share = max(1, threads.cores() // n)
    assert threads.count() == share
    assert os.environ["OPENBLAS_NUM_THREADS"] == str(share)
    if blas.info()["library"] is not None:  # an OpenBLAS this module can reach
        assert blas.info()["threads"] == share
        child = subprocess.run([sys.executable, "-c", "from minitensor import blas; print(blas.info()['threads'])"],
                               capture_output=True, text=True, check=True).stdout
        assert int(child) == share


def test_the_tests_of_a_costly_fixture_are_one_group_so_one_worker_makes_it(request):
    if conftest.workers() == 1:
        pytest.skip("the suite runs in one process (-n 0): there are no groups")
    for item in request.session.items:
        for name in conftest.costly_fixtures(item):
            assert item.nodeid.endswith(f"@{name}"), item.nodeid  # pytest-xdist's loadgroup reads the suffix


def test_a_costly_fixture_asked_for_by_name_in_a_tests_body_counts_as_used():
    """The lessons' smoke test reads the book through request.getfixturevalue("built") (where the
    book can be built): it joins the book's group all the same; other fixtures asked for so do not."""
    from .lessons import test_lessons  # noqa: PLC0415

    smoke = test_lessons.test_lesson_runs_in_smoke_mode_prints_plain_numbers_records_results_and_saves_figures

    def asks_for_tmp_path(request):
        return request.getfixturevalue("tmp_path")

    assert conftest.costly_fixtures(SimpleNamespace(function=smoke, fixturenames=["lesson", "request"])) == {"built"}
    assert conftest.costly_fixtures(SimpleNamespace(function=asks_for_tmp_path, fixturenames=["request"])) == set()
    used = conftest.costly_fixtures(SimpleNamespace(function=asks_for_tmp_path, fixturenames=["compiled"]))
    assert used == {"compiled"}


@pytest.mark.parametrize("name", sorted(COSTLY_FIXTURES))
def test_each_costly_fixture_is_defined_where_the_list_says(name):
    """A renamed fixture would leave the list naming nothing, and its tests spread over the workers."""
    where = re.search(r"\((tests/\S+\.py)\)$", COSTLY_FIXTURES[name]).group(1)
    assert re.search(rf"^def {name}\(", (ROOT / where).read_text(), re.M), f"no fixture {name} in {where}"
