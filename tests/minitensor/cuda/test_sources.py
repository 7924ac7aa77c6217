"""Every CUDA source compiles for sm_90 with nvcc, every instantiation a launcher can ask
for included, and the compiler's resource report shows what the launchers rely on.

Runs on any machine with nvcc (no GPU needed); skipped without it.
"""
import re
import shutil
import subprocess

import pytest

from minitensor import cuda
from minitensor.cuda import sources

NVCC = shutil.which("nvcc")
pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")

# each source's launcher, which lists the instantiations it can ask for (test_nvrtc.py compiles them too)
LAUNCHERS = {source: cuda.launcher(name) for name in cuda.KERNELS
             for source in getattr(cuda.launcher(name), "SOURCES", (cuda.launcher(name).SOURCE,))}
SMEM_LIMIT = 48 * 1024  # static shared memory per block without opting in


def test_every_source_has_a_launcher():
    assert set(LAUNCHERS) == set(sources.SOURCES)
    assert sorted(p.name for p in sources.FOLDER.glob("*.cu")) == sorted(sources.SOURCES)


def _compile(tmp_path, filename, exprs=None, arch="sm_90", log: list | None = None):
    """Compile ``filename`` for ``arch`` plus a function taking the address of every instantiation
    its launcher uses (or of ``exprs``); returns {mangled kernel name: resource line} from ptxas
    (and appends nvcc's whole report to ``log``)."""
    exprs = sources.instantiations(filename) if exprs is None else exprs
    text = sources.source(filename) + "\nvoid instantiate_all() {\n    void* kernels[] = {\n"
    text += "".join(f"        (void*)&{e},\n" for e in exprs) + "    };\n    (void)kernels;\n}\n"
    src = tmp_path / filename
    src.write_text(text)
    out = subprocess.run([NVCC, f"-arch={arch}", "-cubin", "-Xptxas", "-v", "-diag-suppress", "550", "-o",
                          str(tmp_path / "out.cubin"), str(src)], capture_output=True, text=True)
    assert out.returncode == 0, f"nvcc failed on {filename}:\n{out.stderr[-4000:]}"
    if log is not None:
        log.append(out.stderr)
    report, name = {}, None
    for line in out.stderr.splitlines():
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            name = m.group(1)
        elif name and ("spill" in line or "registers" in line):
            report[name] = report.get(name, "") + line
    assert len(report) == len(exprs), f"expected {len(exprs)} kernels in {filename}, ptxas reported {len(report)}"
    return report


def _first_template_argument(mangled: str) -> str:
    """The first template argument's code in an Itanium-mangled name ``_Z<len><name>I<args>E...``:
    'f' float, 'd' double, '3f16' / '4bf16' our 16-bit storage structs; '' for a kernel that
    is not a template (``philox_words``)."""
    m = re.match(r"_Z(\d+)", mangled)
    rest = mangled[m.end() + int(m.group(1)):]
    if not rest.startswith("I"):
        return ""
    return rest[1] if rest[1].isalpha() else re.match(r"\d+", rest[1:]).group(0)


@pytest.mark.parametrize("filename", sources.SOURCES)
def test_source_compiles_for_sm90_within_limits(tmp_path, filename):
    """nvcc accepts the source; every kernel fits the static 48 KB of shared memory; and the
    float32 and 16-bit kernels (the fast paths) spill no registers. The float64 versions
    exist for gradchecks only and may spill."""
    for kernel_name, line in _compile(tmp_path, filename).items():
        smem = int(re.search(r"(\d+) bytes smem", line).group(1)) if "smem" in line else 0
        assert smem <= SMEM_LIMIT, f"{kernel_name}: {smem} bytes of shared memory"
        if _first_template_argument(kernel_name) != "d":  # "d": double
            spills = [int(x) for x in re.findall(r"(\d+) bytes spill", line)]
            assert not any(spills), f"{kernel_name} spills registers: {line.strip()}"


def test_the_wgmma_kernels_compile_for_sm90a_within_limits_to_warpgroup_products(tmp_path):
    """The flash kernels' wgmma instantiations compile for sm_90a (the only target with wgmma),
    spill no registers and fit the static 48 KB, and ptxas keeps the products as written (no note
    C75xx: products serialised, or a wait or an arrive injected). In their SASS every product is a warpgroup
    product (HGMMA), but for the one-pass backward's dQ share, which stays on mma.sync (HMMA); and
    a kernel with two groups of products in flight waits for the older alone (a DEPBAR that leaves
    one running): all but the forward and dQ pass with one block of rows a warpgroup."""
    from minitensor.cuda import flash_attention  # noqa: PLC0415

    log = []
    for kernel_name, line in _compile(tmp_path, flash_attention.TC_SOURCE, flash_attention.wgmma_instantiations(),
                                      "sm_90a", log).items():
        assert int(re.search(r"(\d+) bytes smem", line).group(1)) <= SMEM_LIMIT, kernel_name
        assert not any(int(x) for x in re.findall(r"(\d+) bytes spill", line)), f"{kernel_name}: {line.strip()}"
    fallbacks = [line for line in log[0].splitlines() if re.search(r"\(C75\d\d\)", line)]
    assert not fallbacks, fallbacks   # e.g. C7514: the products serialised; C7517, C7519: a wait or arrive injected
    dump = shutil.which("cuobjdump")
    if dump:
        sass = subprocess.run([dump, "-sass", str(tmp_path / "out.cubin")], capture_output=True, text=True).stdout
        functions = re.split(r"\n\s*Function : ", sass)[1:]
        assert len(functions) == len(flash_attention.wgmma_instantiations())
        for function in functions:
            name = function.split()[0]
            one_pass, one_block = "ELb1ELb1E" in name, "Li1ELb1EEv" in name   # <..., true, true>; <..., 1, true>
            hmma = function.replace("HGMMA", "").count("HMMA")
            assert "HGMMA" in function and (hmma > 0 if one_pass else hmma == 0), (name, hmma)
            assert ("WARPGROUP.DEPBAR.LE gsb0, 0x1" in function) != one_block, name


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_the_tensor_core_products_compile_to_mma_sync(tmp_path, arch):
    """common.cuh's mma_16x8x16 (f16, bf16) and mma_16x8x8_tf32 are the PTX instructions
    they name: ptxas accepts them for sm_80 and sm_90, and the cubin holds HMMA instructions
    (test_kernels.py checks their fragments on a GPU against the emulator's model)."""
    from .test_kernels import MMA_TILE  # noqa: PLC0415

    text = sources.with_common(MMA_TILE) + (
        "\nvoid instantiate_all() {\n    void* kernels[] = {(void*)&mma_tile<f16>, (void*)&mma_tile<bf16>, "
        "(void*)&mma_tile_tf32};\n    (void)kernels;\n}\n")
    src = tmp_path / "mma.cu"
    src.write_text(text)
    cubin = tmp_path / "mma.cubin"
    out = subprocess.run([NVCC, f"-arch={arch}", "-cubin", "-o", str(cubin), str(src)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-4000:]
    dump = shutil.which("cuobjdump")
    if dump:
        sass = subprocess.run([dump, "-sass", str(cubin)], capture_output=True, text=True).stdout
        assert sass.count("HMMA") >= 3, sass[-2000:]
