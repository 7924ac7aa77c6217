"""The trainer's update, written as the textbook loop (forward, loss, backward, reduce, step,
with the division by tokens and the loss scale folded into Adam's pass), makes bit for bit the
weights that the old update made (tests/transformer/old_update.py): in float32, in float16
with loss scaling, with --update-freq 2, and on 2 MPI ranks."""
import subprocess
import sys
from pathlib import Path

import pytest

from transformer import TransformerConfig, data
from transformer.tokenizer import Tokenizer, encode_cached
from transformer.train import ParallelData, TrainSettings

from ..helpers import MULTI30K, needs_multi30k
from ..minitensor.test_distributed import mpiexec
from .old_update import run_both

pytestmark = needs_multi30k
REPO = Path(__file__).resolve().parents[2]


def settings(run_dir, **kw):
    model = TransformerConfig(250, d_model=32, n_heads=2, d_ff=64, n_encoder_layers=1, n_decoder_layers=1, dropout=0.1)
    base = dict(run_dir=str(run_dir), model=model, max_tokens=400, warmup=3, max_steps=5, eval_every=1000,
                bleu_sentences=0, save_every=1000, progress=False)
    return TrainSettings(**{**base, **kw})


def load_small(folder: Path):
    """A 300-pair slice of Multi30k and its 250-piece BPE model, made in ``folder`` once."""
    if not (folder / "spm.model").exists():
        en, de = data.multi30k("val", root=MULTI30K)
        Tokenizer.train(en[:300] + de[:300], folder / "spm", vocab_size=250)
    tok = Tokenizer(folder / "spm.model")
    en, de = data.multi30k("val", root=MULTI30K)
    return tok, ParallelData(encode_cached(tok, en[:300], folder / "en.npz"), encode_cached(tok, de[:300], folder / "de.npz"))


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    folder = tmp_path_factory.mktemp("loop")
    return folder, *load_small(folder)


@pytest.mark.parametrize("precision, update_freq", [("fp32", 1), ("fp16", 1), ("fp32", 2)])
def test_the_loop_makes_the_old_updates_weights_bit_for_bit(small, tmp_path, precision, update_freq):
    folder, tok, train = small
    differ = run_both(lambda run, **kw: settings(run, precision=precision, update_freq=update_freq, **kw), tok, train,
                      tmp_path)
    assert differ == []


@pytest.mark.skipif(mpiexec() is None, reason="no mpiexec (pip install -e '.[mpi]')")
def test_the_loop_makes_the_old_updates_weights_bit_for_bit_on_two_ranks(small):
    folder, _, _ = small
    proc = subprocess.run([mpiexec(), "-n", "2", sys.executable, "-m", "tests.transformer.mpi_scripts.update_loop",
                           str(folder)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [(folder / f"update_loop_rank{r}.txt").read_text() for r in range(2)] == ["same", "same"]
