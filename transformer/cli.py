"""``python -m transformer``: data, train, translate, evaluate, average.

    python -m transformer data wmt14 --out data/wmt14      # the paper's data, downloaded and checked
    python -m transformer train --preset multi30k-cpu --run-dir runs/m30k
    python -m transformer evaluate --run-dir runs/m30k --average 3
    echo "A dog runs in the park." | python -m transformer translate --run-dir runs/m30k
    python -m transformer average --run-dir runs/m30k --last 3 --output runs/m30k/average.npz
    mpiexec -n 2 python -m transformer train --preset multi30k-cpu --run-dir runs/m30k-dp --distributed

Errors are one line, ``error: <message>``, on stderr: exit status 2 for bad usage or input
(flags out of range, missing or damaged files), 1 for a failure while working, 130 when a
signal (SIGINT, SIGTERM, SIGHUP) stopped the command (training after saving a checkpoint,
translate keeping its finished lines), 141 when the reader of the output went away. A ``note:``
line says where the tool chose for the user. ``--debug`` or ``MINITENSOR_DEBUG=1`` adds the
traceback.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import signal
import sys
import tempfile
import time
import traceback
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

from tqdm import tqdm

from minitensor import DeviceError, allocator, backend, blas, distributed, threads

from . import data as D
from . import presets, wmt14
from .checkpoint import (CheckpointError, CheckpointWriteError, average_checkpoints, kind_of, load_checkpoint,
                         model_config, newest_loadable, read_meta, save_checkpoint, step_checkpoints)
from .config import RANGES as MODEL_RANGES
from .corpus import PairFilter, ParallelText, bpe_sample, encode_corpus
from .decoding import MAX_BEAM
from .download import DownloadError, sha256_of
from .evaluate import DECODE_MEMORY_GIB, LONG_LINES, DecodingTooLarge, LongLineError, bleu, translate
from .flags import Boolean, Choice, FlagError, Parser, Real, Text, Whole, help_text, usage_error
from .model import Transformer
from .presets import PRESETS, plan_batches
from .rundir import (RUN_RECORD, FileWriteError, RunDirBusy, RunDirInUse, RunDirUnwritable, RunLock, archive,
                     check_fresh, check_not_busy, leftovers, previous_run, record_run_id, run_file, run_id_of, write_file)
from .signals import Stopped, handled, raise_stopped
from .tokenizer import (Tokenizer, TokenizerModelError, VocabularyTooLarge, VocabularyTooSmall, encode_cached,
                        fingerprint)
from .settings import DATA_NAMES, HELP, RANGES, SettingsError, TrainSettings, model_with, run_differences
from .train import Interrupted, ParallelData, RunFileError, Trainer, TrainingDiverged, read_metrics


# pairs the joint BPE model is trained on, sampled from the whole corpus (every pair of a smaller one)
BPE_SAMPLE_PAIRS = 1_000_000


class InputError(Exception):
    """Bad usage or input, found before any work: ``error: <message>``, exit status 2."""


EXIT_FAILURE, EXIT_INPUT, EXIT_INTERRUPTED = 1, 2, 130
# what the user can mend: reported with exit status 2 (anything else is a failure, status 1)
INPUT_ERRORS = (InputError, SettingsError, FlagError, D.DataError, CheckpointError, RunFileError, TrainingDiverged,
                TokenizerModelError, VocabularyTooLarge, VocabularyTooSmall, FileNotFoundError, NotADirectoryError,
                IsADirectoryError, UnicodeDecodeError, RunDirBusy, RunDirInUse, RunDirUnwritable, DeviceError,
                LongLineError, DecodingTooLarge)


TRAIN_HELP = """Train a translation model: read and filter the parallel text, train the joint BPE model on a
sample, encode (cached in the run directory), and train with token batches, validating and
saving checkpoints as it goes. A preset (--preset) sets the data, the model and the recipe;
every other flag overrides one of its settings.

    python -m transformer train --preset multi30k-cpu --run-dir runs/m30k
    python -m transformer train --preset wmt14-base --data-dir data/wmt14 --run-dir runs/wmt14 --device cuda
    python -m transformer train --run-dir runs/m30k --resume        # continue an interrupted run
"""


def plain_text(doc: str) -> str:
    """A docstring as --help shows it: reStructuredText's ``code`` and :role:`name` as plain text."""
    doc = re.sub(r":\w+:`~?([^`]*)`", r"\1", doc)
    return doc.replace("``", "").replace("::\n", ":\n")


# ---------------------------------------------------------------------------- data preparation
def load_corpora(args) -> dict:
    """{"train": ParallelText (streamed), "valid": (src, tgt) lists, "test": lists or None}."""
    if args.dataset == "multi30k":
        folder = D.multi30k_files(args.data_dir)
        s, t = args.src_lang, args.tgt_lang
        return {"train": ParallelText(files=((folder / f"train.{s}.gz", folder / f"train.{t}.gz"),)),
                "valid": D.multi30k("val", s, t, folder),
                "test": D.multi30k("test_2016_flickr", s, t, folder)}
    if args.data_dir and not args.train_src:  # a folder that `data wmt14` prepared
        train, valid, test = (wmt14.split_files(args.data_dir, split, args.src_lang, args.tgt_lang)
                              for split in wmt14.SPLITS)
        return {"train": ParallelText(files=(train,)), "valid": D.read_parallel(*valid), "test": D.read_parallel(*test)}
    if not (args.train_src and args.train_tgt and args.valid_src and args.valid_tgt):
        raise InputError("wmt14 needs --data-dir (a folder prepared by: python -m transformer data wmt14 --out DIR) "
                         "or --train-src/--train-tgt (comma-separated lists allowed) and --valid-src/--valid-tgt "
                         "(newstest2013); --test-src/--test-tgt (newstest2014) are optional")
    train = ParallelText(files=tuple(zip(args.train_src.split(","), args.train_tgt.split(","))))
    test = D.read_parallel(args.test_src, args.test_tgt) if args.test_src and args.test_tgt else None
    return {"train": train, "valid": D.read_parallel(args.valid_src, args.valid_tgt), "test": test}


def prepare(args, run: Path, vocab_size: int, limit: int | None = None, quiet: bool = False,
            timings: dict | None = None, expect_text: str | None = None):
    """Filter, train (or load) the joint BPE model on a sample, encode on every core (cached):
    -> tokenizer, train, valid, test, and the training text's SHA-256. The training text is
    streamed, never held. ``timings``, when given, receives each stage's seconds.
    ``expect_text``: the SHA-256 the training text must have (a resumed run's), checked before
    anything is encoded."""
    timings = {} if timings is None else timings
    with _stage(timings, "read and filter, BPE sample"):
        corpora = load_corpora(args)
        text_sha256 = corpora["train"].fingerprint()
        if expect_text is not None and text_sha256 != expect_text:
            raise InputError(f"--resume: the training text is not the run's (its SHA-256 is {text_sha256[:12]}..., the "
                             f"run was trained on {expect_text[:12]}...); give the run's own data (--data-dir or the "
                             "--train-src/--train-tgt files it was trained on)")
        keep = PairFilter(args.max_words, args.max_ratio, limit)
        model_path = run / "spm.model"
        if not model_path.exists():
            src, tgt, report = bpe_sample(corpora["train"], keep, BPE_SAMPLE_PAIRS)
            if not src:
                raise D.DataError(f"no training pair is left to learn from ({report}); raise --max-words or "
                                  "--max-ratio, or check the training files")
    if model_path.exists():
        tok = Tokenizer(model_path)
    else:
        if not quiet:
            print(f"training data: {report}; training the BPE model on {len(src):,} of them", file=sys.stderr)
        with _stage(timings, "BPE training"):
            tok = Tokenizer.train(src + tgt, run / "spm", vocab_size)
        del src, tgt
    with _stage(timings, "encode and cache"):
        src, tgt, report = encode_corpus(tok, corpora["train"], keep, run / "cache" / "train",
                                         progress=not (quiet or args.no_progress), text_sha256=text_sha256)
        if len(src) == 0:
            raise D.DataError(f"no training pair is left to learn from ({report}); raise --max-words or --max-ratio, or "
                              "check the training files")
        vs, vt = corpora["valid"]
        cache = run / "cache"
        valid = ParallelData(encode_cached(tok, vs, cache / "valid.src.npz"),
                             encode_cached(tok, vt, cache / "valid.tgt.npz"), vs, vt)
    allocator.release_free_memory()  # why: the text read and sampled is garbage now; training reuses none of it
    if not quiet:
        print(f"training data: {report}; {len(src.flat) + len(tgt.flat):,} tokens; ready in "
              f"{sum(timings.values()):.1f} s ({', '.join(f'{k} {v:.1f} s' for k, v in timings.items())})",
              file=sys.stderr)
    return tok, ParallelData(src, tgt), valid, corpora["test"], text_sha256


@contextlib.contextmanager
def _stage(timings: dict, name: str):
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - start


# ---------------------------------------------------------------------------- loading models
@dataclass
class Loaded:
    """A model ready to translate, and where its weights came from."""

    model: Transformer
    tokenizer: Tokenizer
    name: str          # labels the weights in result file names: checkpoint_2177, average3-checkpoint_2177
    files: list[str]   # the checkpoints read
    meta: dict         # the (newest) checkpoint's metadata


def load_model(run: Path, checkpoint: str | None = None, average: int | None = None, device: str = "cpu") -> Loaded:
    """A run directory's model: a given checkpoint, the average of the last N, or the newest that loads.
    A checkpoint trained with another vocabulary than the run's ``spm.model`` is refused, naming both."""
    check_run_dir(run)
    if not (run / "spm.model").exists():
        raise InputError(f"{run}: not a run directory of this tool (no spm.model in it); check --run-dir, or train first")
    tok = Tokenizer(run / "spm.model")
    note = lambda msg: print(msg, file=sys.stderr)  # noqa: E731
    if checkpoint:
        ck, files = load_checkpoint(checkpoint), [Path(checkpoint)]
        name = Path(checkpoint).stem
        if ck["meta"].get("vocab_sha256") not in (None, tok.fingerprint()):  # another run's weights are fine, its vocabulary not
            raise InputError(f"--checkpoint {checkpoint} was trained with another vocabulary than {run / 'spm.model'}: "
                             "it belongs to another run; give that run's --run-dir, or a checkpoint of this run")
    else:
        found = step_checkpoints(run, warn=note)
        if not found:
            raise InputError(f"{run}: no checkpoint_<step>.npz files; train first")
        if average and average > 1:
            files = runs_own(run, found, note)[-average:]
            if not files:
                raise InputError(f"--average {average}: none of the checkpoints in {run} is the run's own (see above)")
            if len(files) < average:
                note(f"note: --average {average}, but {run} holds {len(files)} checkpoint(s) of its run: averaging those")
            check_same_run(files)
            ck, name = average_checkpoints(files), f"average{len(files)}-{files[-1].stem}"
        else:  # the newest that loads, saying which were skipped and why
            ours = not_the_runs(run)
            ck, path = newest_loadable(found, warn=note, refuse=lambda ck: ours(ck["meta"]))
            files, name = [path], path.stem
    model = Transformer(model_config(ck["meta"], files[-1]))
    model.load_state_dict(ck["model"])
    return Loaded(model.to(device).eval(), tok, name, [str(f) for f in files], ck["meta"])


def not_the_runs(run: Path):
    """A function of a checkpoint's metadata: why it is not the run in ``run``'s (trained with
    another vocabulary than its ``spm.model``, or given another run id), or None."""
    model = run / "spm.model"
    vocabulary = fingerprint(model) if model.is_file() else None
    run_id = run_id_of(run)

    def why(meta: dict) -> str | None:
        if vocabulary and meta.get("vocab_sha256") not in (None, vocabulary):
            return f"trained with another vocabulary than {model}"
        return another_run(meta, run, run_id)
    return why


def runs_own(run: Path, found: list[Path], warn) -> list[Path]:
    """The checkpoints of ``found`` that are the run's own; each other run's is named through
    ``warn`` and left out (a damaged one stays in, for its reader to name)."""
    why, ours = not_the_runs(run), []
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


def _checkpoint_kind(path: Path) -> str | None:
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


# ---------------------------------------------------------------------------- commands
DEFAULT_PRESET = "multi30k-cpu"
# a run's data settings beside its preset: kind, default (None: the preset's) and help. The parser
# leaves them None, so that a resumed run keeps its own
DATA_SETTINGS = {
    "preset": (Choice(tuple(sorted(PRESETS))), None,
               f"the data, model and recipe (transformer/presets.py; default {DEFAULT_PRESET}, or a resumed run's own)"),
    "dataset": (Choice(("multi30k", "wmt14")), None, "multi30k (Multi30k task 1) or wmt14 (a folder `data wmt14` "
                                                      "prepared, or --train-src and the other files) (default: the "
                                                      "preset's)"),
    "src_lang": (Text("language code"), "en", "the source side's language code (default en)"),
    "tgt_lang": (Text("language code"), "de", "the target side's language code (default de)"),
    "vocab_size": (Whole(5, 2**20), None, "joint BPE vocabulary: 4 special pieces and at least one more (default: the "
                                          "preset's)"),
    "limit": (Whole(1, 10**12), None, "use only the first N training pairs (for quick trials)"),
    "max_words": (Whole(1, 10**6), 250, "drop training pairs with a longer side (default 250)"),
    "max_ratio": (Real(1, 1e6), 3.0, "drop training pairs with a larger length ratio (default 3)"),
}


def add_data_args(p):
    for name, (kind, _, text) in DATA_SETTINGS.items():
        _value(p, "--" + name.replace("_", "-"), kind, None, text)
    p.add_argument("--data-dir", type=Text("folder"),
                   help="multi30k: a local Multi30k directory (default: $MULTI30K_DIR, else download into the cache); "
                        "wmt14: a folder prepared by `python -m transformer data wmt14`")
    for side, what in (("train", "training"), ("valid", "validation (newstest2013)"), ("test", "test (newstest2014)")):
        for lang, language in (("src", "source"), ("tgt", "target")):
            many = ("files, comma-separated (europarl,commoncrawl,news), each a regular file" if side == "train"
                    else "file")
            p.add_argument(f"--{side}-{lang}", type=Text("file"), help=f"wmt14 without --data-dir: the {what} "
                                                                      f"{language} {many}, plain or .sgm")


def check_data_args(args) -> None:
    """The data flags, checked before anything is read (each error names its flag)."""
    if args.data_dir and not Path(args.data_dir).is_dir():
        hint = ("a folder holding Multi30k's files, or leave --data-dir out to download them" if args.dataset == "multi30k"
                else "prepare one with: python -m transformer data wmt14 --out DIR")
        raise InputError(f"--data-dir {args.data_dir}: no such directory ({hint})")
    if args.dataset == "multi30k":
        return
    if args.data_dir and not args.train_src:
        wmt14.read_manifest(args.data_dir)
        return
    for side in ("train", "valid", "test"):
        for lang in ("src", "tgt"):
            for path in filter(None, (getattr(args, f"{side}_{lang}") or "").split(",")):
                if not Path(path).exists():
                    raise InputError(f"--{side}-{lang} {path}: no such file")
                if not Path(path).is_file():  # a pipe or a device would be empty on the second reading
                    raise InputError(f"--{side}-{lang} {path}: not a regular file (a folder, a pipe or a device); "
                                     "training reads its data more than once, so save it to a file first")


def check_run_dir(path: Path, flag: str = "--run-dir") -> None:
    if path.exists() and not path.is_dir():
        raise InputError(f"{flag} {path}: a file, not a directory")


DATA_RECORD = "data.json"  # in a run directory: the --data-dir or data files it was trained from, its data settings
DATA_FILES = ("train_src", "train_tgt", "valid_src", "valid_tgt", "test_src", "test_tgt")  # --train-src, ...


def remember_data(args, run: Path, data: dict) -> None:
    """Record the run's ``--data-dir`` or ``--train-src``/... files (absolute) and data settings,
    so that ``--resume`` and ``evaluate`` find the data again (the checkpoints hold the settings
    too)."""
    folder = str(Path(args.data_dir).resolve()) if args.data_dir else None
    files = {name: ",".join(str(Path(p).resolve()) for p in value.split(","))
             for name in DATA_FILES if (value := getattr(args, name, None))}
    write_file(run / DATA_RECORD, json.dumps({"data_dir": folder, "files": files, **data}, indent=2) + "\n")


def recall_data(args, run: Path, files: bool = False) -> None:
    """Where no data was given, use the run's own, if it is still there (with a note): its
    ``--data-dir``, or (``files``, for ``--resume``) its ``--train-src``/... files."""
    if args.data_dir or any(getattr(args, name, None) for name in DATA_FILES):
        return
    try:
        record = json.loads((run / DATA_RECORD).read_text())
        folder, own = record.get("data_dir"), record.get("files") or {}
        own = {k: v for k, v in own.items() if k in DATA_FILES and isinstance(v, str) and v}
    except (OSError, ValueError, AttributeError, TypeError):
        return
    if isinstance(folder, str) and folder and Path(folder).is_dir():
        args.data_dir = folder
        print(f"note: --data-dir {folder}, the run's own (give --data-dir to use another)", file=sys.stderr)
    elif files and own:
        if missing := [p for v in own.values() for p in v.split(",") if not Path(p).is_file()]:
            raise InputError(f"--resume: the run's own data files are gone from where it was trained on them "
                             f"({', '.join(missing)}; see {run / DATA_RECORD}): give --train-src and the rest where "
                             "they are now")
        for name, value in own.items():
            setattr(args, name, value)
        flags = " ".join(f"--{name.replace('_', '-')} {value}" for name, value in own.items())
        print(f"note: {flags}: the run's own files (give --train-src and the rest to use others)", file=sys.stderr)


def recall_test_files(args, run: Path, meta: dict) -> bool:
    """For a model trained on WMT14 files (``--train-src``, ...) and evaluated with no test set
    given: its own ``--test-src``/``--test-tgt`` as ``--src``/``--ref`` (with a note; True), or a
    refusal; Multi30k's test set would be another task's. False for other models."""
    data = meta.get("data") if isinstance(meta.get("data"), dict) else {}
    if data.get("dataset") != "wmt14":
        return False
    try:
        own = json.loads((run / DATA_RECORD).read_text()).get("files") or {}
        src, ref = own.get("test_src"), own.get("test_tgt")
    except (OSError, ValueError, AttributeError, TypeError):
        src = ref = None
    if not (isinstance(src, str) and isinstance(ref, str) and Path(src).is_file() and Path(ref).is_file()):
        raise InputError(f"the model in {run} was trained on WMT14 files, and no test set of its is at hand: give "
                         "--src and --ref (newstest2014), or --data-dir (a folder `data wmt14` prepared)")
    args.src, args.ref = src, ref
    print(f"note: --src {src} --ref {ref}: the run's own test files (give --src and --ref to score others)",
          file=sys.stderr)
    return True


def model_languages(args, meta: dict) -> None:
    """Set ``--src-lang``/``--tgt-lang`` to the pair the model was trained on (stored in its
    checkpoint; en and de for one that stored none) where they were not given, and refuse a
    pair the model does not translate: scoring an en->de model on de->en would be a BLEU near 0."""
    data = meta.get("data") if isinstance(meta.get("data"), dict) else {}
    for flag, key, default in (("--src-lang", "src_lang", "en"), ("--tgt-lang", "tgt_lang", "de")):
        trained = data.get(key) if isinstance(data.get(key), str) else None
        if getattr(args, key) is None:
            setattr(args, key, trained or default)
        elif trained and getattr(args, key) != trained:
            raise InputError(f"{flag} {getattr(args, key)}: the model translates {data.get('src_lang')} to "
                             f"{data.get('tgt_lang')} (it was trained so); leave {flag} out, or evaluate a run "
                             f"trained on that pair")


def resumable(run: Path, run_id: str | None) -> dict:
    """The metadata of the newest checkpoint of the run in ``run`` (``run_id``, when known) whose
    metadata reads and holds the run's settings: what ``--resume`` continues (``"own"``: those
    settings, rebuilt). Refuses, before anything is written, when there is none (a misspelled
    ``--run-dir`` would otherwise start a new run from update 0)."""
    found = step_checkpoints(run)
    if not found:
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


def data_settings(args, preset: str, saved: dict, source: Path | None = None) -> dict:
    """The run's data settings: the flags given, else the resumed run's own (``saved``, read from
    the checkpoint ``source``), else the preset's and the defaults. They are written into
    ``args`` (the readers take them from there) and returned, to be stored in every checkpoint
    beside the training settings."""
    values = {name: default for name, (_, default, _) in DATA_SETTINGS.items()}
    values.update(preset=preset, dataset=PRESETS[preset]["dataset"], vocab_size=presets.vocab_size(preset))
    for name, value in saved.items():
        if name in values and not (name == "limit" and value is None):
            try:
                DATA_SETTINGS[name][0].check(DATA_NAMES[name], value)
            except FlagError as e:
                raise CheckpointError(f"{source} is damaged: its data settings are not ones this tool writes ({e})") \
                    from None
        if name in values:
            values[name] = value
    values.update({k: getattr(args, k) for k in values if getattr(args, k, None) is not None})
    for name, value in values.items():
        setattr(args, name, value)
    return values


def check_memory(settings: TrainSettings, vocab_size: int) -> None:
    """Refuse a model whose weights, gradients and Adam moments alone (4 float32 copies) exceed
    this machine's memory, before any data is read (it would fail inside NumPy, or swap)."""
    weights = settings.model_config(vocab_size).num_parameters()
    need = 16 * weights
    have = backend.memory_bytes(settings.device)
    if have and need > have:
        raise InputError(f"the model has {weights:,} weights: {need / 2**30:,.1f} GiB for its weights, gradients and "
                         f"Adam's moments alone, more than the {have / 2**30:,.1f} GiB of memory of --device "
                         f"{settings.device}; choose a smaller --d-model, --d-ff, --layers or --vocab-size")


def sized_batches(settings: TrainSettings, tokens: int, comm, vocab_size: int, given: dict) -> TrainSettings:
    """A preset's ``tokens`` per update cut for this hardware (:func:`transformer.presets.plan_batches`:
    as few batches per device as its memory holds), unless --max-tokens and --update-freq are
    both ``given``; the choice and its reason are said at the start."""
    max_tokens, update_freq, why = plan_batches(tokens, comm.world_size, backend.memory_bytes(settings.device),
                                                settings.model_config(vocab_size), given.get("max_tokens"),
                                                given.get("update_freq"))
    if comm.rank == 0:
        print(f"batches: {why}: --max-tokens {max_tokens} --update-freq {update_freq}", file=sys.stderr)
    return dataclasses.replace(settings, max_tokens=max_tokens, update_freq=update_freq)


def settings_from_flags(args, base: TrainSettings) -> tuple[TrainSettings, dict]:
    """``base`` with the flags given (and the training settings they set, by name): each
    training flag sets the setting of its name (--max-tokens: max_tokens), each model flag a
    field of the model (--layers: both stacks' N)."""
    model = {"d_model": args.d_model, "n_heads": args.n_heads, "d_ff": args.d_ff, "n_encoder_layers": args.layers,
             "n_decoder_layers": args.layers, "dropout": args.dropout, "attention_dropout": args.attention_dropout,
             "norm_first": args.norm_first, "positional": args.positional}
    given = {name: getattr(args, name) for name in RANGES if getattr(args, name, None) is not None}
    settings = dataclasses.replace(base, model=model_with(base.model, **{k: v for k, v in model.items() if v is not None}),
                                   **{**given, "run_dir": args.run_dir, "progress": not args.no_progress})
    return settings, given


def cmd_train(args) -> dict:
    run = Path(args.run_dir)
    check_run_dir(run)
    if args.resume and args.overwrite:
        raise InputError("--resume continues the run in --run-dir and --overwrite archives it: give one of them")
    run_id = run_id_of(run) if args.resume else None
    saved = resumable(run, run_id) if args.resume else {}
    saved_data = saved.get("data") if isinstance(saved.get("data"), dict) else {}
    preset = args.preset or saved_data.get("preset") or DEFAULT_PRESET
    asked_vocab = args.vocab_size
    data = data_settings(args, preset, saved_data, saved.get("path"))
    own = saved.get("own")  # a resumed run's own settings, changed only by the flags given now
    settings, given = settings_from_flags(args, own if own is not None else TrainSettings(**PRESETS[preset]["settings"]))
    if own is not None and (differing := run_differences(saved, {"settings": asdict(settings), "data": data})):
        raise InputError(f"--resume: {len(differing)} setting(s) differ from the run in {run}, which keeps its "
                         f"own (leave them out): {'; '.join(differing)}")
    if args.resume:
        check_vocabulary(run, saved)
        if (run / "metrics.jsonl").is_file():  # a damaged log is named before anything is prepared
            read_metrics(run / "metrics.jsonl")
        recall_data(args, run, files=True)
    check_data_args(args)
    check_memory(settings, args.vocab_size)
    comm = distributed.init(settings.device) if args.distributed else distributed.SingleProcess()
    if not args.resume and (tokens := PRESETS[preset].get("tokens_per_update")):
        settings = sized_batches(settings, tokens, comm, args.vocab_size, given)
    created = not run.exists()
    prepared = (run / "spm.model").exists()
    try:
        if comm.rank == 0:
            try:
                run.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise InputError(f"--run-dir {run}: cannot create it ({e.strerror or e})") from None
        with RunLock(run) if comm.rank == 0 else contextlib.nullcontext():
            if comm.rank == 0 and not args.resume:
                _make_room(run, args)
            if not args.resume and (run / "spm.model").exists():
                # a BPE model prepared earlier is reused, unless --vocab-size asks for another size
                pieces = Tokenizer(run / "spm.model").vocab_size
                if asked_vocab is not None and pieces != asked_vocab:
                    raise InputError(f"{run / 'spm.model'} has {pieces} pieces and --vocab-size asks for "
                                     f"{asked_vocab}: use a new --run-dir, or --overwrite to archive what is there")
                data["vocab_size"] = args.vocab_size = pieces
            return _train(args, settings, run, comm, data, saved_data.get("train_sha256"), run_id, saved.get("run_id"))
    except BaseException as e:
        if comm.rank == 0:
            _after_a_failed_start(run, created, prepared, e)
        raise


def _make_room(run: Path, args) -> None:
    """A new run's directory: refuse one that holds a run (or archive it, with --overwrite), and
    move aside what a failed start left, saying so."""
    if previous_run(run):
        if not args.overwrite:
            check_fresh(run)
        print(f"note: --overwrite: the old run in {run} moved to {archive(run)}", file=sys.stderr)
    elif left := leftovers(run):
        where = archive(run) if args.overwrite else archive(run, left)
        what = "everything" if args.overwrite else ", ".join(p.name for p in left)
        print(f"note: {run} held the files of a start that saved no checkpoint ({what}): moved to {where}",
              file=sys.stderr)


def _after_a_failed_start(run: Path, created: bool, was_prepared: bool, error: BaseException) -> None:
    """A start that failed leaves nothing in its way: a run directory it made and left empty is
    removed, and a note says what it keeps (the BPE model and token ids it prepared)."""
    if created and run.is_dir() and not any(run.iterdir()):
        run.rmdir()
        return
    if isinstance(error, INPUT_ERRORS) and not was_prepared and (run / "spm.model").exists() \
            and not step_checkpoints(run):
        print(f"note: the BPE model and token ids prepared in {run} are kept: the next train there reuses them",
              file=sys.stderr)


def _train(args, settings: TrainSettings, run: Path, comm, data: dict, expect_text: str | None,
           run_id: str | None, saved_id) -> dict:
    if comm.rank > 0:  # rank 0 (which made the run directory) trains the BPE model and writes the id caches first
        comm.barrier(timeout=24 * 3600)
    tok, train, valid, _, text_sha256 = prepare(args, run, args.vocab_size, args.limit, quiet=comm.rank > 0,
                                                expect_text=expect_text)
    if comm.rank == 0 and comm.world_size > 1:
        comm.barrier(timeout=24 * 3600)
    data = {**data, "train_sha256": text_sha256}
    if comm.rank == 0:  # a new run, or one from before run ids, is given one (written once its start is checked)
        run_id = run_id or (saved_id if isinstance(saved_id, str) else uuid.uuid4().hex)
    else:
        run_id = run_id_of(run)
    trainer = Trainer(settings, tok, train, valid, resume=args.resume, comm=comm, data=data, run_id=run_id)
    if comm.rank == 0:
        record_run_id(run, run_id)
        remember_data(args, run, data)
        print(f"model: {trainer.model.num_parameters():,} parameters; {len(train)} training pairs; "
              f"{comm.world_size} process(es) of {threads.count()} thread(s); starting at update {trainer.step}", file=sys.stderr)
        if trainer.step >= settings.max_steps:
            print(f"note: the run is at update {trainer.step} already, not below --max-steps {settings.max_steps}: "
                  "no update to make (raise --max-steps to go on)", file=sys.stderr)
        blas.print_advice(settings.device)
    summary = trainer.fit()
    if comm.rank == 0:
        print(json.dumps(summary, indent=2))
    return summary


def cmd_data(args) -> dict:
    if args.from_dir and not Path(args.from_dir).is_dir():
        raise InputError(f"--from {args.from_dir}: no such directory")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: not a directory")
    return wmt14.prepare(out, args.from_dir, args.url_base, progress=not args.no_progress, timeout=args.timeout,
                         retries=args.retries)


TRAINING_NAME = re.compile(r"^checkpoint_\d+\.npz$")


def cmd_average(args) -> None:
    run = Path(args.run_dir)
    check_run_dir(run)
    if not run.is_dir():
        raise InputError(f"--run-dir {run}: no such directory")
    output = Path(args.output) if args.output else run / "average.npz"
    check_output(output, "--output")
    if TRAINING_NAME.match(output.name):
        raise InputError(f"--output {output}: checkpoint_<step>.npz is how train names its training checkpoints; "
                         "choose another name (average.npz, say)")
    if output.exists():  # an earlier average of this run may be replaced; a training checkpoint or another file may not
        kind = _checkpoint_kind(output)
        if kind != "average":
            what = f"a {kind} checkpoint" if kind else "not an average this tool wrote"
            raise InputError(f"--output {output} exists and is {what}: averaging would replace it; choose another "
                             "--output")
    check_not_busy(output.parent)  # a training run writing there owns its directory
    note = lambda msg: print(msg, file=sys.stderr)  # noqa: E731
    found = runs_own(run, step_checkpoints(run, warn=note), note)[-args.last:]
    if not found:
        raise InputError(f"{run}: no checkpoints of its run to average")
    if len(found) < args.last:
        note(f"note: --last {args.last}, but {run} holds {len(found)} checkpoint(s) of its run: averaging those")
    check_same_run(found)
    if output.exists() and (differing := run_differences(read_meta(output), read_meta(found[-1]))):
        raise InputError(f"--output {output} is an average of another run ({differing[0]}): averaging would replace "
                         "it; choose another --output")
    ck = average_checkpoints(found)
    model = Transformer(model_config(ck["meta"], found[-1]))
    model.load_state_dict(ck["model"])
    out = save_checkpoint(output, model, None, {**ck["meta"], "averaged": [p.name for p in found]}, kind="average")
    print(f"averaged {', '.join(p.name for p in found)} -> {out}")


def check_output(path: Path, flag: str) -> None:
    """An output file must be writable where it is asked for: checked before any work."""
    if path.is_dir():
        raise InputError(f"{flag} {path}: a directory, not a file")
    if not path.parent.is_dir():
        raise InputError(f"{flag} {path}: the folder {path.parent} does not exist")
    if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise InputError(f"{flag} {path}: not writable")
    if len(path.name.encode()) + 20 > _name_max(path.parent):  # + room for the hidden temporary name
        raise InputError(f"{flag} {path}: the file name is too long for its folder's file system")


def _name_max(folder: Path) -> int:
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def check_decoding_args(args) -> None:
    """translate's and evaluate's flags, checked before the model is loaded (each error names
    its flag; the ranges of the others were checked where they were parsed)."""
    if args.beam > args.beam_max:
        raise InputError(f"--beam must be in [1, {args.beam_max}], got {args.beam} (--beam-max raises the upper bound)")
    try:
        backend.normalize_device(args.device)
    except (ValueError, DeviceError) as e:
        raise InputError(f"--device: {e}") from None
    if args.checkpoint and args.average:
        raise InputError("--checkpoint and --average both choose the weights: give one of them")
    if getattr(args, "data_dir", None) and not Path(args.data_dir).is_dir():
        raise InputError(f"--data-dir {args.data_dir}: no such directory")


def _translate_options(args, loaded: Loaded) -> dict:
    """translate()'s keywords from the flags; lines over what the model was trained on are split
    by default (a model trained on short sentences stops early on a much longer one)."""
    longest = loaded.meta.get("longest_source")
    max_pieces = args.max_pieces or (max(longest, 1) if longest else None)
    return dict(beam_size=args.beam, alpha=args.alpha, device=args.device, long_lines=args.long_lines,
                max_pieces=max_pieces, memory_gib=args.memory_gib)


def check_input(path: str | None) -> Path | None:
    """translate's input: a file, a pipe or a device named by --input, or stdin (None), which
    must be open."""
    if path is None:
        if sys.stdin is None:
            raise InputError("stdin is closed: give --input FILE, or pipe the text in")
        return None
    source = Path(path)
    if not source.exists():
        raise InputError(f"--input {path}: no such file")
    if source.is_dir():
        raise InputError(f"--input {path}: a directory, not a file")
    return source


def input_lines(source: Path | None) -> Iterator[str]:
    """The lines to translate, one at a time: a file's, a pipe's or stdin's (invalid UTF-8, or a
    line too long to be a sentence, named by line)."""
    return D.iter_lines(source) if source else D.decode_lines(sys.stdin.buffer, "stdin")


def count_lines(source: Path | None) -> int | None:
    """The lines of a regular file, for the progress bar; None for stdin, a pipe or a device,
    which can be read only once (and may never end)."""
    if source is None or not source.is_file():
        return None
    with open(source, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b"")) + _unterminated(source)


def _unterminated(path: Path) -> int:
    """1 when a non-empty file's last line has no line ending (it is a line all the same)."""
    size = path.stat().st_size
    if not size:
        return 0
    with open(path, "rb") as f:
        f.seek(size - 1)
        return int(f.read(1) != b"\n")


class TranslationStopped(Exception):
    """A signal stopped translate: the lines finished so far were kept."""


def cmd_translate(args) -> None:
    check_decoding_args(args)
    output = Path(args.output) if args.output else None
    source = check_input(args.input)
    if output:
        check_output(output, "--output")
        if run_file(output) or (output.is_file() and _checkpoint_kind(output)):
            raise InputError(f"--output {output} is a run's own file (a checkpoint, its BPE model, its logs): "
                             "translations would replace it; choose another --output")
        if source and output.exists() and os.path.samefile(source, output):
            raise InputError(f"--output {output} is the --input file: translating it in place would replace the "
                             "source; choose another --output")
    loaded = load_model(Path(args.run_dir), args.checkpoint, args.average, args.device)
    options = _translate_options(args, loaded)
    total = count_lines(source)
    show = not args.no_progress and (output is not None or not sys.stdout.isatty())
    typed = source is None and sys.stdin.isatty()
    chunk = 1 if typed else TRANSLATE_CHUNK  # typed lines come back at once
    partial = output.with_name(f".{output.name}.partial") if output else None
    sink = open(partial, "w", encoding="utf-8") if output else sys.stdout
    written = output or "stdout"
    try:
        with tqdm(total=total, desc="translating", unit="line", disable=not show, file=sys.stderr) as bar:
            done = 0
            for lines in batched(input_lines(source), chunk):
                text = "".join(line + "\n" for line in translate(loaded.model, loaded.tokenizer, lines, progress=False,
                                                                 first_line=done + 1, **options))
                with _writing(written):
                    sink.write(text)
                    sink.flush()
                done += len(lines)
                bar.update(len(lines))
        if output:
            with _writing(written):
                sink.close()
    except BaseException as e:  # the lines finished so far are kept, whatever stopped the rest
        kept = _keep_partial(sink, partial, output) if output else None
        if isinstance(e, KeyboardInterrupt):
            why = f"interrupted ({e.signal_name})" if isinstance(e, Stopped) else "interrupted"
            raise TranslationStopped(f"{why}: {kept}" if output else why) from None
        if isinstance(e, FileWriteError):
            raise FileWriteError(f"{e}; {kept}" if kept else str(e), e.errno) from None
        if kept:
            print(f"note: {kept}", file=sys.stderr)
        raise
    if output:
        os.replace(partial, output)


@contextlib.contextmanager
def _writing(name):
    """A failed write of translate's output (a full disk, a quota, a file-size limit) as one
    :class:`FileWriteError` naming it; a closed pipe stays a BrokenPipeError (the reader is done)."""
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as e:
        raise FileWriteError(f"could not write {name}: {e.strerror or e}", e.errno) from None


def _keep_partial(sink, partial: Path, output: Path) -> str | None:
    """Close the partial output; if it holds finished lines, move it to ``output`` and say how
    many (counted in the file: an interrupt may fall between two writes, or inside one)."""
    with contextlib.suppress(OSError):  # a full disk: what reached the file is kept all the same
        sink.close()
    text = partial.read_bytes()
    text = text[:text.rfind(b"\n") + 1]  # a line cut off mid-write is dropped
    os.truncate(partial, len(text))  # (in place: rewriting could fail on the full disk that stopped the writes)
    n = text.count(b"\n")
    if n == 0:
        partial.unlink(missing_ok=True)
        return f"no line was finished; {output} was not written"
    os.replace(partial, output)
    return f"the {n} line(s) translated so far are in {output}"


TRANSLATE_CHUNK = 256  # lines translated (and written) together: batched by length inside, in order outside


def batched(items, n: int) -> Iterator[list]:
    """Consecutive lists of ``n`` items (the last may be shorter)."""
    group = []
    for item in items:
        group.append(item)
        if len(group) == n:
            yield group
            group = []
    if group:
        yield group


def _unique(folder: Path, stem: str) -> Path:
    """``folder/stem.json``, or ``stem_2.json``, ``stem_3.json``, ... : never a file already there."""
    path, n = folder / f"{stem}.json", 2
    while path.exists():
        path, n = folder / f"{stem}_{n}.json", n + 1
    return path


def _check_writable(folder: Path, size: int) -> None:
    """evaluate writes about ``size`` bytes into ``folder`` (made if missing): tried with a file of
    its own of that size before the decoding that a failed write would waste (a read-only folder,
    a full disk, a quota)."""
    if folder.exists() and not folder.is_dir():
        raise InputError(f"{folder} is a file, not a folder, so the evaluation could not be saved there; move it away")
    where = folder if folder.is_dir() else folder.parent
    probe = None
    try:
        fd, probe = tempfile.mkstemp(dir=where, prefix=".probe-")
        with os.fdopen(fd, "wb") as f:
            for start in range(0, size, 1 << 20):
                f.write(bytes(min(1 << 20, size - start)))
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise InputError(f"{where}: cannot write {size:,} bytes there ({e.strerror or e}), so the evaluation could not "
                         "be saved; free some space or make it writable, or copy the run directory somewhere that "
                         "is") from None
    finally:
        if probe:
            with contextlib.suppress(OSError):
                os.unlink(probe)


def cmd_evaluate(args) -> dict:
    check_decoding_args(args)
    if bool(args.src) != bool(args.ref):
        raise InputError("--src and --ref go together: a source file and its reference translations")
    run = Path(args.run_dir)
    loaded = load_model(run, args.checkpoint, args.average, args.device)
    model_languages(args, loaded.meta)
    if not args.src:
        recall_data(args, run)
    own_test = not args.src and not args.data_dir and recall_test_files(args, run, loaded.meta)
    if args.src:
        src, ref = D.read_parallel(args.src, args.ref)
        name, scored = Path(args.src).stem, {"source": str(Path(args.src).resolve()), "reference": str(Path(args.ref).resolve())}
    elif args.data_dir and wmt14.is_prepared(args.data_dir):
        name = args.split or "test"
        files = wmt14.split_files(args.data_dir, name, args.src_lang, args.tgt_lang)
        src, ref = D.read_parallel(*files)
        scored = {"source": str(Path(files[0]).resolve()), "reference": str(Path(files[1]).resolve())}
    else:
        name = args.split or "test_2016_flickr"
        src, ref = D.multi30k(name, args.src_lang, args.tgt_lang, args.data_dir)
        scored = {"source": f"multi30k {name}.{args.src_lang}", "reference": f"multi30k {name}.{args.tgt_lang}",
                  "data_dir": str(Path(args.data_dir).resolve()) if args.data_dir else None}
    first = args.limit is not None and args.limit < len(src)  # a part of the set, not all of it
    if first:
        src, ref = src[:args.limit], ref[:args.limit]
    folder = run / "evaluations"
    size = 2 * sum(len(x.encode()) + 1 for x in src) + (1 << 16)  # the hypotheses (about the source's size), the scores
    _check_writable(folder, size)
    # the default test set (or, for a run trained on WMT14 files, its own), whole: the run's headline
    headline = (own_test or not args.src) and args.split is None and not first
    if headline:
        _check_writable(run, size)
    stem = f"{name[:100]}_{loaded.name[:100]}_beam{args.beam}" + (f"_alpha{args.alpha:g}" if args.alpha != 0.6 else "") \
        + (f"_first{len(src)}" if first else "")
    hyps = translate(loaded.model, loaded.tokenizer, src, progress=not args.no_progress,
                     **_translate_options(args, loaded))
    cased, lower = bleu(hyps, ref), bleu(hyps, ref, lowercase=True)
    unprinted = None  # stdout closed or full: the scores are saved all the same, then that is reported
    try:
        with _writing("stdout"):
            print(f"BLEU {cased['score']:.2f}  ({cased['signature']})")
            print(f"BLEU {lower['score']:.2f} lowercased  ({lower['signature']})", flush=True)
    except OSError as e:
        unprinted = e
        _close_stdout()
    result = {"sentences": len(src), "bleu": cased["score"], "signature": cased["signature"],
              "bleu_lowercase": lower["score"], "signature_lowercase": lower["signature"],
              "beam": args.beam, "alpha": args.alpha, "checkpoint": loaded.name, "checkpoint_files": loaded.files,
              **scored, "split": None if args.src else name, "limit": args.limit,
              "empty_hypotheses": sum(1 for h, s in zip(hyps, src) if s.strip() and not h.strip())}
    text = "\n".join(hyps) + "\n"
    try:
        folder.mkdir(exist_ok=True)
        path = _unique(folder, stem)
        result["hypotheses"] = path.with_suffix(".txt").name
        write_file(path.with_suffix(".txt"), text)
        write_file(path, json.dumps(result, indent=2, allow_nan=False))
        if headline:
            write_file(run / "hypotheses.txt", text)
            write_file(run / "evaluation.json", json.dumps(result, indent=2, allow_nan=False))
    except OSError as e:  # the space probed for went to something else meanwhile
        raise FileWriteError(f"{e if isinstance(e, FileWriteError) else f'could not write in {folder}: {e.strerror}'}; "
                             "the scores above were not saved: free some space and evaluate again", e.errno) from None
    print(f"written to {path} and {path.with_suffix('.txt').name}", file=sys.stderr)
    if isinstance(unprinted, FileWriteError):
        raise FileWriteError(f"{unprinted}; the scores are saved in {path}", unprinted.errno)
    if unprinted is not None:
        raise unprinted  # a closed pipe: exit 141, quietly
    return result


VERBS_THAT_DECODE = (  # name, function, one line for the verb list, the verb's --help description
    ("translate", cmd_translate, "translate text (stdin -> stdout, or files)",
     "Translate one sentence per line with a trained run's model (its newest checkpoint, --checkpoint, or the "
     "average of the last --average N): beam search with a length penalty (Section 6.1: beam 4, alpha 0.6)."),
    ("evaluate", cmd_evaluate, "BLEU on a test set (Multi30k test2016 by default)",
     "Translate a test set and score it with sacreBLEU, cased and lowercased: Multi30k test2016 by default, "
     "newstest2014 in a folder `data wmt14` prepared, or --src/--ref files. The scores, their signatures and the "
     "hypotheses are written to <run-dir>/evaluations/; a whole default test set also to evaluation.json."),
)


def build_parser() -> argparse.ArgumentParser:
    """Every verb and flag; each value flag parses with its declared kind (:mod:`transformer.flags`),
    so a value out of range is refused here, naming the flag, before any work."""
    p = _Parser(prog="python -m transformer", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--debug", action="store_true", help="print the traceback of an error")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p.verbs = sub.choices

    d = sub.add_parser("data", help="download and prepare a dataset (WMT14 English-German)",
                       description=plain_text(wmt14.__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("dataset", type=Choice(("wmt14",)), metavar="{wmt14}",
                   help="the dataset to prepare: wmt14 (English-German, Section 5.1)")
    d.add_argument("--out", required=True, type=Text("folder"),
                   help="the folder to prepare (train/valid/test files and manifest.json)")
    d.add_argument("--from", dest="from_dir", metavar="DIR", type=Text("folder"),
                   help="a folder that already holds the archives (no download): " + ", ".join(wmt14.ARCHIVES))
    d.add_argument("--url-base", type=Text("URL"),
                   help="a mirror that serves the archives under their own names (URL_BASE/dev.tgz)")
    _value(d, "--timeout", Real(0, 86400, low_open=True), 60.0,
           "seconds a wait for the server may last, and the longest a download may go on receiving almost nothing "
           "(default 60)")
    _value(d, "--retries", Whole(0, 100), 3, "times a download that broke off is resumed before giving up (default 3)")
    d.add_argument("--no-progress", action="store_true", help="no progress bars")
    d.set_defaults(func=cmd_data)

    t = sub.add_parser("train", help="train a translation model", description=TRAIN_HELP,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    t.add_argument("--run-dir", required=True, type=Text("folder"),
                   help="checkpoints, metrics, plots and the BPE model go here")
    t.add_argument("--resume", action="store_true",
                   help="continue the run in --run-dir from its newest checkpoint, with its own settings (flags given "
                        "may change its budget: --max-steps, --max-minutes, ...)")
    t.add_argument("--overwrite", action="store_true",
                   help="--run-dir holds an old run: move it to <run-dir>.archived-<time> first and start afresh")
    t.add_argument("--no-progress", action="store_true", help="plain log lines instead of a progress bar")
    t.add_argument("--distributed", action="store_true",
                   help="data parallel over the processes of an mpiexec launch (NCCL on cuda, MPI on cpu)")
    add_data_args(t)
    # the model's flags: each sets the field of TransformerConfig of its name (--layers: N of both stacks)
    _value(t, "--d-model", MODEL_RANGES["d_model"], None, HELP["d_model"])
    _value(t, "--n-heads", MODEL_RANGES["n_heads"], None, HELP["n_heads"])
    _value(t, "--d-ff", MODEL_RANGES["d_ff"], None, HELP["d_ff"])
    _value(t, "--layers", MODEL_RANGES["n_encoder_layers"], None, HELP["layers"])
    _value(t, "--dropout", MODEL_RANGES["dropout"], None, HELP["dropout"])
    _value(t, "--attention-dropout", MODEL_RANGES["attention_dropout"], None, HELP["attention_dropout"])
    _value(t, "--norm-first", MODEL_RANGES["norm_first"], None, HELP["norm_first"])
    _value(t, "--positional", MODEL_RANGES["positional"], None, HELP["positional"])
    # the recipe's flags: each sets the TrainSettings field of its name
    _value(t, "--max-tokens", RANGES["max_tokens"], None, HELP["max_tokens"])
    _value(t, "--update-freq", RANGES["update_freq"], None, HELP["update_freq"])
    _value(t, "--smoothing", RANGES["smoothing"], None, HELP["smoothing"])
    _value(t, "--warmup", RANGES["warmup"], None, HELP["warmup"])
    _value(t, "--lr-factor", RANGES["lr_factor"], None, HELP["lr_factor"])
    _value(t, "--clip-norm", RANGES["clip_norm"], None, HELP["clip_norm"])
    _value(t, "--cooldown", RANGES["cooldown"], None, HELP["cooldown"])
    _value(t, "--max-steps", RANGES["max_steps"], None, HELP["max_steps"])
    _value(t, "--max-epochs", RANGES["max_epochs"], None, HELP["max_epochs"])
    _value(t, "--max-minutes", RANGES["max_minutes"], None, HELP["max_minutes"])
    _value(t, "--eval-every", RANGES["eval_every"], None, HELP["eval_every"])
    _value(t, "--bleu-sentences", RANGES["bleu_sentences"], None, HELP["bleu_sentences"])
    _value(t, "--beam-size", RANGES["beam_size"], None, HELP["beam_size"])
    _value(t, "--alpha", RANGES["alpha"], None, HELP["alpha"])
    _value(t, "--save-every", RANGES["save_every"], None, HELP["save_every"])
    _value(t, "--keep-last", RANGES["keep_last"], None, HELP["keep_last"])
    _value(t, "--seed", RANGES["seed"], None, HELP["seed"])
    _value(t, "--device", RANGES["device"], None, HELP["device"])
    _value(t, "--precision", RANGES["precision"], None, HELP["precision"])
    _value(t, "--tf32", RANGES["tf32"], None, HELP["tf32"])
    _value(t, "--memory-every", RANGES["memory_every"], None, HELP["memory_every"])
    _value(t, "--profile", RANGES["profile"], None, HELP["profile"])
    t.set_defaults(func=cmd_train)

    for name, func, helptext, about in VERBS_THAT_DECODE:
        c = sub.add_parser(name, help=helptext, description=about)
        c.add_argument("--run-dir", required=True, type=Text("folder"), help="a run directory that train wrote")
        c.add_argument("--checkpoint", type=Text("file"), help="a checkpoint file (default: the newest, or --average N)")
        _value(c, "--average", Whole(1, 10**6), None, "average the last N checkpoints (default: the newest)")
        _value(c, "--beam", Whole(1, 10**4), 4, "beam size, at most --beam-max (default 4; 1: greedy)")
        _value(c, "--beam-max", Whole(1, 10**4), MAX_BEAM,
               f"the largest --beam allowed (default {MAX_BEAM}: a larger beam rarely helps and costs memory)")
        _value(c, "--alpha", Real(0, 100), 0.6, "length penalty (default 0.6)")
        c.add_argument("--device", type=Text("device"), default="cpu", help="cpu or cuda (default cpu)")
        _value(c, "--memory-gib", Real(0, 2**20, low_open=True), DECODE_MEMORY_GIB,
               f"decoding memory allowed per batch, estimated from beam, batch and length; larger batches are split "
               f"(default {DECODE_MEMORY_GIB:g})")
        _value(c, "--long-lines", Choice(LONG_LINES), "split",
               "a line longer than --max-pieces: translate it in parts (split, the default), translate its start and "
               "say so (truncate), or stop with an error naming it (error)")
        _value(c, "--max-pieces", Whole(1, 2**20), None,
               "the longest line, in pieces, translated whole (default: the longest training source, at most the "
               "model's positions)")
        if name == "translate":
            c.add_argument("--input", type=Text("file"),
                           help="a text file, a pipe or a device, one sentence per line (default: stdin)")
            c.add_argument("--output", type=Text("new file"),
                           help="where to write (default: stdout); written as it goes, finished lines kept when a "
                                "signal (Ctrl-C, SIGTERM, SIGHUP) stops it")
            c.add_argument("--no-progress", action="store_true",
                           help="no progress bar (shown on stderr when the output is a file or a pipe)")
        else:
            c.add_argument("--no-progress", action="store_true", help="no progress bar")
            c.add_argument("--split", type=Text("name"),
                           help="Multi30k split (default test_2016_flickr); in a WMT14 folder, test (newstest2014, "
                                "the default) or valid (newstest2013)")
            c.add_argument("--data-dir", type=Text("folder"),
                           help="a local Multi30k directory, or a folder `data wmt14` prepared")
            c.add_argument("--src", type=Text("file"), help="a source file (WMT: newstest2014, plain or .sgm); needs --ref")
            c.add_argument("--ref", type=Text("file"), help="the reference translations of --src")
            c.add_argument("--src-lang", type=Text("language code"),
                           help="the source side's language code (default: the model's, as it was trained)")
            c.add_argument("--tgt-lang", type=Text("language code"),
                           help="the target side's language code (default: the model's, as it was trained)")
            _value(c, "--limit", Whole(1, 10**12), None, "only the first N sentences")
        c.set_defaults(func=func)

    a = sub.add_parser("average", help="average the last N checkpoints into one file",
                       description="Average the weights of a run's last --last checkpoints (Section 6.1 averages the "
                                   "last 5 or 20) into one checkpoint for translate and evaluate --checkpoint. The "
                                   "checkpoints must be one run's; the average holds no optimizer state, so training "
                                   "cannot resume from it.")
    a.add_argument("--run-dir", required=True, type=Text("folder"), help="a run directory that train wrote")
    _value(a, "--last", Whole(1, 10**6), 5, "how many of the newest checkpoints (default 5)")
    a.add_argument("--output", type=Text("new file"), help="the averaged checkpoint (default: <run-dir>/average.npz)")
    a.set_defaults(func=cmd_average)
    return p


def _value(parser: argparse.ArgumentParser, flag: str, kind, default, text: str) -> None:
    """A flag that takes a value of ``kind``; --help shows the kind after ``text``."""
    parser.add_argument(flag, type=kind, default=default, metavar=_metavar(kind), help=help_text(kind, text))


def _metavar(kind) -> str:
    if isinstance(kind, Choice):
        return "{" + ",".join(map(str, kind.names)) + "}"
    if isinstance(kind, Text):
        return kind.role.upper().replace(" ", "_")
    return {Whole: "N", Real: "X", Boolean: "true|false"}[type(kind)]


class _Parser(Parser):
    """:class:`transformer.flags.Parser` with usage errors raised, so that :func:`run` reports
    them like any other."""

    verbs: dict = {}  # the top-level parser's: each verb's own parser (for errors that point at its --help)

    def parse_args(self, args=None, namespace=None):
        known, extra = self.parse_known_args(args, namespace)
        if extra:  # reported by the verb's parser, so that the hint names the verb's --help
            self.verbs.get(getattr(known, "command", None), self).error(f"unrecognized arguments: {' '.join(extra)}")
        return known

    def error(self, message):
        raise InputError(usage_error(message, self.prog))


def main(argv=None):
    """Run one command and return its result; errors propagate (for scripts and tests)."""
    args = build_parser().parse_args(argv)
    return args.func(args)


def _close_progress_bars() -> None:
    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()


EXIT_CLOSED_PIPE = 128 + signal.SIGPIPE  # what a shell reports for a program ended by SIGPIPE (`... | head -1`)


def run(argv=None) -> int:
    """The command line: :func:`main` with errors as one ``error:`` line and an exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv or os.environ.get("MINITENSOR_DEBUG", "") not in ("", "0")
    argv = [a for a in argv if a != "--debug"]
    try:
        with handled((signal.SIGTERM, signal.SIGHUP), raise_stopped):  # as Ctrl-C: training catches them itself
            main(argv)
        sys.stdout.flush()
        return 0
    except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001 - every failure becomes one line
        error = e
    if isinstance(error, BrokenPipeError):  # the reader of the output has all it wanted (`| head`)
        _close_stdout()
        return EXIT_CLOSED_PIPE
    if isinstance(error, (Interrupted, TranslationStopped)):
        status, message = EXIT_INTERRUPTED, str(error)
    elif isinstance(error, KeyboardInterrupt):
        status, message = EXIT_INTERRUPTED, (f"interrupted ({error.signal_name})" if isinstance(error, Stopped)
                                             else "interrupted")
    elif isinstance(error, INPUT_ERRORS):
        status, message = EXIT_INPUT, _message(error)
    else:
        status, message = EXIT_FAILURE, _message(error)
    _close_progress_bars()
    with contextlib.suppress(OSError):
        sys.stdout.flush()
    if not _speaks(error):  # one rank of a distributed run reports; the others end with the same status
        return status
    if debug:
        traceback.print_exception(error)
    print(f"error: {message}" if status != EXIT_INTERRUPTED else message, file=sys.stderr)
    if not debug and status == EXIT_FAILURE and not _own_words(error):
        print("(run again with --debug for the traceback)", file=sys.stderr)
    return status


def _close_stdout() -> None:
    """Point stdout at /dev/null, so that Python's own flush at exit does not fail on the closed pipe again."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _speaks(error: BaseException) -> bool:
    """Interrupted training is reported by rank 0 alone (each rank's line would say the same)."""
    return not isinstance(error, Interrupted) or error.main


# failures this project describes in full: their message is the whole story, no traceback hint
OWN_WORDS = (*INPUT_ERRORS, CheckpointWriteError, FileWriteError, TrainingDiverged, DownloadError, wmt14.PreparationError)


def _own_words(e: BaseException) -> bool:
    return isinstance(e, OWN_WORDS) and not isinstance(e, UnicodeDecodeError)


def _message(e: BaseException) -> str:
    """The error's own words where this project wrote them; else prefixed with its type."""
    text = str(e).strip() or type(e).__name__
    return text if _own_words(e) else f"{type(e).__name__}: {text}"
