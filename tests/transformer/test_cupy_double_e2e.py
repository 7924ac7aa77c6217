"""The command line's ``--device cuda`` path, end to end, on the CuPy double (each run a process
started by ``python -m tests.cupy_double.run``): with dropout off it makes the CPU's updates;
mixed precision trains; checkpoints move between devices; translate, evaluate and average work;
two ranks over (the double's) NCCL make one process's updates with the whole batch; the GPU
lesson runs in full mode and the GPU benchmarks at a tiny size, without PyTorch."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from transformer.cli import main

from ..helpers import MULTI30K, needs_multi30k
from ..minitensor.test_distributed import mpiexec
from .test_distributed_training import REPO, args, assert_same_weights, run_dir, spm_model, weights  # noqa: F401

pytestmark = [needs_multi30k,
              pytest.mark.slow]


def on_double(*argv, devices=None, ranks=None, stdin=None, script=None, env=None):
    """Run ``python -m transformer *argv`` (or ``python script *argv``) with the double in place
    of CuPy; returns stdout."""
    cmd = [sys.executable, "-m", "tests.cupy_double.run"] + (["--devices", str(devices)] if devices else [])
    cmd += [str(script), *argv] if script else ["-m", "transformer", *argv]
    if ranks:
        cmd = [mpiexec(), "-n", str(ranks)] + cmd
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, input=stdin, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout


def losses(run):
    return {r["step"]: r["loss"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
            if "loss" in r}


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory, spm_model):  # noqa: F811
    run = run_dir(tmp_path_factory.mktemp("cpu"), "cpu", spm_model)
    main(args(run, "--device", "cpu", "--max-steps", "6"))
    return run


@pytest.fixture(scope="module")
def cuda_run(tmp_path_factory, spm_model):  # noqa: F811
    run = run_dir(tmp_path_factory.mktemp("cuda"), "cuda", spm_model)
    on_double(*args(run, "--device", "cuda", "--max-steps", "6"))
    return run


def test_cuda_makes_the_cpus_updates_with_dropout_off(cpu_run, cuda_run):
    cpu, cuda = losses(cpu_run), losses(cuda_run)
    assert sorted(cpu) == sorted(cuda) == list(range(1, 7))
    for step in cpu:
        assert cuda[step] == pytest.approx(cpu[step], rel=1e-5), step
    assert_same_weights(weights(cpu_run, 6), weights(cuda_run, 6))
    assert json.loads((cuda_run / "settings.json").read_text())["device"] == "cuda"


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_mixed_precision_trains_on_cuda(tmp_path, spm_model, precision):  # noqa: F811
    if precision == "bf16":
        pytest.importorskip("ml_dtypes")
    run = run_dir(tmp_path, precision, spm_model)
    on_double(*args(run, "--device", "cuda", "--precision", precision, "--max-steps", "12", "--lr-factor", "2"))
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    trained = [r["loss"] for r in records if "loss" in r and not r.get("skipped")]
    skipped = sum(bool(r.get("skipped")) for r in records)
    assert skipped < 6 and np.mean(trained[-3:]) < np.mean(trained[:3]) - 0.3, (skipped, trained)


@pytest.mark.parametrize("first, then", [("cuda", "cpu"), ("cpu", "cuda")])
def test_a_run_resumed_on_the_other_device_continues_as_if_uninterrupted(tmp_path, spm_model, cpu_run, first,  # noqa: F811
                                                                         then):
    run = run_dir(tmp_path, f"{first}-{then}", spm_model)
    for device, steps in ((first, "4"), (then, "6")):
        extra = ("--device", device, "--max-steps", steps) + (("--resume",) if steps == "6" else ())
        if device == "cuda":
            on_double(*args(run, *extra))
        else:
            main(args(run, *extra))
    resumed, straight = losses(run), losses(cpu_run)
    for step in (5, 6):
        assert resumed[step] == pytest.approx(straight[step], rel=1e-5), step


def test_translate_evaluate_and_average_run_on_cuda(cuda_run):
    out = on_double("translate", "--run-dir", str(cuda_run), "--device", "cuda", stdin="A dog runs in the park.\n")
    assert out.strip()
    out = on_double("evaluate", "--run-dir", str(cuda_run), "--device", "cuda", "--data-dir", str(MULTI30K),
                    "--limit", "8", "--beam", "2")
    assert "BLEU" in out
    avg = cuda_run / "average.npz"
    on_double("average", "--run-dir", str(cuda_run), "--last", "2", "--output", str(avg))
    assert avg.exists()


@pytest.mark.skipif(mpiexec() is None, reason="no mpiexec (pip install -e '.[mpi]')")
def test_two_cuda_ranks_over_nccl_make_one_processs_updates(tmp_path, spm_model):  # noqa: F811
    single = run_dir(tmp_path, "single", spm_model)
    main(args(single, "--update-freq", "2", "--max-steps", "4"))
    dp = run_dir(tmp_path, "dp", spm_model)
    on_double(*args(dp, "--distributed", "--device", "cuda", "--max-steps", "4"), ranks=2, devices=2)
    assert_same_weights(weights(single, 4), weights(dp, 4))
    assert json.loads((dp / "train_summary.json").read_text())["world_size"] == 2
    shutil.rmtree(dp)


def test_the_gpu_lesson_runs_in_full_mode_and_times_the_three_attention_routes(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "LESSON_SMOKE"}
    out = on_double(script=REPO / "lessons" / "23_gpu_backend.py",
                    env={**env, "LESSON_OUT": str(tmp_path), "MPLBACKEND": "Agg"})
    assert "T=256: flash" in out and "no GPU here" not in out  # the GPU branch ran, at full mode's first length
    assert (tmp_path / "23" / "results.json").exists()


def test_the_gpu_benchmarks_run_at_a_tiny_size_without_pytorch(tmp_path):
    step = on_double("--device", "cuda", "--batch", "2", "--length", "8", "--vocab", "64", "--layers", "1",
                     "--steps", "1", "--warmup", "0", "--precisions", "fp32,tf32,fp16,bf16", "--no-torch",
                     "--out", str(tmp_path / "step.json"),
                     script=REPO / "benchmarks" / "base_step_vs_torch.py")
    results = json.loads((tmp_path / "step.json").read_text())["results"]
    assert json.loads(step)["results"] == results
    assert sorted(results) == ["bf16", "fp16", "fp32", "tf32"]
    for row in results.values():
        assert row["minitensor"]["ms_per_step"] > 0 and row["minitensor"]["peak_memory_gib"] > 0
        assert row["minitensor"]["ms_per_step_spread"]["min"] <= row["minitensor"]["ms_per_step_spread"]["median"]
        assert "torch" not in row and "gpu_busy_ms" not in row["minitensor"]  # (PyTorch's CUDA profiler measures it)
    graphed = on_double("--device", "cuda", "--batch", "2", "--length", "8", "--vocab", "64", "--layers", "1",
                        "--steps", "3", "--warmup", "1", "--precisions", "bf16", "--no-torch", "--cuda-graphs",
                        script=REPO / "benchmarks" / "base_step_vs_torch.py")
    assert json.loads(graphed)["config"]["cuda_graphs"] and json.loads(graphed)["results"]["bf16"]["minitensor"]["ms_per_step"] > 0
    on_double("--device", "cuda", "--batch", "2", "--length", "8", "--vocab", "64", "--layers", "1", "--steps", "1",
              "--warmup", "0", "--precisions", "tf32,bf16", "--out", str(tmp_path / "profile.json"),
              script=REPO / "benchmarks" / "precision_profile.py")
    profile = json.loads((tmp_path / "profile.json").read_text())
    assert sorted(profile["profiles"]) == ["bf16", "tf32"] and len(profile["rates"]) == 8  # fp32 with and without tf32
    for prec in profile["profiles"].values():
        assert prec["wall_ms_per_step"] > 0 and "Linear" in {r["op"] for r in prec["rows"]}
    on_double("--tiny", "--out", str(tmp_path / "kernels.json"), script=REPO / "benchmarks" / "kernels.py")
    kernels = json.loads((tmp_path / "kernels.json").read_text())
    assert [(r["dtype"], r["T"]) for r in kernels["attention"]] == [
        (dtype, T) for dtype in ("float32", "bfloat16", "tf32") for T in (64, 128)]
    assert all(r[f"{route}_ms"] > 0 for r in kernels["attention"] for route in ("flash", "fused", "plain_cupy"))
    # every timed route was first checked against the two-pass mma.sync kernels (the first route: 0)
    assert all(r["flash_error_vs_two_pass"] == 0 for r in kernels["attention"])
    assert all(r["flash_one_pass_error_vs_two_pass"] < 1e-2 for r in kernels["attention"] if r["dtype"] == "bfloat16")
    assert {r["dtype"] for r in kernels["layer_norm"]} == {"float32", "float16"}
    assert [r["shape"] for r in kernels["cross_entropy"]] == [[8, 300]] and kernels["cross_entropy"][0]["forward_ms"] > 0
    assert set(kernels["base_step"]) >= {"kernels_on_ms", "kernels_off_ms"}
    assert {(r["product"], r["dtype"]) for r in kernels["products"]} == {
        (p, d) for p in ("attention scores", "projection") for d in ("float32", "float16", "bfloat16")}
    assert all(r["max_rel_error"] < 0.01 and r["cublas_ms"] > 0 for r in kernels["products"])
    assert {(r["op"], r["dtype"]) for r in kernels["fused"]} == {
        (op, d) for op in ("bias + ReLU", "dropout + residual + LayerNorm") for d in ("float32", "float16")}
    assert all(r["forward_backward_ms"] > 0 for r in kernels["fused"])


def test_the_kernel_benchmark_refuses_to_time_a_route_that_computes_something_else():
    """benchmarks/kernels.py's gate: a route whose output or gradients differ from the two-pass
    kernels' by more than a few roundings stops the script, naming the route, before it is timed."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import kernels  # noqa: PLC0415
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    rng = np.random.default_rng(0)
    reference = [rng.standard_normal((2, 4, 8)).astype(np.float32) for _ in range(4)]
    close = [x + 1e-3 * np.abs(x).max() for x in reference]
    assert kernels.check_against("flash_wgmma", close, reference, "bfloat16", 128) < 2e-3
    wrong = [reference[0], reference[1][:, :, ::-1], reference[2], reference[3]]   # dQ with its columns reversed
    with pytest.raises(SystemExit, match="flash_wgmma route's dQ differs .* not timed"):
        kernels.check_against("flash_wgmma", wrong, reference, "bfloat16", 128)
    with pytest.raises(SystemExit, match="output differs"):
        kernels.check_against("flash_wgmma", [np.full_like(reference[0], np.nan), *reference[1:]], reference,
                              "bfloat16", 128)

