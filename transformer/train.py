"""Training a translation model: token batches, label smoothing, the Noam schedule, periodic
validation, JSONL metrics, plots, checkpoints that survive a crash, exact resume.

The loop in one sentence: for each update, backpropagate the label-smoothed loss of each of
``update_freq`` token batches, sum the gradients over ranks, set the learning rate from
equation (3), and step Adam with the gradients divided by the update's target tokens (clipped,
optionally); every ``eval_every`` updates validate, and every ``save_every`` updates write
``checkpoint_<step>.npz`` (keeping the last N and the best). :meth:`Trainer.update` is that
update; :meth:`Trainer.fit` the loop around it, and what follows an update (logging,
validation, checkpoints). What the loop leans on lives beside it: the batches of each update
(:class:`transformer.batching.UpdateBatches`), when to stop (:class:`transformer.signals.StopPolicy`,
asked between updates), the log (:class:`transformer.progress.RunLog`), and the run's
checkpoints, resume and identity (:class:`transformer.rundir.RunCheckpoints`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
from tqdm import tqdm

import minitensor as mt
from minitensor import amp, distributed, optim
from minitensor.distributed import Communicator, SingleProcess

from .batching import Batch, UpdateBatches, collate, lengths, token_batches
from .checkpoint import save_checkpoint, step_checkpoints
from .corpus import ParallelData
from .evaluate import bleu, translate
from .files import write_file
from .fused import fuse
from .graphed import GraphedUpdates, check_processes
from .loss import batch_loss
from .model import Transformer
from .progress import ProfiledUpdates, RunFileError, RunLog, read_metrics  # noqa: F401 (RunFileError, read_metrics: here too)
from .rundir import RunCheckpoints, finite_or_none
from .schedule import NoamSchedule, paper_adam
from .settings import PRECISIONS, SettingsError, TrainSettings
from .signals import CLOSED_STDOUT, ENDING_SIGNALS, EXIT_CLOSED_PIPE, StopPolicy, handled
from .tokenizer import Tokenizer


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


class TrainingDiverged(FloatingPointError):
    """The loss became NaN or infinite; the last good checkpoint is left as it was."""


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
        self.data = data or {}  # the data settings (language pair, filter, ...): part of the run's identity
        self.run_id = run_id  # given at the run's start (run.json): another run's checkpoint has another
        self.tok = tokenizer
        self.amp_dtype = PRECISIONS[settings.precision]
        # float16 needs loss scaling; bfloat16 has float32's exponent range and does not
        self.scaler = amp.LossScaler(enabled=settings.precision == "fp16")
        self.last_skipped = False
        self._loss = 0.0, 1.0  # the last update's loss sum (on the device) and 1 / its tokens
        self.on_gpu = mt.backend.normalize_device(settings.device) == "cuda"
        if self.on_gpu:
            mt.cuda.set_tf32(settings.tf32)
        self.comm = comm or SingleProcess()
        self.main = self.comm.rank == 0
        self.valid_data = valid
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
        self.batches = UpdateBatches(train.src, train.tgt, settings.max_tokens, settings.seed,
                                     settings.update_freq * self.comm.world_size, self.comm.rank, self.comm.world_size)
        self.step = 0
        self.best_valid = math.inf
        self.train_seconds = 0.0
        self.history: list[dict] = []
        self.saved_step: int | None = None  # the update of the newest checkpoint, this run's
        self.checkpoints = RunCheckpoints(self)
        self.stop = StopPolicy(self.comm, settings.max_minutes, settings.max_steps)  # fit() makes the one it asks
        check_processes(settings, self.comm.world_size)
        self.graphed = GraphedUpdates(self) if settings.cuda_graphs else None
        if resume:
            self.checkpoints.resume()
        if self.main:  # after resume() has compared the checkpoint with these settings
            write_file(self.run / "settings.json", json.dumps(asdict(settings), indent=2, allow_nan=False))

    # ------------------------------------------------------------------ one update
    def update(self, batches: list[Batch], progress: float = 0.0) -> None:
        """One optimizer step over this rank's ``batches`` (``self.batches.mine(group)``): forward,
        the paper's loss, backward, the sum over ranks, the step. ``progress``: the fraction of
        the budget spent, for the learning rate's cool-down.

        Nothing here waits for the device (on one process, without --clip-norm or fp16, whose
        checks read one number each): the update's loss per target token stays there until
        :meth:`read_loss`. With fp16, an update whose gradients overflowed is skipped
        (``self.last_skipped``; the schedule does not count it) and the loss scale halved.
        """
        reseed_dropout(self.s.seed, self.step, self.comm.rank)
        self.model.train()
        if self.graphed is not None:   # the same update, replayed from a CUDA graph where one is
            self.last_skipped = self.graphed.update(batches, progress)
            self._count_update()
            return
        self.opt.zero_grad()
        loss_sum, tokens, dev = 0.0, 0, self.s.device
        for b in batches:
            with amp.autocast(self.amp_dtype, weights=self.model.parameters()):  # the 16-bit weights in one launch
                loss = batch_loss(self.model, mt.tensor(b.src, device=dev), mt.tensor(b.tgt_in, device=dev), b.tgt_out,
                                  self.cfg.pad_id, self.s.smoothing, reduction="sum")
            self.scaler.backward(loss)                          # fp16: (loss · S).backward()
            loss_sum, tokens = loss_sum + loss.data, tokens + b.target_tokens  # the sum stays on the device
        grad_scale, (loss_sum,) = distributed.reduce_gradients(self.comm, self.opt.params, tokens, (loss_sum,))
        self._loss = loss_sum, grad_scale                       # the loss per token, once read
        if self.s.clip_norm > 0:
            norm = optim.grad_norm(self.opt.params, grad_scale / self.scaler.scale)  # the host reads it
            grad_scale *= optim.clip_factor(norm, self.s.clip_norm)
        self.sched.step(progress)                               # Equation 3's learning rate
        self.last_skipped = self.scaler.step(self.opt, grad_scale)  # Adam, from the gradients times grad_scale / S
        self._count_update()

    def _count_update(self) -> None:
        """The update counted: the schedule does not count a skipped one, and a skip at the smallest
        loss scale ends the run."""
        if self.last_skipped:
            self.sched.steps -= 1
            if self.scaler.scale <= self.scaler.min_scale:
                raise TrainingDiverged(
                    f"float16 gradients overflow even at the smallest loss scale ({self.scaler.scale:g}) at update "
                    f"{self.step + 1}. {where_to_go_on(self.run, '--precision bf16 or fp32, a lower --lr-factor, or --clip-norm')}")
        self.step += 1

    def read_loss(self) -> float:
        """The last update's loss per target token (summed over ranks), read to the host: on a
        GPU this waits for that update to finish."""
        loss_sum, grad_scale = self._loss
        return float(loss_sum) * grad_scale

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
    def fit(self) -> dict:
        """Train until max_steps, max_epochs or max_minutes; returns the run summary. Raises
        :class:`Interrupted` (after saving) when a SIGINT or SIGTERM asked it to stop."""
        self.stop = StopPolicy(self.comm, self.s.max_minutes, self.s.max_steps, self.step, self.train_seconds,
                               say=lambda line: tqdm.write(line, file=sys.stderr))
        with handled(ENDING_SIGNALS, self.stop.request):
            try:
                summary = self._loop()
            except KeyboardInterrupt:  # a second signal
                self._summarise("stopped at once")
                raise StoppedAtOnce(self.step, self.saved_step, self.s.save_every, main=self.main) from None
            except Exception as e:
                self._summarise("diverged" if isinstance(e, TrainingDiverged) else "failed", error=e)
                raise
        if summary["stopped_by"] == "interrupted":
            raise Interrupted(self.step, self.run, main=self.main, closed_stdout=self.stop.request.name == CLOSED_STDOUT)
        if self.main:
            print(stop_line(self, summary["stopped_by"]), file=sys.stderr, flush=True)
        return summary

    def _loop(self) -> dict:
        """The loop. Between updates the stop policy is asked; each update is launched, and while
        the device works on it the next batches are collated and the update before is logged
        (its loss read). The host waits for the device only to log, validate, save or stop."""
        s = self.s
        log = RunLog(self.run, s, self.main, self.step, self.history,
                     closed_stdout=lambda: self.stop.request.request(CLOSED_STDOUT))
        profiled = ProfiledUpdates(s.profile if self.main else 0, self.run, done=self.step)
        unread = None  # the last update's record, its loss not yet read
        try:
            while True:
                epoch, progress = self.batches.roll(), 0.0
                stop = "max_steps" if self.step >= s.max_steps else "max_epochs" if epoch >= s.max_epochs else None
                if stop is None:
                    stop, progress = self.stop.check(self.step)
                if stop:
                    if unread:
                        self._log(log, *unread)
                    return self._finish(log, "interrupted" if stop == "signal" else stop)
                batches = self.batches.next()
                measure = self.on_gpu and s.memory_every > 0 and (self.step + 1) % s.memory_every == 0
                with (mt.cuda.PeakMemory() if measure else contextlib.nullcontext()) as mem, \
                        profiled.update(self.step + 1):
                    self.update(batches, progress)
                self.train_seconds = self.stop.seconds()
                record = {"step": self.step, "epoch": self.batches.epoch, "lr": self.opt.lr,
                          "seconds": round(self.train_seconds, 2)}
                if measure:
                    record["peak_memory_mib"] = round(mem.peak_bytes / 2**20, 1)
                if self.scaler.enabled:
                    record.update(loss_scale=self.scaler.scale, **({"skipped": True} if self.last_skipped else {}))
                if self.step < s.max_steps:
                    self.batches.ahead(s.max_epochs)  # host work while the device runs the update
                unread = self._after_update(log, unread, (record, self._loss))
        finally:
            log.close()

    def _after_update(self, log: RunLog, unread, this):
        """What follows an update: the update before is logged (its loss is read now, while this
        one runs); then, when one is due, validation and a checkpoint, which wait for this update
        and log it first. Returns the record left unread (this update's, or None)."""
        if unread:
            self._log(log, *unread)
        validate = self.main and self.valid_data is not None and self.step % self.s.eval_every == 0
        save = self.step % self.s.save_every == 0
        if validate or save:
            self._log(log, *this, validate=validate)
            this = None
        if save:
            self.checkpoints.save()
        return this

    def _log(self, log: RunLog, record: dict, loss: tuple, validate: bool = False) -> None:
        """Complete an update's ``record`` with its loss (read now), and validation when
        ``validate`` (a new best is saved as best.npz); then log it."""
        loss_sum, grad_scale = loss
        value = float(loss_sum) * grad_scale
        if not math.isfinite(value) and not record.get("skipped"):
            raise TrainingDiverged(f"loss is {value} at update {record['step']}; stopping. "
                                   f"{where_to_go_on(self.run, 'a lower --lr-factor or with --clip-norm')}")
        record = {"step": record["step"], "epoch": record["epoch"], "loss": finite_or_none(value), **record}
        if record.get("skipped") and self.main:
            tqdm.write(f"update {record['step']}: float16 gradients overflowed; skipped it, "
                       f"loss scale now {record['loss_scale']:g}")
        if validate:
            record.update(self.validate())
            self.train_seconds = self.stop.seconds()
            if record["valid_nll"] < self.best_valid:
                self.best_valid = record["valid_nll"]
                save_checkpoint(self.run / "best.npz", self.model, None, self.checkpoints.meta(), kind="best")
        log.write(record, self.step, self.train_seconds)

    def _finish(self, log: RunLog, reason: str) -> dict:
        """The end of the loop: a checkpoint of the last update (unless it has one) and the curves.
        First, a report of a GPU kernel's stalled wait that has not reached the host yet raises
        (the last update's gradients would be wrong)."""
        mt.cuda.check_turns()
        if self.main:
            found = step_checkpoints(self.run)
            if not found or found[-1].name != f"checkpoint_{self.step}.npz":
                self.checkpoints.save()
            log.plot()
        return self._summarise(reason)

    def _summarise(self, reason: str, error: Exception | None = None) -> dict:
        """How the run ended, written to train_summary.json by rank 0 (so that the file never
        describes an earlier stop): ``resumes_from`` is the newest checkpoint's update, which equals
        ``steps`` after a clean stop; an error or a second signal may leave updates after it."""
        summary = {"steps": self.step, "epochs": self.batches.epochs_ended(), "train_seconds": round(self.train_seconds, 1),
                   "stopped_by": reason, "resumes_from": self.saved_step, "best_valid_nll": finite_or_none(self.best_valid),
                   "world_size": self.comm.world_size}
        if self.graphed is not None:   # how many shapes got a graph, and how many updates were replayed
            summary["cuda_graphs"] = {"graphs": len(self.graphed.graphs), "replays": self.graphed.replays}
        if error is not None:
            summary["error"] = f"{type(error).__name__}: {error}"
        if self.main:
            try:
                write_file(self.run / "train_summary.json", json.dumps(summary, indent=2, allow_nan=False))
            except OSError:
                if error is None:
                    raise  # (after an error, the error is what to report: a full disk may have caused both)
        return summary


def reseed_dropout(seed: int, step: int, rank: int) -> None:
    """Dropout masks depend on (seed, update, rank) only, so a resumed run, whatever its world
    size, draws exactly the masks an uninterrupted one would."""
    mt.manual_seed(int(np.random.SeedSequence([seed, step, rank]).generate_state(1)[0]))


def where_to_go_on(run: Path, change: str) -> str:
    """After a failure that a resume would only repeat: go on with ``change`` (a resumed run
    would repeat the same updates), and where the finished work is."""
    if step_checkpoints(run):
        return (f"The checkpoints in {run} are from before this update and untouched. Train again with "
                f"{change}: into a new --run-dir, or here with --overwrite (which archives this run)")
    return (f"No checkpoint was saved yet. Train again with {change}; the same --run-dir will do (the logs of "
            "this start are moved aside)")


def stop_line(t: Trainer, reason: str) -> str:
    """Why training ended, in one line (the progress bar alone would end at, say, 13%)."""
    s = t.s
    why = {"max_steps": f"reached --max-steps {s.max_steps}",
           "max_minutes": f"the time budget (--max-minutes {s.max_minutes:g}) ran out",
           "max_epochs": f"reached --max-epochs {s.max_epochs}"}[reason]
    if math.isfinite(t.best_valid):
        best = f"; best validation NLL {t.best_valid:.3f}"
    elif t.valid_data is not None:  # a short run: say why best.npz and bleu.png are missing
        best = f"; no validation yet (every {s.eval_every} updates, --eval-every), so no best.npz or bleu.png"
    else:
        best = ""
    return f"stopped at update {t.step} of {s.max_steps}: {why}{best}"
