"""The benchmarks' own arithmetic, where a wrong count would mislead a reader: the matrix
products' floor (benchmarks/matmul_floor.py) must count exactly the products a Linear layer
computes, and the WMT-scale benchmark's corpus and projection (benchmarks/wmt_scale.py) must
be what its report says; the reading-path tracer (benchmarks/reading_path.py) must count
what its docstring says."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

import minitensor as mt
from minitensor import profiler
from transformer import Transformer, TransformerConfig, label_smoothed_loss
from transformer.corpus import PairFilter, ParallelText
from transformer.data import FilterReport
from transformer.wmt14 import read_manifest

from ..helpers import MULTI30K, needs_multi30k

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _matmul_floor(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # it imports harness from beside it
    spec = importlib.util.spec_from_file_location("matmul_floor", BENCHMARKS / "matmul_floor.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_product_counter_counts_every_linear_product_of_an_update(monkeypatch):
    """One training update of a small Transformer counts 3x the forward's Linear FLOPs
    (forward, dx and dW of every layer: the embeddings are trained, so every input needs
    its gradient), worked out here layer by layer from the paper's shapes; and leaving the
    counter closes its profile."""
    floor = _matmul_floor(monkeypatch)
    d, f, V, B, Ts, Tt = 16, 24, 13, 3, 5, 4
    cfg = TransformerConfig(vocab_size=V, d_model=d, n_heads=2, d_ff=f, n_encoder_layers=2, n_decoder_layers=1,
                            dropout=0.0)
    model = Transformer(cfg)
    rng = np.random.default_rng(0)
    src, tgt = rng.integers(3, V, (B, Ts)), rng.integers(3, V, (B, Tt + 1))  # no padding
    with floor.ProductCounter() as counter:
        loss = label_smoothed_loss(model(mt.tensor(src), mt.tensor(tgt[:, :-1])), mt.tensor(tgt[:, 1:]), 0, 0.1)
        loss.backward()
        counter.update_done(0.0)
    assert profiler.active is None
    rows_s, rows_t = B * Ts, B * Tt
    encoder = rows_s * (4 * d * d + 2 * d * f)                       # Q, K, V, output; the two FFN layers
    decoder = rows_t * (4 * d * d + 2 * d * d + 2 * d * f) + rows_s * 2 * d * d  # + cross Q, out; cross K, V
    forward = 2 * (2 * encoder + decoder + rows_t * d * V)          # multiply-adds x 2; the tied projection
    assert counter.updates[0]["product_flops"] == 3 * forward
    # the shapes timed for the floor hold the same FLOPs
    assert sum(fl for fl, _ in counter.shapes()) == 3 * forward


def _wmt_scale(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("wmt_scale", BENCHMARKS / "wmt_scale.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@needs_multi30k
def test_the_synthetic_wmt_corpus_has_the_length_distribution_it_claims(monkeypatch, tmp_path):
    """benchmarks/wmt_scale.py's corpus: the asked number of pairs in a prepared folder's layout
    (the manifest's line counts match the files), English sentences of median MEDIAN_WORDS
    words, about MISALIGNED of the pairs cut by the training filter's length ratio and
    OVERLONG by its length limit, and the same corpus again for the same seed."""
    scale = _wmt_scale(monkeypatch)
    multi30k = MULTI30K
    n = 20_000
    scale.synthesise(tmp_path / "a", n, multi30k)
    manifest = read_manifest(tmp_path / "a")
    en = (tmp_path / "a" / "train.en").read_text().splitlines()
    assert len(en) == n == manifest["files"]["train.en"]["lines"]
    words = np.array([len(s.split()) for s in en])
    assert abs(np.median(words) - scale.MEDIAN_WORDS) <= 2
    report = FilterReport()
    sum(1 for _ in PairFilter().kept(ParallelText(files=((tmp_path / "a" / "train.en", tmp_path / "a" / "train.de"),)),
                                      report))
    assert report.total == n
    assert abs(report.bad_ratio / n - scale.MISALIGNED) < 0.004
    assert abs(report.too_long / n - scale.OVERLONG) < 0.002
    scale.synthesise(tmp_path / "b", n, multi30k)
    assert (tmp_path / "b" / "train.de").read_bytes() == (tmp_path / "a" / "train.de").read_bytes()


def test_the_tenfold_projection_scales_only_the_stages_that_grow_with_the_corpus(monkeypatch):
    """wmt_scale.projection multiplies the passes over the text and the batching by ten, leaves
    BPE training (a sample of fixed size), the model and the updates as measured, and names the
    largest stage."""
    scale = _wmt_scale(monkeypatch)
    run = {"pairs": 100, "stages": {"read and filter, BPE sample": 2.0, "BPE training": 5.0, "encode and cache": 3.0,
                                    "model": 1.0, "token batches": 0.5, "update 1": 20.0}}
    p = scale.projection(run)
    assert p["pairs"] == 1000
    assert p["stages"] == {"read and filter, BPE sample": 20.0, "BPE training": 5.0, "encode and cache": 30.0,
                           "model": 1.0, "token batches": 5.0, "update 1": 20.0}
    assert p["dominant"] == "encode and cache"
    assert p["total_seconds"] == 81.0


def test_the_step_profile_on_the_cpu_rates_float32_alone_and_gives_the_blas_rate_per_op(tmp_path):
    """precision_profile.py --device cpu: only float32 products are rated (NumPy has no BLAS for
    16-bit ones), and each product op's row carries the BLAS's rate on its own shapes."""
    out = tmp_path / "profile.json"
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "precision_profile.py"), "--device", "cpu", "--batch", "2",
                           "--length", "8", "--vocab", "64", "--precisions", "fp32", "--steps", "1", "--out", str(out)],
                          cwd=BENCHMARKS, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    saved = json.loads(out.read_text())
    assert sorted(saved["rates"]) == ["float32 (16, 512)x(512, 2048)", "float32 (16, 8, 64)x(16, 64, 8)"]
    rows = {r["op"]: r for r in saved["profiles"]["fp32"]["rows"]}
    assert rows["Linear"]["blas_gflop_per_s"] > 0 and rows["LayerNorm"]["blas_gflop_per_s"] is None


@needs_multi30k
def test_the_reading_path_stops_at_the_first_update_and_counts_each_function_once(monkeypatch, tmp_path):
    """benchmarks/reading_path.py: the trace reaches Trainer.update, every hop goes from a file of
    transformer/ into another file, no function is counted twice, and the road (the stack at the
    first update) runs from the command through cmd_train and Trainer.fit."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("reading_path", BENCHMARKS / "reading_path.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    root = BENCHMARKS.parent
    argv = ["train", "--run-dir", str(tmp_path / "run"), "--data-dir", str(MULTI30K), "--limit", "200",
            "--vocab-size", "200", "--d-model", "16", "--n-heads", "2", "--d-ff", "32", "--max-steps", "1",
            "--eval-every", "1000", "--bleu-sentences", "0", "--no-progress"]
    hops, road = module.trace(root, argv)
    assert {("transformer/commands.py", "cmd_train"), ("transformer/train.py", "Trainer.fit")} <= road
    assert all(src.startswith("transformer/") and src != dst for src, _, dst, _ in hops)
    opened = [(dst, callee) for _, _, dst, callee in hops]
    assert len(opened) == len(set(opened))
    assert ("transformer/train.py", "Trainer.__init__") in opened and ("transformer/corpus.py", "prepare") in opened


def test_the_capstone_benchmark_times_both_engines_in_alternating_rounds_and_reports_their_ratio(tmp_path):
    """benchmarks/capstone_vs_minitensor.py: one round per engine in turn, the medians and their
    ratio in the JSON it writes (the figure docs/performance.md quotes)."""
    out = tmp_path / "capstone.json"
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "capstone_vs_minitensor.py"), "--rounds", "2",
                           "--updates", "1", "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert {k: len(v) for k, v in result["rounds"].items()} == {"track": 2, "minitensor": 2}
    median = {k: float(np.median(v)) for k, v in result["rounds"].items()}
    assert result["median_seconds"] == median
    assert result["ratio_track_to_minitensor"] == median["track"] / median["minitensor"]
    assert "round 2: track" in proc.stdout and "the track takes" in proc.stdout
