"""The copy task: the target is the source. A model that learns it must use encoder-decoder
attention to look up the right source position at every step, which makes it the smallest
convincing end-to-end check of the whole architecture."""
from __future__ import annotations

import dataclasses
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

import minitensor as mt

from .config import TransformerConfig
from .decoding import greedy_decode
from .flags import Real, Whole
from .loss import label_smoothed_loss
from .fused import fuse
from .model import Transformer
from .plots import plot_attention, plot_curves
from .progress import ProfiledUpdates, bar as progress_bar, finish
from .rundir import holds_translation_run
from .files import Output, write_file
from .schedule import NoamSchedule, paper_adam
from .settings import RANGES as TRAIN_RANGES
from .signals import ENDING_SIGNALS, StopRequest, handled

PAD, BOS, EOS = 0, 1, 2
FIRST_SYMBOL = 3
OUTPUTS = ("summary.json", "loss.png", "attention.png", "examples.txt", "metrics.jsonl")  # a run's files


def copy_model() -> TransformerConfig:
    """The copy task's model by default: d_model 64, 4 heads, d_ff 128, 2+2 layers, no dropout."""
    return TransformerConfig(13, d_model=64, n_heads=4, d_ff=128, n_encoder_layers=2, n_decoder_layers=2, dropout=0.0)


@dataclass
class CopyTaskSettings:
    """Everything a copy-task run depends on (saved in summary.json): the task, the ``model`` to
    train (its vocab_size and max_len are the task's: :meth:`model_config`) and the recipe."""

    vocab: int = 13              # 3 specials + 10 symbols
    min_length: int = 10
    max_length: int = 10
    model: TransformerConfig = field(default_factory=copy_model)
    smoothing: float = 0.0
    batch: int = 128
    steps: int = 1500
    warmup: int = 100
    lr_factor: float = 0.5
    eval_every: int = 50
    eval_size: int = 200
    stop_at: float | None = 1.0  # stop once validation exact match reaches this (None: run all steps)
    test_size: int = 100
    seed: int = 0
    device: str = "cpu"
    run_dir: str = "runs/copy"
    profile: int = 0             # time every op of updates 2 to N+1 (minitensor.profile): a table and profile.json
    fused: bool = True           # the sub-layers in their fused forms (transformer/fused.py)
    show_progress: bool = True

    def check(self) -> None:
        """Raise :class:`transformer.flags.FlagError` (a ValueError) naming the first setting out of
        its declared range (:data:`RANGES`), as ``examples/copy_task.py`` spells its flag (the
        model checks its own fields when it is made)."""
        flag = lambda name: "--" + name.replace("_", "-")  # noqa: E731
        for name, kind in RANGES.items():
            if not (name == "stop_at" and self.stop_at is None):
                kind.check(flag(name), getattr(self, name))
        try:
            if mt.backend.normalize_device(self.device) == "cuda":
                mt.backend.cupy()  # a GPU must be there: said now, not deep inside the first update
        except mt.DeviceError as e:
            raise ValueError(f"--device: {e}") from None
        if Path(self.run_dir).exists() and not Path(self.run_dir).is_dir():
            raise ValueError(f"--run-dir {self.run_dir}: a file, not a directory")
        if holds_translation_run(Path(self.run_dir)):
            raise ValueError(f"--run-dir {self.run_dir} holds a translation run (python -m transformer train): the copy "
                             "task would replace its metrics.jsonl and loss.png; choose another --run-dir")
        if self.min_length > self.max_length:
            raise ValueError(f"--min-length ({self.min_length}) must be at most --max-length ({self.max_length})")

    def model_config(self) -> TransformerConfig:
        """``model`` with the task's vocabulary and positions (the longest sequence, bos and eos)."""
        return dataclasses.replace(self.model, vocab_size=self.vocab, max_len=self.max_length + 2, pad_id=PAD,
                                   bos_id=BOS, eos_id=EOS)


# each task and recipe setting's kind and range, as the translation model's recipe declares them
RANGES = {"vocab": Whole(FIRST_SYMBOL + 1, 2**22), "min_length": Whole(1, 2**16), "max_length": Whole(1, 2**16),
          "batch": Whole(1, 2**20), "steps": TRAIN_RANGES["max_steps"],
          **{name: TRAIN_RANGES[name] for name in ("smoothing", "warmup", "lr_factor", "eval_every", "seed",
                                                   "device", "run_dir", "profile", "fused")},
          "eval_size": Whole(1, 10**6), "stop_at": Real(0, 1), "test_size": Whole(1, 10**6)}


def make_batch(rng: np.random.Generator, n: int, s: CopyTaskSettings):
    """n random sequences -> (src, tgt_in, tgt_out) int64 arrays, padded with PAD.

    src = x, tgt_in = [BOS] + x, tgt_out = x + [EOS].
    """
    lengths = rng.integers(s.min_length, s.max_length + 1, size=n)
    T = int(lengths.max())
    src = np.full((n, T), PAD, dtype=np.int64)
    tgt_in = np.full((n, T + 1), PAD, dtype=np.int64)
    tgt_out = np.full((n, T + 1), PAD, dtype=np.int64)
    for i, L in enumerate(lengths):
        x = rng.integers(FIRST_SYMBOL, s.vocab, size=L)
        src[i, :L] = x
        tgt_in[i, 0], tgt_in[i, 1:L + 1] = BOS, x
        tgt_out[i, :L], tgt_out[i, L] = x, EOS
    return src, tgt_in, tgt_out


def score(pred: np.ndarray, tgt_out: np.ndarray) -> tuple[float, float]:
    """(exact match, token accuracy) of greedy outputs against x + [EOS], over non-pad target positions."""
    T = tgt_out.shape[1]
    p = np.full_like(tgt_out, PAD)
    w = min(T, pred.shape[1])
    p[:, :w] = pred[:, :w]
    real = tgt_out != PAD
    # a prediction longer than the target (no EOS in time) is wrong as a whole
    too_long = (pred.shape[1] > T) & (pred[:, T:] != PAD).any(axis=1) if pred.shape[1] > T else np.zeros(len(p), bool)
    token_ok = (p == tgt_out) & real
    exact = (token_ok.sum(1) == real.sum(1)) & ~too_long
    return float(exact.mean()), float(token_ok.sum() / real.sum())


def build_model(s: CopyTaskSettings) -> Transformer:
    return fuse(Transformer(s.model_config()), s.fused).to(s.device)


def evaluate(model: Transformer, data, s: CopyTaskSettings) -> tuple[float, float]:
    src, _, tgt_out = data
    pred = greedy_decode(model, mt.tensor(src, device=s.device), max_len=tgt_out.shape[1])
    model.train()
    return score(pred, tgt_out)


def train_copy_task(s: CopyTaskSettings, return_model: bool = False):
    """Train, evaluate on fresh sequences, save plots and ``summary.json``; return the summary
    (and the trained model, with ``return_model``)."""
    s.check()
    run = Path(s.run_dir)
    run.mkdir(parents=True, exist_ok=True)
    earlier = [name for name in OUTPUTS if (run / name).exists()]
    if earlier:
        print(f"note: {run} holds an earlier copy-task run ({', '.join(earlier)}): its files are replaced",
              file=sys.stderr)
    mt.manual_seed(s.seed)
    rng = np.random.default_rng(s.seed)
    val = make_batch(np.random.default_rng(s.seed + 1), s.eval_size, s)
    model = build_model(s)
    opt = paper_adam(model.parameters())
    sched = NoamSchedule(opt, s.model.d_model, s.warmup, s.lr_factor)
    log = {"step": [], "loss": [], "lr": [], "eval": []}
    # replaces the earlier run's log once this run's is whole (or stopped at once: its lines so far)
    metrics = Output(run / "metrics.jsonl", lines_on_interrupt=True)
    t0 = time.perf_counter()
    bar = progress_bar(s.steps, "copy task", s.show_progress)
    exact = tok = 0.0
    step = 0
    stopped_by = "steps"
    profiled = ProfiledUpdates(s.profile, run)
    stop = StopRequest(lambda name, again: tqdm.write(
        f"{name}: stopping after this update, then testing and saving; {again} to stop at once", file=sys.stderr))
    with handled(ENDING_SIGNALS, stop), metrics as log_file:
        for step in range(1, s.steps + 1):
            with profiled.update(step):
                src, tgt_in, tgt_out = make_batch(rng, s.batch, s)
                logits = model(mt.tensor(src, device=s.device), mt.tensor(tgt_in, device=s.device))
                loss = label_smoothed_loss(logits, mt.tensor(tgt_out, device=s.device), PAD, s.smoothing)
                opt.zero_grad()
                loss.backward()
                lr = sched.step()
                opt.step()
                loss_value = loss.item()
            if not np.isfinite(loss_value):
                raise FloatingPointError(f"loss became {loss_value} at step {step}; lower --lr-factor")
            log["step"].append(step)
            log["loss"].append(loss_value)
            log["lr"].append(lr)
            record = {"step": step, "loss": loss_value, "lr": lr}
            if step % s.eval_every == 0 or step == s.steps:
                exact, tok = evaluate(model, val, s)
                log["eval"].append((step, exact, tok))
                record.update(val_exact_match=exact, val_token_accuracy=tok)
                bar.set_postfix(loss=f"{loss_value:.3f}", exact=f"{exact:.1%}", tokens=f"{tok:.1%}")
                if not s.show_progress:
                    print(f"step {step:5d}  loss {loss_value:.4f}  val exact match {exact:.1%}  token accuracy {tok:.1%}",
                          flush=True)
            log_file.write(json.dumps(record, allow_nan=False) + "\n")
            bar.update(1)
            if s.stop_at is not None and log["eval"] and log["eval"][-1][0] == step and exact >= s.stop_at:
                stopped_by = "target"
                break
            if stop.name:
                stopped_by = "interrupted"
                break
    finish(bar, _stop_line(s, step, log["eval"], stopped_by, stop.name))
    train_seconds = time.perf_counter() - t0

    # fresh sequences, never seen in training or validation
    test = make_batch(np.random.default_rng(s.seed + 12345), s.test_size, s)
    exact, tok = evaluate(model, test, s)
    summary = {"exact_match": exact, "token_accuracy": tok, "train_seconds": round(train_seconds, 2),
               "steps": step, "stopped_by": stopped_by, "final_loss": log["loss"][-1], "parameters": model.num_parameters(),
               "settings": asdict(s)}
    write_file(run / "summary.json", json.dumps(summary, indent=2, allow_nan=False))

    plot_curves(run / "loss.png", log["step"], {"training loss": log["loss"]},
                title="copy task: training loss", ylabel="loss per target token", logy=True)
    _save_examples_and_attention(model, test, s, run)
    return (summary, model) if return_model else summary


def _stop_line(s: CopyTaskSettings, step: int, evals: list, stopped_by: str, signal_name: str | None) -> str:
    """Why training ended, in one line."""
    exact = evals[-1][1] if evals else 0.0
    if stopped_by == "target":
        return (f"stopped at update {step} of {s.steps}: {exact:.1%} exact match on validation "
                f"reached the target {s.stop_at:.0%}")
    if stopped_by == "interrupted":
        checked = (f"{exact:.1%} exact match on validation at update {evals[-1][0]}" if evals
                   else "not validated yet")
        return f"interrupted ({signal_name}) after update {step} of {s.steps}: {checked}"
    target = "" if s.stop_at is None else f" (short of the target {s.stop_at:.0%})"
    return f"ran all {s.steps} updates: {exact:.1%} exact match on validation{target}"


def _save_examples_and_attention(model: Transformer, test, s: CopyTaskSettings, run: Path) -> None:
    src, tgt_in, _ = test
    pred = greedy_decode(model, mt.tensor(src[:5], device=s.device), max_len=src.shape[1] + 1)
    lines = []
    for i in range(min(5, len(src))):
        real = src[i][src[i] != PAD].tolist()
        out = pred[i].tolist()
        out = out[: out.index(EOS)] if EOS in out else out
        lines.append(f"source {real}\noutput {out}  {'ok' if out == real else 'WRONG'}")
    text = "\n".join(lines)
    write_file(run / "examples.txt", text + "\n")
    if s.show_progress:
        print(text)
    # encoder-decoder attention of the last decoder layer on the first test sequence
    model.eval()
    model.store_attention(True)
    with mt.no_grad():
        model(mt.tensor(src[:1], device=s.device), mt.tensor(tgt_in[:1], device=s.device))
    weights = model.decoder.layers[-1].cross_attn.attention.numpy()[0]
    model.store_attention(False)
    names = {PAD: "<pad>", BOS: "<s>", EOS: "</s>"}
    src_tok = [names.get(int(t), str(int(t))) for t in src[0]]
    tgt_tok = [names.get(int(t), str(int(t))) for t in tgt_in[0]]
    plot_attention(run / "attention.png", weights, src_tok, tgt_tok,
                   title="last decoder layer: encoder-decoder attention (rows: target so far)")
