"""Training a translation model: token batches, label smoothing, the Noam schedule, periodic
validation, JSONL metrics, plots, checkpoints that survive a crash, exact resume.

The loop in one sentence: for each update, backpropagate the label-smoothed loss of each of
``update_freq`` token batches, sum the gradients over ranks, set the learning rate from
equation (3), and step Adam with the gradients divided by the update's target tokens (clipped,
optionally); every ``eval_every`` updates validate, and every ``save_every`` updates write
``checkpoint_<step>.npz`` (keeping the last N and the best). :meth:`Trainer.update` is that
update; :meth:`Trainer.fit` the loop around it, and what follows an update (logging,
validation, checkpoints).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
from tqdm import tqdm

import minitensor as mt
from minitensor import amp, distributed, optim
from minitensor.distributed import Communicator, SingleProcess

from .batching import Batch, collate, lengths, token_batches
from .corpus import ParallelData
from .checkpoint import (CheckpointError, kind_of, load_checkpoint, model_config, newest_loadable, prune_checkpoints,
                         save_checkpoint, step_checkpoints)
from .evaluate import bleu, translate
from .loss import batch_loss
from .model import Transformer
from .plots import plot_curves
from .progress import ProfiledUpdates, bar as progress_bar, size_to_budget
from .files import remove_stale, write_file
from .fused import fuse
from .schedule import NoamSchedule, paper_adam
from .settings import PRECISIONS, SettingsError, TrainSettings, run_differences
from .signals import CLOSED_STDOUT, ENDING_SIGNALS, EXIT_CLOSED_PIPE, StopRequest, close_stdout, handled
from .tokenizer import Tokenizer


def finite_or_none(x: float) -> float | None:
    """``x``, or None (JSON null) where it is infinite or NaN: strict JSON has no Infinity."""
    return x if math.isfinite(x) else None


class Interrupted(Exception):
    """Training stopped on SIGINT, SIGTERM or SIGHUP, or because its stdout was closed, after
    finishing an update and saving a checkpoint. ``main``: raised on rank 0 (the rank that reports
    it); ``status``: the exit status (130 for a signal, 141 for a closed stdout, as for SIGPIPE)."""

    def __init__(self, step: int, run: Path, main: bool = True, closed_stdout: bool = False):
        why = "stdout was closed (its reader went away): " if closed_stdout else ""
        super().__init__(f"{why}stopped at update {step}; continue with --resume (the checkpoint is in {run})")
        self.step, self.main = step, main
        self.status = EXIT_CLOSED_PIPE if closed_stdout else 130


class StoppedAtOnce(Interrupted):
    """A second signal stopped training where it was, ``step`` updates made: ``--resume`` goes on
    from the newest checkpoint, made after update ``saved`` (None: none yet)."""

    def __init__(self, step: int, saved: int | None, save_every: int, main: bool = True):
        if saved is None:
            where = f"no checkpoint was saved yet (every {save_every} updates, --save-every): start again with --overwrite"
        elif saved == step:
            where = "continue with --resume"
        else:
            where = f"continue with --resume, which goes on from checkpoint_{saved}.npz (updates after it are made again)"
        Exception.__init__(self, f"stopped at once after update {step}; {where}")
        self.step, self.main, self.saved = step, main, saved


# a reason to stop, sent with the gradients of an update: rank 0 alone keeps time, and every rank
# says whether a signal asked it to stop (summed over ranks, any one stops them all)
GO_ON, OUT_OF_TIME, SIGNALLED = 0.0, 1.0, 2.0


class TrainingDiverged(FloatingPointError):
    """The loss became NaN or infinite; the last good checkpoint is left as it was."""


def _count(meta: dict, key: str) -> int:
    """A whole number >= 0 from a checkpoint's metadata (ValueError otherwise)."""
    value = meta[key]
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{key} is {value!r}")
    return value


class RunFileError(ValueError):
    """A file of the run directory (its metrics log, say) is damaged; the message names file and line."""


VALIDATION = ("valid_nll", "valid_ppl", "valid_bleu")  # what a validation step adds to its record


def _wrong_numbers(record: dict) -> list[str]:
    """The fields of a metrics record that the plots read and that are not numbers: its loss (null
    for a skipped fp16 update), its learning rate, and what validation measured, where it ran."""
    may_be_null = {"loss": True, "lr": False, **{k: False for k in VALIDATION if k in record}}
    number = lambda x: isinstance(x, (int, float)) and not isinstance(x, bool)  # noqa: E731
    return [k for k, null in may_be_null.items() if not (number(record.get(k)) or (null and k in record
                                                                                   and record[k] is None))]


def read_metrics(path: Path, warn=None) -> list[dict]:
    """The records of a run's ``metrics.jsonl``. An unfinished last line (a crash during an
    append leaves one) is dropped, saying so through ``warn``; any other line that is not a
    record with a step, a loss and a learning rate (and numbers for what validation measured)
    raises :class:`RunFileError` naming the file and the line."""
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if not (isinstance(record, dict) and isinstance(record.get("step"), int)):
                raise ValueError("not a record with a step")
            if wrong := _wrong_numbers(record):
                raise ValueError(f"{', '.join(wrong)}: not a number")
        except ValueError as e:
            if number == len(lines):  # no line ending after it: the write was cut off
                if warn is not None:
                    warn(f"note: {path}:{number}: an unfinished last line (a crash during a write) was dropped")
                continue
            raise RunFileError(f"{path}:{number}: not a metrics record ({e}); mend or delete that line, then "
                               "--resume again") from None
        records.append(record)
    return records


def _ranges(steps: list[int]) -> str:
    """Sorted whole numbers as runs: [3, 4, 5, 9] -> "3-5, 9"."""
    runs: list[list[int]] = []
    for x in steps:
        if runs and x == runs[-1][1] + 1:
            runs[-1][1] = x
        else:
            runs.append([x, x])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


def check_batch_size(max_tokens: int, train: "ParallelData") -> None:
    """Every training pair must fit in a batch: its longer side and eos (or bos) in ``max_tokens``."""
    longest = np.maximum(lengths(train.src), lengths(train.tgt)) + 1 if len(train) else np.zeros(1, np.int64)
    if int(longest.max()) > max_tokens:
        raise SettingsError(f"--max-tokens {max_tokens} is less than the longest training pair needs "
                            f"({int(longest.max())} tokens); raise --max-tokens, or drop long pairs with a lower "
                            "--max-words")


class Trainer:
    """Owns the model, optimizer, schedule and position in the data; ``fit()`` runs to the end.

    Data parallel: give a ``comm`` from :func:`minitensor.distributed.init` (one process per
    device, launched by mpiexec). Rank 0's initial weights are broadcast; every update takes
    ``update_freq x world_size`` batches and each rank processes its share; the summed
    gradients, loss and token count travel in one flat buffer through one all-reduce, and the
    gradient is divided by the global number of target tokens. Only rank 0 writes files.
    """

    def __init__(self, settings: TrainSettings, tokenizer: Tokenizer, train: ParallelData,
                 valid: ParallelData | None = None, resume: bool = False, comm: Communicator | None = None,
                 data: dict | None = None, run_id: str | None = None):
        self.s = settings
        self.data = data or {}  # the data settings (language pair, filter, ...): part of the run's identity
        self.run_id = run_id  # given at the run's start (run.json): another run's checkpoint has another
        self.tok = tokenizer
        self.amp_dtype = PRECISIONS[settings.precision]
        # float16 needs loss scaling; bfloat16 has float32's exponent range and does not
        self.scaler = amp.LossScaler(enabled=settings.precision == "fp16")
        self.last_skipped = False
        self._loss = 0.0, 1.0  # the last update's loss sum (on the device) and 1 / its tokens
        self._batches: dict = {}  # epoch: its batches (see _epoch_batches)
        self._ahead = None, []  # (epoch, batch_in_epoch): the batches collated for that place
        self._stop = StopRequest(self._announce_stop)  # a signal that asked training to stop (see fit)
        self.flags_sent = 0  # the update whose stop flags have gone to the other ranks
        self.on_gpu = mt.backend.normalize_device(settings.device) == "cuda"
        if self.on_gpu:
            mt.cuda.set_tf32(settings.tf32)
        self.comm = comm or SingleProcess()
        self.main = self.comm.rank == 0
        self.train_data, self.valid_data = train, valid
        # the longest training source, in pieces: translate splits longer lines (its --long-lines)
        self.longest_source = int(np.max(lengths(train.src), initial=0))
        check_batch_size(settings.max_tokens, train)
        self.run = Path(settings.run_dir)
        if self.main:
            self.run.mkdir(parents=True, exist_ok=True)
        mt.manual_seed(settings.seed)
        self.cfg = settings.model_config(tokenizer.vocab_size)
        # settings.json and the checkpoints record the model as built: the tokenizer's vocabulary
        self.s = settings = dataclasses.replace(settings, model=self.cfg)
        self.model = fuse(Transformer(self.cfg), settings.fused).to(settings.device)
        for p in self.model.parameters():  # every rank starts from rank 0's weights
            self.comm.broadcast(p.data)
        self.opt = paper_adam(self.model.parameters())
        self.sched = NoamSchedule(self.opt, self.cfg.d_model, settings.warmup, settings.lr_factor, settings.cooldown)
        self.step, self.epoch, self.batch_in_epoch = 0, 0, 0  # batch_in_epoch: batches consumed, all ranks
        self.best_valid = math.inf
        self.train_seconds = 0.0
        self.history: list[dict] = []
        self.saved_step: int | None = None  # the update of the newest checkpoint, this run's
        if resume:
            self.resume()
        if self.main:  # after resume() has compared the checkpoint with these settings
            write_file(self.run / "settings.json", json.dumps(asdict(settings), indent=2, allow_nan=False))

    # ------------------------------------------------------------------ checkpoints
    def _meta(self) -> dict:
        return {"step": self.step, "epoch": self.epoch, "batch_in_epoch": self.batch_in_epoch,
                "schedule": self.sched.state_dict(), "rng": mt.get_rng_state(), "config": self.cfg.to_dict(),
                "settings": asdict(self.s), "vocab_sha256": self.tok.fingerprint(),
                "best_valid": finite_or_none(self.best_valid), "longest_source": self.longest_source,
                "train_seconds": self.train_seconds, "world_size": self.comm.world_size,
                "loss_scaler": self.scaler.state_dict() if self.scaler.enabled else None, "data": self.data,
                "run_id": self.run_id}

    def _foreign(self, meta: dict) -> str | None:
        """Why a checkpoint is not this run's (another vocabulary, model or recipe), or None."""
        if kind_of(meta) != "training":
            return f"it holds {kind_of(meta)} weights without the optimizer's state, so training cannot go on from it"
        if meta.get("vocab_sha256") != self.tok.fingerprint():
            return f"trained with another vocabulary than {self.tok.path}"
        differing = run_differences(meta, {"settings": asdict(self.s), "data": self.data, "run_id": self.run_id},
                                    ("in it", "in this run"))
        try:
            other_model = model_config(meta, "it") != self.cfg
        except CheckpointError as e:
            return str(e)
        if differing or other_model:
            return f"not a checkpoint of this run ({'; '.join(differing) or 'another model'})"
        return None

    def _restore(self, ck: dict) -> str | None:
        """Take the model, optimizer, schedule, random state and place in the data from a loaded
        checkpoint; returns why it could not (metadata altered by hand), or None. A failure part
        way is harmless: the next checkpoint tried sets every one of them again."""
        meta = ck["meta"]
        try:
            self.model.load_state_dict(ck["model"])
            self.model.to(self.s.device)
            self.opt.load_state_dict(ck["optimizer"])
            self.sched.load_state_dict(meta["schedule"])
            mt.set_rng_state(meta["rng"])
            self.step, self.epoch, self.batch_in_epoch = (_count(meta, k) for k in ("step", "epoch", "batch_in_epoch"))
            self.saved_step = self.step
            best, self.train_seconds = meta["best_valid"], float(meta["train_seconds"])
            self.best_valid = math.inf if best is None else float(best)  # null when no validation had run
            if self.scaler.enabled and meta.get("loss_scaler"):
                self.scaler.load_state_dict(meta["loss_scaler"])
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
            return f"its metadata is damaged ({type(e).__name__}: {e})"
        return None

    def save(self) -> Path | None:
        if not self.main:
            return None
        path = self.run / f"checkpoint_{self.step}.npz"
        self._move_aside(path)
        path = save_checkpoint(path, self.model, self.opt, self._meta())
        self.saved_step = self.step
        prune_checkpoints(self.run, self.s.keep_last, ours=lambda meta: self._foreign(meta) is None)
        return path

    def _move_aside(self, path: Path) -> None:
        """A file where a checkpoint is to be saved (damaged, another run's, one that resume could
        not use, not a checkpoint at all) is kept under another name, with a note, not replaced."""
        if not (path.exists() or path.is_symlink()):
            return
        try:
            why = "a directory" if path.is_dir() else self._foreign(load_checkpoint(path)["meta"])
        except CheckpointError as e:
            why = str(e)
        moved = path.with_name(f"{path.stem}.moved-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}{path.suffix}")
        os.replace(path, moved)
        print(f"note: {path.name} was in the way of update {self.step}'s checkpoint ({why or 'not the one resumed'}): "
              f"moved to {moved.name}", file=sys.stderr)

    def resume(self) -> bool:
        """Continue from the newest checkpoint of this run in the run directory (False if there is
        none); a damaged checkpoint, or another run's, is skipped with a note.

        Works for any world size: training goes on at the first batch not yet consumed.
        """
        note = (lambda msg: print(msg, file=sys.stderr)) if self.main else None
        found = step_checkpoints(self.run, warn=note) if self.run.exists() else []
        if self.main and self.run.exists():
            remove_stale(self.run)  # the temporary files of a run killed while it wrote
        if not found:
            return False
        newest_loadable(found, warn=note, refuse=lambda ck: self._foreign(ck["meta"]) or self._restore(ck))
        metrics = self.run / "metrics.jsonl"
        if metrics.exists():  # forget log lines written after that checkpoint; one record per update, in order
            records = [r for r in read_metrics(metrics, warn=note) if r["step"] <= self.step]
            self.history = sorted({r["step"]: r for r in records}.values(), key=lambda r: r["step"])
            if self.main and [r["step"] for r in records] != [r["step"] for r in self.history]:
                note(f"note: {metrics} held updates out of order or more than once: kept the last record of each, "
                     "in order")
            if self.main:
                write_file(metrics, "".join(json.dumps(r) + "\n" for r in self.history))
                if missing := sorted(set(range(1, self.step + 1)) - {r["step"] for r in self.history}):
                    note(f"note: {metrics} holds no record of update(s) {_ranges(missing)} (lines cut or deleted): "
                         "training goes on; the log and the curves have a gap there")
        return True

    # ------------------------------------------------------------------ one update
    def _epoch_batches(self, epoch: int) -> list[np.ndarray]:
        """The index arrays of an epoch's batches, every rank's (the last two epochs' are kept)."""
        if epoch not in self._batches:
            sides = lengths(self.train_data.src), lengths(self.train_data.tgt)
            self._batches = {e: b for e, b in self._batches.items() if e == epoch - 1}
            self._batches[epoch] = token_batches(*sides, self.s.max_tokens, seed=self.s.seed * 100_003 + epoch)
        return self._batches[epoch]

    def _reseed_dropout(self) -> None:
        """Dropout masks depend on (seed, update, rank) only, so a resumed run, whatever its
        world size, draws exactly the masks an uninterrupted one would."""
        seq = np.random.SeedSequence([self.s.seed, self.step, self.comm.rank])
        mt.manual_seed(int(seq.generate_state(1)[0]))

    def my_batches(self, group: list[np.ndarray]) -> list[Batch]:
        """This rank's share of an update's ``group`` of batches (every world_size-th), padded."""
        return [collate(self.train_data.src, self.train_data.tgt, idx) for idx in group[self.comm.rank::self.comm.world_size]]

    def update(self, batches: list[Batch], stop_flag: float = GO_ON, progress: float = 0.0) -> float:
        """One optimizer step over this rank's ``batches`` (:meth:`my_batches`): forward, the
        paper's loss, backward, the sum over ranks, the step. Returns the stop flag all ranks
        agree on: GO_ON, OUT_OF_TIME (rank 0 alone keeps time: its ``stop_flag``) or SIGNALLED
        (a signal reached one rank). ``progress``: rank 0's fraction of the budget spent, for
        the learning rate's cool-down.

        Nothing here waits for the device (on one process, without --clip-norm or fp16, whose
        checks read one number each): the update's loss per target token stays there until
        :meth:`read_loss`. With fp16, an update whose gradients overflowed is skipped
        (``self.last_skipped``) and the loss scale halved.
        """
        self._reseed_dropout()
        self.model.train()
        self.opt.zero_grad()
        loss_sum, tokens, dev = 0.0, 0, self.s.device
        for b in batches:
            with amp.autocast(self.amp_dtype, weights=self.model.parameters()):  # the 16-bit weights in one launch
                loss = batch_loss(self.model, mt.tensor(b.src, device=dev), mt.tensor(b.tgt_in, device=dev), b.tgt_out,
                                  self.cfg.pad_id, self.s.smoothing, reduction="sum")
            self.scaler.backward(loss)                          # fp16: (loss · S).backward()
            loss_sum, tokens = loss_sum + loss.data, tokens + b.target_tokens  # the sum stays on the device
        grad_scale, (loss_sum, out_of_time, signalled, progress) = distributed.reduce_gradients(
            self.comm, self.opt.params, tokens, (loss_sum, stop_flag, self._signal_flag(), progress))
        self._loss = loss_sum, grad_scale                       # the loss per token, once read
        if self.s.clip_norm > 0:
            norm = optim.grad_norm(self.opt.params, grad_scale / self.scaler.scale)  # the host reads it
            grad_scale *= optim.clip_factor(norm, self.s.clip_norm)
        self.sched.step(progress)                               # Equation 3's learning rate
        self.last_skipped = self.scaler.step(self.opt, grad_scale)  # Adam, from the gradients times grad_scale / S
        if self.last_skipped:
            self._skipped()
        self.step += 1
        return self._agreed_stop(out_of_time, signalled)

    def read_loss(self) -> float:
        """The last update's loss per target token (summed over ranks), read to the host: on a
        GPU this waits for that update to finish."""
        loss_sum, grad_scale = self._loss
        return float(loss_sum) * grad_scale

    def _signal_flag(self) -> float:
        """1 when a signal asked this rank to stop, read as late as can be: it goes to the other
        ranks with this update's gradients, and a later signal with the next update's."""
        self.flags_sent = self.step + 1
        return 1.0 if self.stop_requested else 0.0

    def _agreed_stop(self, out_of_time: float, signalled: float) -> float:
        """The stop flag the ranks agreed on in this update's exchange; with several ranks, rank 0
        says which update a signal (its own or another rank's) stops them after."""
        if signalled and self.main and self.comm.world_size > 1:
            who = self.stop_requested or "another rank was asked to stop"
            tqdm.write(f"{who}: stopping after update {self.step} and saving a checkpoint", file=sys.stderr)
        return SIGNALLED if signalled else OUT_OF_TIME if out_of_time else GO_ON

    def _skipped(self) -> None:
        """After an update skipped for float16 overflow: the schedule does not count it; at the
        smallest loss scale, training has diverged."""
        self.sched.steps -= 1
        if self.scaler.scale <= self.scaler.min_scale:
            raise TrainingDiverged(
                f"float16 gradients overflow even at the smallest loss scale ({self.scaler.scale:g}) at update "
                f"{self.step + 1}. {self._where_to_go_on('--precision bf16 or fp32, a lower --lr-factor, or --clip-norm')}")

    def _where_to_go_on(self, change: str) -> str:
        """What to do after an update that failed: train again with ``change`` (a resumed run
        would repeat the same updates), and where the finished work is."""
        if step_checkpoints(self.run):
            return (f"The checkpoints in {self.run} are from before this update and untouched. Train again with "
                    f"{change}: into a new --run-dir, or here with --overwrite (which archives this run)")
        return (f"No checkpoint was saved yet. Train again with {change}; the same --run-dir will do (the logs of "
                "this start are moved aside)")

    # ------------------------------------------------------------------ validation
    @mt.no_grad()
    def validate(self) -> dict:
        """Loss and perplexity on all validation pairs; BLEU on the first ``bleu_sentences``."""
        v = self.valid_data
        self.model.eval()
        total, tokens = 0.0, 0
        dev = self.s.device
        sides = lengths(v.src), lengths(v.tgt)
        longest = int(np.maximum(*sides).max()) + 1 if len(v) else 1  # a long pair gets a batch of its own
        for idx in token_batches(*sides, max(self.s.max_tokens, longest), shuffle=False):
            b = collate(v.src, v.tgt, idx)
            total += batch_loss(self.model, mt.tensor(b.src, device=dev), mt.tensor(b.tgt_in, device=dev),
                                b.tgt_out, self.cfg.pad_id, 0.0, reduction="sum").item()
            tokens += b.target_tokens
        out = {"valid_nll": total / tokens, "valid_ppl": math.exp(min(total / tokens, 50))}
        n = min(self.s.bleu_sentences, len(v.src_text))
        if n:
            hyps = translate(self.model, self.tok, v.src_text[:n], beam_size=self.s.beam_size, alpha=self.s.alpha,
                             max_tokens=self.s.max_tokens, device=dev, progress=False)
            out["valid_bleu"] = bleu(hyps, v.tgt_text[:n])["score"]
        self.model.train()
        return out

    # ------------------------------------------------------------------ the loop
    @property
    def stop_requested(self) -> str | None:
        """The name of the signal that asked training to stop, if one did."""
        return self._stop.name

    def _announce_stop(self, name: str, again: str) -> None:
        """While training, the first SIGINT, SIGTERM or SIGHUP asks for a stop after the current
        update (which then saves a checkpoint); a second one stops at once (:class:`StopRequest`)."""
        if not self.main:
            return
        if self.comm.world_size == 1:  # the update in flight, unless it has read its stop flag already
            last = self.step + (2 if self.flags_sent == self.step + 1 else 1)
            tqdm.write(f"{name}: stopping after update {last} and saving a checkpoint; {again} to stop at once",
                       file=sys.stderr)
        else:  # another rank may read its flag before or after this one: the exchange decides (_agreed_stop)
            tqdm.write(f"{name}: stopping when the ranks next exchange their gradients, after that update, and "
                       f"saving a checkpoint; {again} to stop at once", file=sys.stderr)

    def fit(self) -> dict:
        """Train until max_steps, max_epochs or max_minutes; returns the run summary. Raises
        :class:`Interrupted` (after saving) when a SIGINT or SIGTERM asked it to stop."""
        self._stop = StopRequest(self._announce_stop)
        with handled(ENDING_SIGNALS, self._stop):
            try:
                summary = self._fit()
            except KeyboardInterrupt:  # a second signal
                self._summarise("stopped at once")
                raise StoppedAtOnce(self.step, self.saved_step, self.s.save_every, main=self.main) from None
            except Exception as e:
                self._summarise("diverged" if isinstance(e, TrainingDiverged) else "failed", error=e)
                raise
        if summary["stopped_by"] == "interrupted":
            raise Interrupted(self.step, self.run, main=self.main, closed_stdout=self.stop_requested == CLOSED_STDOUT)
        if self.main:
            print(self._stop_line(summary["stopped_by"]), file=sys.stderr, flush=True)
        return summary

    def _stop_line(self, reason: str) -> str:
        """Why training ended, in one line (the progress bar alone would end at, say, 13%)."""
        s = self.s
        why = {"max_steps": f"reached --max-steps {s.max_steps}",
               "max_minutes": f"the time budget (--max-minutes {s.max_minutes:g}) ran out",
               "max_epochs": f"reached --max-epochs {s.max_epochs}"}[reason]
        if math.isfinite(self.best_valid):
            best = f"; best validation NLL {self.best_valid:.3f}"
        elif self.valid_data is not None:  # a short run: say why best.npz and bleu.png are missing
            best = f"; no validation yet (every {s.eval_every} updates, --eval-every), so no best.npz or bleu.png"
        else:
            best = ""
        return f"stopped at update {self.step} of {s.max_steps}: {why}{best}"

    def _fit(self) -> dict:
        """The loop. Each update is launched; while the device works on it, the next batches are
        collated and the update before is logged (its loss read). The host waits for the device
        only to log, validate, save or stop."""
        s = self.s
        metrics = open(self.run / "metrics.jsonl", "a") if self.main else None
        bar = progress_bar(s.max_steps, "training", s.progress and self.main, initial=self.step)
        self._clock_start = time.perf_counter() - self.train_seconds
        profiled = ProfiledUpdates(s.profile if self.main else 0, self.run, done=self.step)
        log = functools.partial(self._log, metrics, bar)
        unread = None  # the last update's record, its loss not yet read
        try:
            while True:
                self._roll_epoch()
                if self.step >= s.max_steps or self.epoch >= s.max_epochs:
                    if unread:
                        log(*unread)
                    return self._finish("max_steps" if self.step >= s.max_steps else "max_epochs")
                group, batches = self._next_batches()
                stop_flag, progress = self._budget()
                measure = self.on_gpu and s.memory_every > 0 and (self.step + 1) % s.memory_every == 0
                with (mt.cuda.PeakMemory() if measure else contextlib.nullcontext()) as mem, \
                        profiled.update(self.step + 1):
                    stop = self.update(batches, stop_flag=stop_flag, progress=progress)
                self.batch_in_epoch += len(group)
                record = self._record(mem if measure else None)
                self._collate_ahead()  # host work while the device runs the update
                unread = self._after_update(unread, record, stop, log)
                if stop:
                    return self._finish("interrupted" if stop == SIGNALLED else "max_minutes")
        finally:
            bar.close()
            if metrics:
                metrics.close()

    def _budget(self) -> tuple[float, float]:
        """(stop flag, progress) for the next update: rank 0's clock says whether --max-minutes is
        spent, and how much of the budget (updates or minutes, whichever is further) is; the other
        ranks send nothing (they take rank 0's)."""
        if not self.main:
            return GO_ON, 0.0
        s, spent = self.s, time.perf_counter() - self._clock_start
        progress = max(self.step / s.max_steps, spent / (60 * s.max_minutes) if s.max_minutes > 0 else 0.0)
        return (OUT_OF_TIME if s.max_minutes > 0 and spent >= 60 * s.max_minutes else GO_ON), progress

    def _record(self, memory=None) -> dict:
        """The metrics of the update just launched, all but its loss (read later); ``memory``:
        the PeakMemory that watched it, if one did."""
        self.train_seconds = time.perf_counter() - self._clock_start
        record = {"step": self.step, "epoch": self.epoch, "lr": self.opt.lr, "seconds": round(self.train_seconds, 2)}
        if memory is not None:
            record["peak_memory_mib"] = round(memory.peak_bytes / 2**20, 1)
        if self.scaler.enabled:
            record["loss_scale"] = self.scaler.scale
            if self.last_skipped:
                record["skipped"] = True
        return record

    def _after_update(self, unread, record: dict, stop: float, log):
        """What follows an update: the update before is logged (its loss is read now, while this
        one runs); then, when one is due, validation and a checkpoint, which wait for this update
        and log it first. Returns the record left unread (this update's, or None)."""
        if unread:
            log(*unread)
        unread = record, self._loss
        validate = self.main and self.valid_data is not None and self.step % self.s.eval_every == 0
        save = self.step % self.s.save_every == 0 or stop
        if validate or save:
            log(*unread, validate=validate)
            unread = None
        if save:
            self.save()
        return unread

    def _roll_epoch(self) -> None:
        """After an epoch's last batch: on to the next epoch."""
        if self.batch_in_epoch >= len(self._epoch_batches(self.epoch)):
            self.epoch += 1
            self.batch_in_epoch = 0

    def _next_batches(self) -> tuple[list[np.ndarray], list[Batch]]:
        """The next update's group of batches (every rank's index arrays) and this rank's share,
        padded: collated ahead, when :meth:`_collate_ahead` could."""
        group = self._epoch_batches(self.epoch)[self.batch_in_epoch:][:self.s.update_freq * self.comm.world_size]
        place, batches = self._ahead
        self._ahead = None, []
        return group, batches if place == (self.epoch, self.batch_in_epoch) else self.my_batches(group)

    def _collate_ahead(self) -> None:
        """Collate the next update's batches now (while the device works on this one)."""
        epoch, done = self.epoch, self.batch_in_epoch
        if done >= len(self._epoch_batches(epoch)):
            epoch, done = epoch + 1, 0
        if self.step < self.s.max_steps and epoch < self.s.max_epochs:
            group = self._epoch_batches(epoch)[done:][:self.s.update_freq * self.comm.world_size]
            self._ahead = (epoch, done), self.my_batches(group)

    def _log(self, metrics, bar, record: dict, loss: tuple, validate: bool = False) -> None:
        """Complete an update's ``record`` with its loss (read now), and validation when
        ``validate``; then log it: metrics.jsonl, the history, the progress bar."""
        loss_sum, grad_scale = loss
        value = float(loss_sum) * grad_scale
        if not math.isfinite(value) and not record.get("skipped"):
            raise TrainingDiverged(f"loss is {value} at update {record['step']}; stopping. "
                                   f"{self._where_to_go_on('a lower --lr-factor or with --clip-norm')}")
        record = {"step": record["step"], "epoch": record["epoch"], "loss": finite_or_none(value), **record}
        if record.get("skipped") and self.main:
            tqdm.write(f"update {record['step']}: float16 gradients overflowed; skipped it, "
                       f"loss scale now {record['loss_scale']:g}")
        if validate:
            record.update(self.validate())
            self.train_seconds = time.perf_counter() - self._clock_start
            if record["valid_nll"] < self.best_valid:
                self.best_valid = record["valid_nll"]
                save_checkpoint(self.run / "best.npz", self.model, None, self._meta(), kind="best")
        if self.main:
            metrics.write(json.dumps(record, allow_nan=False) + "\n")
            metrics.flush()
        self.history.append(record)
        bar.update(1)
        size_to_budget(bar, self.step, self.train_seconds, self.s.max_minutes, self.s.max_steps)
        bar.set_postfix({k: f"{record[k]:.3g}" for k in ("loss", "valid_nll", "valid_bleu") if record.get(k) is not None})
        if self.main and not self.s.progress and ("valid_nll" in record or record["step"] % 50 == 0):
            self._say(" ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in record.items()))

    def _say(self, line: str) -> None:
        """A log line on stdout. A closed stdout (its reader went away: ``train ... | head``) asks
        training to stop after this update and save, as a signal does; stdout is closed for good."""
        try:
            print(line, flush=True)
        except BrokenPipeError:
            close_stdout()
            self._stop.request(CLOSED_STDOUT)

    def _finish(self, reason: str) -> dict:
        if self.main:
            found = step_checkpoints(self.run)
            if not found or found[-1].name != f"checkpoint_{self.step}.npz":
                self.save()
            self.plot()
        return self._summarise(reason)

    def _summarise(self, reason: str, error: Exception | None = None) -> dict:
        """How the run ended, written to train_summary.json by rank 0 (so that the file never
        describes an earlier stop): ``resumes_from`` is the newest checkpoint's update, which equals
        ``steps`` after a clean stop; an error or a second signal may leave updates after it."""
        # epochs completed, one whose last batch was the last update among them (as a resume that makes no update finds it)
        ended = self.batch_in_epoch > 0 and self.batch_in_epoch >= len(self._epoch_batches(self.epoch))
        summary = {"steps": self.step, "epochs": self.epoch + ended, "train_seconds": round(self.train_seconds, 1),
                   "stopped_by": reason, "resumes_from": self.saved_step, "best_valid_nll": finite_or_none(self.best_valid),
                   "world_size": self.comm.world_size}
        if error is not None:
            summary["error"] = f"{type(error).__name__}: {error}"
        if self.main:
            try:
                write_file(self.run / "train_summary.json", json.dumps(summary, indent=2, allow_nan=False))
            except OSError:
                if error is None:
                    raise  # (after an error, the error is what to report: a full disk may have caused both)
        return summary

    def plot(self) -> None:
        h = self.history
        if not h:
            return
        steps = [r["step"] for r in h]
        plot_curves(self.run / "loss.png", steps, {"train (label-smoothed)": [r["loss"] for r in h],
                                                   "valid NLL": [(r["step"], r["valid_nll"]) for r in h if "valid_nll" in r]},
                    title="learning curves", ylabel="loss per target token")
        plot_curves(self.run / "lr.png", steps, {"learning rate": [r["lr"] for r in h]}, title="Noam schedule",
                    ylabel="learning rate")
        bleus = [(r["step"], r["valid_bleu"]) for r in h if "valid_bleu" in r]
        if bleus:
            plot_curves(self.run / "bleu.png", steps, {"valid BLEU": bleus}, title="validation BLEU", ylabel="BLEU")
