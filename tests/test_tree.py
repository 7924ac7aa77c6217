"""The tests mirror the package tree: the tests of ``minitensor/ops/softmax.py`` live in
``tests/minitensor/ops/test_softmax.py``. This test lists the modules that have no test file of
their name yet, each with where it is tested now, so that the list can only shrink: a new module
without its test file fails here, and so does a module given one without leaving the list."""
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# module: where its tests are now (a file of another name, or through the modules that use it)
UNMIRRORED = {
    "minitensor/backend.py": "minitensor/cuda/test_cupy_paths.py, minitensor/test_errors.py (devices)",
    "minitensor/cuda/adam.py": "minitensor/cuda/test_kernels.py, test_emulator.py",
    "minitensor/cuda/bias_relu.py": "minitensor/cuda/test_kernels.py, test_emulator.py",
    "minitensor/cuda/build.py": "minitensor/cuda/test_cupy_paths.py, test_nvrtc.py",
    "minitensor/cuda/cast.py": "minitensor/cuda/test_kernels.py, test_emulator.py",
    "minitensor/cuda/cross_entropy.py": "minitensor/cuda/test_kernels.py, test_emulator.py",
    "minitensor/cuda/dropout.py": "minitensor/cuda/test_kernels.py, test_emulator.py",
    "minitensor/cuda/flash_attention.py": "minitensor/cuda/test_kernels.py, test_emulator.py",
    "minitensor/cuda/layer_norm.py": "minitensor/cuda/test_kernels.py, test_emulator.py",
    "minitensor/cuda/loss_scale.py": "minitensor/cuda/test_kernels.py, test_emulator.py",
    "minitensor/cuda/memory.py": "transformer/test_cuda_training.py (peak memory)",
    "minitensor/cuda/softmax.py": "minitensor/cuda/test_kernels.py, test_emulator.py",
    "minitensor/functional.py": "every op test (F.*), minitensor/ops/test_compare.py (Tensor's operators)",
    "minitensor/ops/precision.py": "minitensor/test_amp.py",
    "minitensor/random.py": "minitensor/test_autograd.py, minitensor/ops/test_dropout.py (dropout's seeds)",
    "minitensor/tensor.py": "minitensor/test_autograd.py, minitensor/test_errors.py",
    "minitensor/testing.py": "the hypothesis strategies every op test draws from",
    "minitensor/threads.py": "minitensor/speed/test_rows.py, minitensor/test_optim.py, minitensor/speed/test_cpu.py",
    "transformer/cli.py": "transformer/test_cli_*.py",
    "transformer/commands.py": "transformer/test_cli_*.py",
    "transformer/config.py": "transformer/test_model_config.py, transformer/test_flags.py",
    "transformer/copytask.py": "transformer/test_copy_task.py",
    "transformer/download.py": "transformer/test_data.py, transformer/test_wmt14_data.py",
    "transformer/evaluate.py": "transformer/test_decoding.py, transformer/test_cli_decoding.py",
    "transformer/presets.py": "transformer/test_model_config.py, transformer/test_train.py",
    "transformer/progress.py": "transformer/test_copy_task.py, minitensor/test_profiler.py",
    "transformer/rundir.py": "transformer/test_cli_nothing_lost.py, transformer/test_cli_run_dirs.py",
    "transformer/schedule.py": "transformer/test_model_config.py, transformer/test_train.py",
    "transformer/settings.py": "transformer/test_flags.py, transformer/test_model_config.py",
    "transformer/wmt14.py": "transformer/test_wmt14_data.py",
}


def modules() -> list[str]:
    """Every module of the two packages, as a path from the repository root (no __init__ or __main__)."""
    return sorted(str(p.relative_to(ROOT)) for package in ("minitensor", "transformer")
                  for p in (ROOT / package).rglob("*.py") if p.name not in ("__init__.py", "__main__.py"))


def mirror_of(module: str) -> Path:
    """Where a module's tests belong: tests/<its folder>/test_<its name>."""
    path = Path(module)
    return ROOT / "tests" / path.parent / f"test_{path.name}"


def test_every_module_has_a_test_file_of_its_name_or_is_listed_with_where_it_is_tested():
    unmirrored = {m for m in modules() if not mirror_of(m).exists()}
    assert sorted(unmirrored - set(UNMIRRORED)) == [], "a module without a test file of its name"
    assert sorted(set(UNMIRRORED) - unmirrored) == [], "listed, but it has a test file of its name (or is gone)"


def test_the_listed_places_exist():
    for where in UNMIRRORED.values():
        for name in (w.split(" (")[0].strip() for w in where.split(",")):
            if name.endswith(".py") and "*" not in name and "/" in name:
                assert (ROOT / "tests" / name).exists(), name


# ---------------------------------------------------------------- the reference core and the speed layer
SPEED_LAYER = ("minitensor.speed", "minitensor.cuda", "minitensor.threads", "minitensor.blas", "minitensor.allocator")
REFERENCE_CORE = ["minitensor/tensor.py", "minitensor/autograd.py", "minitensor/routes.py", "minitensor/functional.py",
                  "minitensor/gradcheck.py", "minitensor/random.py", "minitensor/errors.py", "minitensor/optim.py",
                  "minitensor/ops/*.py", "minitensor/nn/*.py"]
# the model as the paper writes it: its fused forms are transformer/fused.py's
WRITTEN_MODEL = ["transformer/attention.py", "transformer/layers.py", "transformer/model.py", "transformer/embedding.py"]


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, at its top or inside a function, as an absolute dotted name
    (``from .. import cuda`` gives minitensor.cuda; ``from .x import y`` gives the package.x)."""
    import ast  # noqa: PLC0415

    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    package = parts if path.name == "__init__.py" else parts[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found.add(module)
            found |= {f"{module}.{a.name}" for a in node.names}
    return found


def speed_imports(path: Path) -> set[str]:
    """The modules of the speed layer ``path`` imports (minitensor.cuda, minitensor.speed.rows, ...)."""
    return {".".join(m.split(".")[:3 if m.startswith("minitensor.speed.") else 2])
            for m in imported_modules(path) if m.startswith(SPEED_LAYER)}


def test_the_reference_core_and_the_written_model_import_nothing_of_the_speed_layer():
    core = sorted({p for pattern in REFERENCE_CORE + WRITTEN_MODEL for p in ROOT.glob(pattern)
                   if p.name != "__init__.py"})
    assert len(core) > 19
    found = {str(p.relative_to(ROOT)): speed_imports(p) for p in core}
    assert {k: v for k, v in found.items() if v} == {}


def test_only_the_command_line_reads_the_parsed_flags():
    """The library (the model, the data, training) takes plain settings (TrainSettings,
    DataSettings), never argparse's namespace: no function outside cli.py and commands.py has a
    parameter named args."""
    import ast  # noqa: PLC0415

    takers = set()
    for path in sorted((ROOT / "transformer").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                    "args" in [a.arg for a in node.args.args + node.args.kwonlyargs] and node.name != "parse_args":
                takers.add(path.name)
    assert takers == {"commands.py"}
