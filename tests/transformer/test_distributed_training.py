"""Data-parallel training over MPI on the CPU: 2 ranks each on their share of the batches make
the same updates as 1 process on all of them (padding and uneven token counts included), and a
2-rank run checkpoints and resumes, under any world size."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from transformer import data
from transformer.batching import token_batches
from transformer.checkpoint import load_checkpoint, step_checkpoints
from transformer.cli import main
from transformer.tokenizer import Tokenizer

from ..minitensor.test_distributed import mpiexec

from ..helpers import MULTI30K, needs_multi30k

REPO = Path(__file__).resolve().parents[2]
pytestmark = [needs_multi30k,
              pytest.mark.skipif(mpiexec() is None, reason="no mpiexec (pip install -e '.[mpi]')")]


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory):
    en, de = data.multi30k("train", root=MULTI30K)
    folder = tmp_path_factory.mktemp("spm")
    Tokenizer.train(en[:240] + de[:240], folder / "spm", vocab_size=250)
    return folder / "spm.model"


def args(run, *extra):
    return ["train", "--run-dir", str(run), "--data-dir", str(MULTI30K), "--limit", "240", "--d-model", "32",
            "--n-heads", "2", "--d-ff", "64", "--layers", "1", "--dropout", "0.0", "--max-tokens", "700",
            "--warmup", "4", "--eval-every", "1000", "--save-every", "2", "--no-progress",
            # no cool-down: it follows --max-steps, which the resumed runs here change
            "--cooldown", "0", *extra]


def run_dir(tmp_path, name, spm_model):
    run = tmp_path / name
    run.mkdir()
    shutil.copy(spm_model, run / "spm.model")  # one BPE model for every run
    return run


def two_ranks(run, *extra):
    cmd = [mpiexec(), "-n", "2", sys.executable, "-m", "transformer", *args(run, "--distributed", *extra)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def weights(run, step):
    return load_checkpoint(run / f"checkpoint_{step}.npz")["model"]


def assert_same_weights(a, b):
    """Equal to float32 round-off, except the key-projection biases: their exact gradient is 0
    (q·b_k adds the same number to every score of a query, and softmax ignores that), so what
    they receive is round-off, which Adam's normalisation turns into steps of size ~lr."""
    assert sorted(a) == sorted(b)
    compared = 0
    for k in a:
        if k.endswith("w_k.bias"):
            continue
        np.testing.assert_allclose(a[k], b[k], rtol=2e-4, atol=2e-5, err_msg=k)
        compared += 1
    assert compared == len(a) - 3


def test_two_ranks_equal_one_process_with_the_whole_batch(tmp_path, spm_model):
    single = run_dir(tmp_path, "single", spm_model)
    main(args(single, "--update-freq", "2", "--max-steps", "6"))
    dp = run_dir(tmp_path, "dp", spm_model)
    two_ranks(dp, "--update-freq", "1", "--max-steps", "6")
    assert_same_weights(weights(single, 6), weights(dp, 6))
    single_log, dp_log = (
        [json.loads(x) for x in (r / "metrics.jsonl").read_text().splitlines()] for r in (single, dp))
    assert [r["step"] for r in dp_log] == list(range(1, 7))  # rank 0 alone wrote the log
    np.testing.assert_allclose([r["loss"] for r in single_log], [r["loss"] for r in dp_log], rtol=1e-5)


def test_the_ranks_shares_are_uneven_in_size_and_tokens(spm_model, tmp_path):
    """What the equivalence above covers: the two batches of an update differ in sentences,
    padding and target tokens, so a per-rank mean (instead of the global token count) would fail."""
    run = run_dir(tmp_path, "probe", spm_model)
    main(args(run, "--max-steps", "1"))
    lengths = np.diff(np.load(run / "cache" / "train" / "tgt.offsets.npy"))   # the trainer's cached ids
    src_lengths = np.diff(np.load(run / "cache" / "train" / "src.offsets.npy"))
    batches = token_batches(src_lengths, lengths, 700, seed=1 * 100_003 + 0)
    tokens = [int(sum(lengths[i] + 1 for i in b)) for b in batches[:12]]
    assert len(set(len(b) for b in batches[:12])) > 1 and len(set(tokens)) > 1


def test_two_rank_run_checkpoints_and_resumes_in_any_world_size(tmp_path, spm_model):
    reference = run_dir(tmp_path, "reference", spm_model)
    main(args(reference, "--update-freq", "2", "--max-steps", "8"))
    dp = run_dir(tmp_path, "dp", spm_model)
    two_ranks(dp, "--max-steps", "4")
    assert [p.name for p in step_checkpoints(dp)] == ["checkpoint_2.npz", "checkpoint_4.npz"]
    two_ranks(dp, "--max-steps", "6", "--resume")                        # 2 ranks resume a 2-rank run
    main(args(dp, "--update-freq", "2", "--max-steps", "8", "--resume"))   # 1 process takes over
    assert_same_weights(weights(reference, 8), weights(dp, 8))
