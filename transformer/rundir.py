"""A run directory belongs to one run: an exclusive lock while a command writes into it, and a
fresh ``train`` never mixes its files with an old run's.

``train`` (and ``average`` when it writes into a run directory) holds :class:`RunLock` for as
long as it writes: :class:`transformer.files.Lock` on the run directory, whose holder a second
writer names when it refuses.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import minitensor as mt

from .checkpoint import (CheckpointError, average_checkpoints, kind_of, load_checkpoint, model_config, newest_loadable,
                         prune_checkpoints, read_meta, save_checkpoint, step_checkpoints)
from .files import LOCK_NAME, Busy, Lock, holder_of, remove_stale, sha256_of, write_file
from .flags import InputError
from .fused import fuse
from .model import Transformer
from .progress import ranges, read_metrics
from .settings import SettingsError, TrainSettings, run_differences
from .tokenizer import Tokenizer, fingerprint

# files that say a run has trained in the directory (spm.model and cache/ alone are only prepared data)
RUN_FILES = ("metrics.jsonl", "best.npz", "train_summary.json")


class RunDirInUse(Exception):
    """A fresh ``train`` was pointed at a directory that holds another run."""


class RunLock(Lock):
    """``with RunLock(run_dir):`` holds the run directory's lock; raises
    :class:`transformer.files.Busy` if a live process holds it."""

    def __init__(self, run: str | Path, command: str | None = None):
        super().__init__(run, "wait for it to finish or use another --run-dir", command)
        self.run = self.folder


def check_not_busy(folder: str | Path) -> None:
    """Raise :class:`transformer.files.Busy` if a live process holds ``folder``'s lock (for
    writers that only add one file, such as ``average --output``)."""
    if who := holder_of(folder):
        raise Busy(f"{folder} is in use by {who}; write elsewhere or wait for it to finish")


def previous_run(run: str | Path) -> list[Path]:
    """The step checkpoints of an earlier run in ``run`` (empty for a new one, or after a start
    that failed before its first checkpoint: that left nothing to continue)."""
    return step_checkpoints(run) if Path(run).is_dir() else []


RUN_RECORD = "run.json"  # the run's id, given at its start: every checkpoint the run saves carries it


def recorded_run_id(run: str | Path) -> str | None:
    """The id in ``run``'s ``run.json``, or None where there is none to read (missing, garbled)."""
    try:
        run_id = json.loads((Path(run) / RUN_RECORD).read_text()).get("run_id")
    except (OSError, ValueError, AttributeError):
        return None
    return run_id if isinstance(run_id, str) and run_id else None


def run_id_of(run: str | Path, note=None) -> str | None:
    """The id of the run in ``run``: its ``run.json``'s; where that is missing or garbled, the id
    its training checkpoints carry, when they agree (said through ``note``). None only where no
    checkpoint carries one (a run from before run ids). Checkpoints that disagree are refused,
    naming them: an unknown id must not let another run's checkpoint pass for this run's."""
    run = Path(run)
    if (recorded := recorded_run_id(run)) is not None:
        return recorded
    ids: dict[str | None, list[str]] = {}
    for path in step_checkpoints(run):
        try:
            meta = read_meta(path)
        except CheckpointError:
            continue  # (damaged: named by whichever command reads it)
        theirs = meta.get("run_id")
        ids.setdefault(theirs if isinstance(theirs, str) and theirs else None, []).append(path.name)
    state = "missing" if not (run / RUN_RECORD).exists() else "unreadable"
    if len(ids) > 1:
        groups = "; ".join(f"{', '.join(names)}: {f'run {rid[:12]}...' if rid else 'no run id'}"
                           for rid, names in ids.items())
        raise InputError(f"{run / RUN_RECORD} is {state}, and the checkpoints in {run} are not of one run ({groups}): "
                         "move the other run's checkpoints out, or put the run's run.json back")
    found = next(iter(ids), None)
    if found is not None and note is not None:
        note(f"note: {run / RUN_RECORD} is {state}: the run's id is taken from its "
             f"{len(ids[found])} checkpoint(s), which agree")
    return found


def record_run_id(run: str | Path, run_id: str) -> str:
    """Write the id of the run in ``run`` to its ``run.json`` (left as it is when it holds that id
    already, so that its ``since`` stays the run's start); returns it."""
    if recorded_run_id(run) == run_id:
        return run_id
    write_file(Path(run) / RUN_RECORD, json.dumps({"run_id": run_id, "since": time.strftime("%Y-%m-%d %H:%M:%S")},
                                                  indent=2) + "\n")
    return run_id


# what a start that saved no checkpoint leaves: its logs and plots (spm.model and cache/ are prepared data, kept)
LEFTOVERS = (*RUN_FILES, "settings.json", "loss.png", "lr.png", "bleu.png", "profile.json", RUN_RECORD)
# every file train, evaluate and average write in a run directory under a fixed name (besides checkpoints)
OWN_FILES = (*LEFTOVERS, "spm.model", "spm.vocab", "data.json", "evaluation.json", "hypotheses.txt", "average.npz",
             LOCK_NAME, "train.log")


OWN_FOLDERS = ("evaluations", "cache", "tensorboard")  # every file in these is the run's too


def run_file(path: str | Path) -> bool:
    """Whether ``path`` is one of a run directory's own files (a folder holding an ``spm.model``):
    a name in :data:`OWN_FILES` or any ``.npz`` (checkpoints) in it, or anything in its
    :data:`OWN_FOLDERS`. Other commands' outputs must not replace them."""
    path = Path(path).absolute()
    for run in list(path.parents)[:3]:
        if (run / "spm.model").is_file():
            inside = path.relative_to(run).parts
            if len(inside) == 1:
                return path.name in OWN_FILES or path.suffix == ".npz"
            return inside[0] in OWN_FOLDERS
    return False


def leftovers(run: str | Path) -> list[Path]:
    """The logs of a start in ``run`` that saved no checkpoint (a start that failed or diverged)."""
    run = Path(run)
    return [run / name for name in LEFTOVERS if (run / name).exists()] if not previous_run(run) else []


def check_fresh(run: str | Path) -> None:
    """A new ``train`` (no ``--resume``) must not add its checkpoints beside an old run's."""
    found = previous_run(run)
    if found:
        raise RunDirInUse(f"{run} already holds a run ({', '.join(p.name for p in found[-3:])}); continue it with "
                          "--resume, train into a new --run-dir, or add --overwrite to archive the old run first")


def archive(run: str | Path, entries: list[Path] | None = None) -> Path | None:
    """Move ``entries`` (by default everything in ``run`` but its lock) into a sibling
    ``<name>.archived-<time>`` folder; returns that folder (None when there was nothing to move)."""
    run = Path(run)
    if entries is None:
        entries = [p for p in run.iterdir() if p.name != LOCK_NAME] if run.is_dir() else []
    if not entries:
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    dest = run.with_name(f"{run.name}.archived-{stamp}")
    n = 2
    while dest.exists():
        dest, n = run.with_name(f"{run.name}.archived-{stamp}-{n}"), n + 1
    dest.mkdir()
    for p in entries:
        shutil.move(str(p), dest / p.name)
    return dest


# ---------------------------------------------------------------------------- a run's model and identity


@dataclass
class Loaded:
    """A model ready to translate, and where its weights came from."""

    model: Transformer
    tokenizer: Tokenizer
    name: str          # labels the weights in result file names: checkpoint_2177, average3-checkpoint_2177
    files: list[str]   # the checkpoints read
    meta: dict         # the (newest) checkpoint's metadata


def refuse_copy_task_run(run: Path, advice: str = "train a translator with python -m transformer train") -> None:
    """Refuse, saying what it is, a folder that holds what examples/copy_task.py writes (its
    summary scores exact copies) where a translation run is expected."""
    try:
        copy_task = "exact_match" in json.loads((run / "summary.json").read_text())
    except (OSError, ValueError, TypeError):
        return
    if copy_task:
        raise InputError(f"{run}: a copy-task run (examples/copy_task.py), not a translation run: its results are in "
                         f"{run / 'summary.json'} and {run / 'examples.txt'}; {advice}")


def holds_translation_run(folder: Path) -> bool:
    """Whether ``folder`` holds what ``train`` writes (its BPE model, run record, checkpoints or logs)."""
    return folder.is_dir() and (any((folder / name).exists() for name in ("spm.model", RUN_RECORD, "settings.json",
                                                                        "train_summary.json", "data.json"))
                                or bool(step_checkpoints(folder)))


def load_model(run: Path, checkpoint: str | None = None, average: int | None = None, device: str = "cpu") -> Loaded:
    """A run directory's model: a given checkpoint, the average of the last N, or the newest that loads.
    A checkpoint trained with another vocabulary than the run's ``spm.model`` is refused, naming both."""
    check_run_dir(run)
    if not run.exists():
        raise InputError(f"--run-dir {run}: no such directory; check --run-dir, or train first")
    if not (run / "spm.model").exists():
        refuse_copy_task_run(run)
        raise InputError(f"{run}: not a run directory of this tool (no spm.model in it); check --run-dir, or train first")
    tok = Tokenizer(run / "spm.model")
    note = lambda msg: print(msg, file=sys.stderr)  # noqa: E731
    if checkpoint:
        ck, files = load_checkpoint(checkpoint), [Path(checkpoint)]
        name = Path(checkpoint).stem
        if ck["meta"].get("vocab_sha256") not in (None, tok.fingerprint()):  # another run's weights are fine, its vocabulary not
            raise InputError(f"--checkpoint {checkpoint} was trained with another vocabulary than {run / 'spm.model'}: "
                             "it belongs to another run; give that run's --run-dir, or a checkpoint of this run")
    elif average and average > 1:
        ck, files = average_of(run, average, "--average", note)
        name = f"average{len(files)}-{files[-1].stem}"
    else:  # the newest of the run's own that loads, saying which were passed over and why
        own = runs_own(run, listed(run, note), note)
        if not own:
            raise InputError(f"{run}: none of its checkpoints is the run's own (see above)")
        ck, path = newest_loadable(own, warn=note)
        files, name = [path], path.stem
    model = fuse(Transformer(model_config(ck["meta"], files[-1])))  # the fused forms: faster decoding, same values
    model.load_state_dict(ck["model"])
    return Loaded(model.to(device).eval(), tok, name, [str(f) for f in files], ck["meta"])


def listed(run: Path, note) -> list[Path]:
    """The step checkpoints in ``run`` (:func:`transformer.checkpoint.step_checkpoints`, whose notes
    go to ``note``); refused, saying why, when there is none."""
    if not (found := step_checkpoints(run, warn=note)):
        refuse_copy_task_run(run)
        raise InputError(f"{run}: no checkpoint_<step>.npz files; train first")
    return found


def average_of(run: Path, last: int, flag: str, note) -> tuple[dict, list[Path]]:
    """(the average of the run's last ``last`` checkpoints in ``run``, their paths): only the run's
    own (:func:`runs_own`), of one run (:func:`check_same_run`), fewer with a note when fewer are
    there. A training run in the directory deletes all but its last ``--keep-last``: a
    checkpoint it deletes while this reads it is passed over for the newest ones again, with a
    note that says so."""
    quiet = lambda msg: None  # noqa: E731 (a second look names nothing twice)
    for attempt in range(4):
        say = note if attempt == 0 else quiet
        files = runs_own(run, listed(run, say), say)[-last:]
        if not files:
            raise InputError(f"{flag} {last}: none of the checkpoints in {run} is the run's own"
                             f"{' (see above)' if attempt == 0 else ''}")
        try:
            check_same_run(files)
            ck = average_checkpoints(files)
        except FileNotFoundError:
            gone = ", ".join(p.name for p in files if not p.exists())
            note(f"note: {gone} was deleted while it was read (a train running in {run} keeps only its last "
                 f"--keep-last checkpoints): averaging the newest {last} again")
            continue
        if len(files) < last:
            note(f"note: {flag} {last}, but {run} holds {len(files)} checkpoint(s) of its run: averaging those")
        return ck, files
    raise InputError(f"{flag} {last}: the checkpoints in {run} were deleted faster than they could be read (a train "
                     "running there keeps only its last --keep-last): average once it stops, or fewer of them")


def not_the_runs(run: Path, note=None):
    """A function of a checkpoint's metadata: why it is not the run in ``run``'s (trained with
    another vocabulary than its ``spm.model``, or given another run id), or None. ``note`` hears
    where the run's id came from, when not from its run.json (:func:`run_id_of`)."""
    model = run / "spm.model"
    vocabulary = fingerprint(model) if model.is_file() else None
    run_id = run_id_of(run, note)

    def why(meta: dict) -> str | None:
        if vocabulary and meta.get("vocab_sha256") not in (None, vocabulary):
            return f"trained with another vocabulary than {model}"
        return another_run(meta, run, run_id)
    return why


def runs_own(run: Path, found: list[Path], warn) -> list[Path]:
    """The checkpoints of ``found`` that are the run's own; each other run's is named through
    ``warn`` and left out (a damaged one stays in, for its reader to name)."""
    why, ours = not_the_runs(run, warn), []
    for path in found:
        try:
            reason = why(read_meta(path))
        except CheckpointError:
            reason = None
        if reason:
            warn(f"skipping {path.name}: {reason}")
        else:
            ours.append(path)
    return ours


def checkpoint_kind(path: Path) -> str | None:
    """The kind of checkpoint ``path`` holds (:data:`transformer.checkpoint.KINDS`), or None when it is not one."""
    try:
        return kind_of(read_meta(path))
    except CheckpointError:
        return None


def check_same_run(files: list[Path]) -> None:
    """Checkpoints to be averaged must come from one run: the same model, recipe, data and
    vocabulary (:func:`transformer.train.run_differences`); the first difference found is named."""
    metas = [read_meta(f) for f in files]
    newest = metas[-1]
    for f, meta in zip(files[:-1], metas[:-1]):
        if differing := run_differences(meta, newest, labels=(f"in {f.name}", f"in {files[-1].name}")):
            raise InputError(f"{f} and {files[-1]} are not checkpoints of one run, and an average of them would "
                             f"mean nothing: {'; '.join(differing)}")


def check_run_dir(path: Path, flag: str = "--run-dir") -> None:
    if path.exists() and not path.is_dir():
        raise InputError(f"{flag} {path}: a file, not a directory")


def resumable(run: Path, run_id: str | None) -> dict:
    """The metadata of the newest checkpoint of the run in ``run`` (``run_id``, when known) whose
    metadata reads and holds the run's settings: what ``--resume`` continues (``"own"``: those
    settings, rebuilt). Refuses, before anything is written, when there is none (a misspelled
    ``--run-dir`` would otherwise start a new run from update 0)."""
    found = step_checkpoints(run)
    if not found:
        refuse_copy_task_run(run)
        where = (f"{run} does not exist" if not run.exists() else f"{run} holds no checkpoint_<step>.npz")
        raise InputError(f"--resume: {where}, so there is no run to continue (check --run-dir; leave --resume out to "
                         "start a new run)")
    problems = []
    for path in reversed(found):
        try:
            meta = read_meta(path)
            if (why := another_run(meta, run, run_id)) is not None:
                raise CheckpointError(f"{path} is {why}")
            return {**meta, "own": own_settings(meta, path), "path": path}
        except CheckpointError as e:
            problems.append(str(e))
    raise InputError(f"--resume: none of the {len(found)} checkpoint(s) in {run} can be used: {'; '.join(problems)}")


def another_run(meta: dict, run: Path, run_id: str | None) -> str | None:
    """Why a checkpoint is another run's than the one in ``run``, going by the ids both were given
    at their start (None where it is this run's, or either id is unknown)."""
    theirs = meta.get("run_id")
    if run_id is None or not isinstance(theirs, str) or theirs == run_id:
        return None
    return f"another run's checkpoint (its run id {theirs[:12]}... is not {run / RUN_RECORD}'s {run_id[:12]}...)"


def own_settings(meta: dict, path: Path) -> TrainSettings | None:
    """The training settings stored in a checkpoint (None in one written before they were)."""
    own = meta.get("settings")
    if own is None:
        return None
    try:
        return TrainSettings(model=model_config({"config": own["model"]}, path),
                             **{k: v for k, v in own.items() if k != "model"})
    except (KeyError, TypeError, AttributeError, SettingsError) as e:
        raise CheckpointError(f"{path} is damaged: the settings stored in it are not ones this tool writes ({e})") \
            from None


def check_vocabulary(run: Path, meta: dict) -> None:
    """A resumed run needs the BPE model it was trained with: refused before anything is read
    or written when ``spm.model`` is missing or another (a new one would be trained, or the id
    cache encoded again, for checkpoints that cannot use it)."""
    model = run / "spm.model"
    if not model.is_file():
        raise InputError(f"--resume: {model} is missing, and the run's checkpoints need the vocabulary they were "
                         "trained with; put it back (a new one would not match them)")
    trained_with = meta.get("vocab_sha256")
    if isinstance(trained_with, str) and sha256_of(model) != trained_with:
        raise InputError(f"--resume: {model} is not the vocabulary the run was trained with (its SHA-256 is "
                         f"{sha256_of(model)[:12]}..., the checkpoints' {trained_with[:12]}...); put the run's own back")


# ---------------------------------------------------------------------------- a training run's own checkpoints
class RunCheckpoints:
    """A training run's checkpoints in its run directory, for ``trainer`` (a
    :class:`transformer.train.Trainer`): what one records (:meth:`meta`: the weights' run, its
    identity, the place in the data, the random state), whether one is this run's
    (:meth:`foreign`), writing one (:meth:`save`, keeping the newest ``keep_last`` of the run's
    own), and going on from the newest of the run's own (:meth:`resume`, at any world size)."""

    def __init__(self, trainer):
        self.t = trainer

    def meta(self) -> dict:
        t = self.t
        return {"step": t.step, "epoch": t.batches.epoch, "batch_in_epoch": t.batches.done,
                "schedule": t.sched.state_dict(), "rng": mt.get_rng_state(), "config": t.cfg.to_dict(),
                "settings": asdict(t.s), "vocab_sha256": t.tok.fingerprint(),
                "best_valid": finite_or_none(t.best_valid), "longest_source": t.longest_source,
                "train_seconds": t.train_seconds, "world_size": t.comm.world_size,
                "loss_scaler": t.scaler.state_dict() if t.scaler.enabled else None, "data": t.data,
                "run_id": t.run_id}

    def foreign(self, meta: dict) -> str | None:
        """Why a checkpoint is not this run's (another vocabulary, model or recipe), or None."""
        t = self.t
        if kind_of(meta) != "training":
            return f"it holds {kind_of(meta)} weights without the optimizer's state, so training cannot go on from it"
        if meta.get("vocab_sha256") != t.tok.fingerprint():
            return f"trained with another vocabulary than {t.tok.path}"
        differing = run_differences(meta, {"settings": asdict(t.s), "data": t.data, "run_id": t.run_id},
                                    ("in it", "in this run"))
        try:
            other_model = model_config(meta, "it") != t.cfg
        except CheckpointError as e:
            return str(e)
        if differing or other_model:
            return f"not a checkpoint of this run ({'; '.join(differing) or 'another model'})"
        return None

    def restore(self, ck: dict) -> str | None:
        """Take the model, optimizer, schedule, random state and place in the data from a loaded
        checkpoint; returns why it could not (metadata altered by hand), or None. A failure part
        way is harmless: the next checkpoint tried sets every one of them again."""
        t, meta = self.t, ck["meta"]
        try:
            t.model.load_state_dict(ck["model"])
            t.model.to(t.s.device)
            t.opt.load_state_dict(ck["optimizer"])
            t.sched.load_state_dict(meta["schedule"])
            mt.set_rng_state(meta["rng"])
            t.step, t.batches.epoch, t.batches.done = (_count(meta, k) for k in ("step", "epoch", "batch_in_epoch"))
            t.saved_step = t.step
            best, t.train_seconds = meta["best_valid"], float(meta["train_seconds"])
            t.best_valid = math.inf if best is None else float(best)  # null when no validation had run
            if t.scaler.enabled and meta.get("loss_scaler"):
                t.scaler.load_state_dict(meta["loss_scaler"])
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
            return f"its metadata is damaged ({type(e).__name__}: {e})"
        return None

    def save(self) -> Path | None:
        """checkpoint_<step>.npz (rank 0), then the run's own beyond the newest ``keep_last`` deleted."""
        t = self.t
        if not t.main:
            return None
        path = t.run / f"checkpoint_{t.step}.npz"
        self.move_aside(path)
        path = save_checkpoint(path, t.model, t.opt, self.meta())
        t.saved_step = t.step
        prune_checkpoints(t.run, t.s.keep_last, ours=lambda meta: self.foreign(meta) is None)
        return path

    def move_aside(self, path: Path) -> None:
        """A file where a checkpoint is to be saved (damaged, another run's, one that resume could
        not use, not a checkpoint at all) is kept under another name, with a note, not replaced."""
        if not (path.exists() or path.is_symlink()):
            return
        try:
            why = "a directory" if path.is_dir() else self.foreign(load_checkpoint(path)["meta"])
        except CheckpointError as e:
            why = str(e)
        moved = path.with_name(f"{path.stem}.moved-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}{path.suffix}")
        os.replace(path, moved)
        print(f"note: {path.name} was in the way of update {self.t.step}'s checkpoint ({why or 'not the one resumed'}): "
              f"moved to {moved.name}", file=sys.stderr)

    def resume(self) -> bool:
        """Go on from the newest checkpoint of this run in the run directory (False if there is
        none); a damaged checkpoint, or another run's, is skipped with a note. The metrics log
        keeps the records up to that checkpoint, one per update, in order (with a note where
        some are missing). Works for any world size: training goes on at the first batch not
        yet consumed."""
        t = self.t
        note = (lambda msg: print(msg, file=sys.stderr)) if t.main else None
        found = step_checkpoints(t.run, warn=note) if t.run.exists() else []
        if t.main and t.run.exists():
            remove_stale(t.run)  # the temporary files of a run killed while it wrote
        if not found:
            return False
        newest_loadable(found, warn=note, refuse=lambda ck: self.foreign(ck["meta"]) or self.restore(ck))
        metrics = t.run / "metrics.jsonl"
        if metrics.exists():  # forget log lines written after that checkpoint; one record per update, in order
            records = [r for r in read_metrics(metrics, warn=note) if r["step"] <= t.step]
            t.history = sorted({r["step"]: r for r in records}.values(), key=lambda r: r["step"])
            if t.main and [r["step"] for r in records] != [r["step"] for r in t.history]:
                note(f"note: {metrics} held updates out of order or more than once: kept the last record of each, "
                     "in order")
            if t.main:
                write_file(metrics, "".join(json.dumps(r) + "\n" for r in t.history))
                if missing := sorted(set(range(1, t.step + 1)) - {r["step"] for r in t.history}):
                    note(f"note: {metrics} holds no record of update(s) {ranges(missing)} (lines cut or deleted): "
                         "training goes on; the log and the curves have a gap there")
        return True


def finite_or_none(x: float) -> float | None:
    """``x``, or None (JSON null) where it is infinite or NaN: strict JSON has no Infinity."""
    return x if math.isfinite(x) else None


def _count(meta: dict, key: str) -> int:
    """A whole number >= 0 from a checkpoint's metadata (ValueError otherwise)."""
    value = meta[key]
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{key} is {value!r}")
    return value
