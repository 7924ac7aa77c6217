"""Every name expression the launchers can ask for compiles with NVRTC, under the options
CuPy 14 passes for a ``RawModule``, for sm_80 (A100) and sm_90 (H100).

On a GPU the kernels are compiled by NVRTC, not nvcc, and NVRTC needs no GPU: the CuPy wheel
and NVIDIA's NVRTC wheel are enough (``pip install -e ".[nvrtc]"``, which CI installs). The
test fails on any compile error and on any name expression NVRTC cannot lower to a symbol.
"""
from concurrent.futures import ThreadPoolExecutor

import pytest

from minitensor import threads
from minitensor.cuda import cross_entropy, flash_attention, layer_norm, softmax, sources

from ...helpers import require
from .test_sources import LAUNCHERS

ARCHS = ("80", "90")


def _cupy_compiler():
    """CuPy's compiler module, when CuPy imports and can load NVRTC (no GPU needed)."""
    try:
        from cupy.cuda import compiler  # noqa: PLC0415

        compiler._get_nvrtc_version()
        return compiler
    except Exception as e:  # ImportError, or NVRTC missing
        return e


def cupy_nvrtc_options(compiler, arch: str, user: tuple = ()) -> tuple[tuple, str]:
    """(options, output kind) as CuPy 14.2 builds them for a RawModule(options=``user``) on compute
    capability ``arch``: ``assemble_cupy_compiler_options`` (the user's, C++17, CCCL and CUDA include paths), then
    ``_compile_with_cache_cuda`` (``-ftz=true``) and ``_compile_using_nvrtc_no_warning``
    (``-arch=sm_XX`` for a cubin, ``--device-as-default-execution-space``, ``--pch`` where
    NVRTC has it). CuPy asks the device for ``arch``; here it is given."""
    from cupy._core import core  # noqa: PLC0415

    options = core.assemble_cupy_compiler_options(user) + ("-ftz=true",)
    if not compiler._use_ptx and int(arch) <= int(compiler._get_max_compute_capability()):
        options, method = options + (f"-arch=sm_{arch}",), "cubin"
    else:
        options, method = options + (f"-arch=compute_{arch}",), "ptx"
    options += ("--device-as-default-execution-space",)
    major, minor = compiler._get_nvrtc_version()
    if (major >= 13 or (major == 12 and minor >= 8)) and compiler._use_pch:
        options += ("--pch",)
    return options, method


@pytest.fixture(scope="module")
def compiled():
    """{(arch, source): (binary, {name expression: lowered name})}, compiled a job per core this
    process may use (NVRTC releases the GIL)."""
    compiler = _cupy_compiler()
    require(not isinstance(compiler, Exception), f"CuPy with NVRTC is not installed ({compiler!r}); "
                                                 "pip install -e '.[nvrtc]'")

    def one(job):
        arch, filename = job
        options, method = cupy_nvrtc_options(compiler, arch)
        program = compiler._NVRTCProgram(sources.source(filename), "kern.cu",
                                         name_expressions=sources.instantiations(filename), method=method)
        return job, program.compile(options)

    jobs = [(arch, f) for f in sources.SOURCES for arch in ARCHS]
    with ThreadPoolExecutor(max_workers=threads.count()) as pool:
        return dict(pool.map(one, jobs))


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("filename", sources.SOURCES)
def test_every_instantiation_compiles_with_nvrtc_under_cupys_options(compiled, arch, filename):
    binary, mapping = compiled[(arch, filename)]
    expressions = sources.instantiations(filename)
    assert binary[:4] == b"\x7fELF"                      # a cubin for sm_XX, as CuPy loads it
    assert set(mapping) == set(expressions)
    for expr in expressions:                             # each lowered to a kernel symbol in the cubin
        lowered = mapping[expr]
        assert lowered.startswith("_Z") and lowered.encode() in binary, expr


def test_instantiations_cover_every_name_a_launcher_can_ask_for():
    """What the NVRTC and nvcc tests compile is everything the launchers can request: every
    row length, key count and head size their applies() accepts, in every dtype."""
    compiled = {e for m in LAUNCHERS.values() for e in m.instantiations()}
    for t in ("float", "f16", "bf16", "double"):
        for d in range(1, (layer_norm.MAX_D_FLOAT64 if t == "double" else 32 * layer_norm.MAX_ITEMS) + 1):
            assert set(layer_norm.names(t, d)) <= compiled, (t, d)
        for tk in range(1, 32 * softmax.MAX_ITEMS + 1):
            assert set(softmax.names(t, tk)) <= compiled, (t, tk)
    for t, sizes in flash_attention.HEAD_SIZES.items():
        for d in range(1, max(sizes) + 1):
            assert set(flash_attention.names(t, d)) <= compiled, (t, d)
    wgmma = set(flash_attention.wgmma_instantiations())   # the tensor-core kernels at any query count
    for t in flash_attention.TC_TYPES:
        for d in flash_attention.TC_TILES:
            for tq in (1, flash_attention.TC_TWO_BLOCKS_FROM - 1, flash_attention.TC_TWO_BLOCKS_FROM, 4096):
                assert set(flash_attention.names(t, d, Tq=tq)) <= compiled, (t, d, tq)
                if d in flash_attention.WG_HEAD_SIZES:
                    assert set(flash_attention.names(t, d, Tq=tq, wg=True)) <= wgmma, (t, d, tq)
            assert set(flash_attention.one_pass_names(t, d)) <= compiled, (t, d)   # the one-pass backward
            if d in flash_attention.WG_HEAD_SIZES:
                assert flash_attention.one_pass_names(t, d, wg=True)[1] in wgmma, (t, d)
    for t in ("float", "f16", "bf16", "double"):  # one pair per dtype, whatever the row length
        assert set(cross_entropy.names(t)) <= compiled, t


def test_the_wgmma_kernels_compile_for_sm90a_under_cupys_options():
    """The flash kernels' wgmma instantiations compile with NVRTC under the options CuPy builds
    for RawModule(options=build.SM90A) on a compute capability 9.0 device (CuPy's -arch=sm_90
    after ours): NVRTC targets sm_90a, where wgmma exists, and lowers every name."""
    from minitensor.cuda import build  # noqa: PLC0415

    compiler = _cupy_compiler()
    require(not isinstance(compiler, Exception), f"CuPy with NVRTC is not installed ({compiler!r})")
    options, method = cupy_nvrtc_options(compiler, "90", build.SM90A)
    assert options.index("-arch=sm_90a") < options.index("-arch=sm_90")
    expressions = flash_attention.wgmma_instantiations()
    program = compiler._NVRTCProgram(sources.source(flash_attention.TC_SOURCE), "kern.cu", name_expressions=expressions,
                                     method=method)
    binary, mapping = program.compile(options)
    assert binary[:4] == b"\x7fELF" and b"sm_90a" in binary
    assert set(mapping) == set(expressions)
    for expr in expressions:
        assert mapping[expr].encode() in binary, expr
