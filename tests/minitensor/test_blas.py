"""minitensor.blas: what NumPy's BLAS is and when OPENBLAS_CORETYPE holds it back."""
import os
import subprocess
import sys

import pytest

from minitensor import blas


def test_info_reports_the_loaded_openblas_core_and_threads():
    """With NumPy's PyPI wheels (the project's install) the BLAS is an OpenBLAS whose version,
    core name and thread count this module reads (through threadpoolctl)."""
    d = blas.info()
    if d["library"] is None or not d["library"].startswith("openblas"):
        pytest.skip(f"NumPy here is not built on OpenBLAS ({d['library']})")
    assert d["core"] and d["library"].split()[1][0].isdigit()  # "openblas 0.3.x"
    assert d["threads"] >= 1
    assert d["forced_core"] == (os.environ.get("OPENBLAS_CORETYPE") or None)


def test_set_threads_changes_the_count_the_blas_reports():
    """set_threads reaches NumPy's BLAS: the count read back is the one set, each time."""
    before = blas.info()["threads"]
    if before is None:
        pytest.skip("no BLAS that threadpoolctl reaches")
    try:
        for n in (1, 2, 1):
            assert blas.set_threads(n)
            assert blas.info()["threads"] == n
    finally:
        blas.set_threads(before)
    with pytest.raises(ValueError, match=">= 1"):
        blas.set_threads(0)


def test_advice_names_a_forced_avx2_core_on_an_avx512_cpu_and_only_then():
    forced = {"library": "OpenBLAS", "core": "Haswell", "threads": 2, "forced_core": "Haswell", "cpu_avx512": True}
    note = blas.advice(forced)
    assert note.startswith("note: OPENBLAS_CORETYPE=Haswell") and "AVX-512" in note
    assert blas.advice({**forced, "cpu_avx512": False}) is None       # the CPU could not do better
    assert blas.advice({**forced, "forced_core": None}) is None       # OpenBLAS chose by itself
    assert blas.advice({**forced, "core": "SkylakeX", "forced_core": "SkylakeX"}) is None  # AVX-512 kernels


def test_the_coretype_variable_decides_the_core_in_a_fresh_process():
    """OPENBLAS_CORETYPE is read when NumPy loads: a child started with Haswell reports Haswell
    (the property the advice relies on)."""
    if blas.info()["library"] is None:
        pytest.skip("not an OpenBLAS this module can query")
    env = {**os.environ, "OPENBLAS_CORETYPE": "Haswell"}
    out = subprocess.run([sys.executable, "-c", "from minitensor import blas; print(blas.info()['core'])"],
                         env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert out == "Haswell"
