"""What each verb of ``python -m transformer`` does (the command line, ``cli.py``, parses the
flags and dispatches here): ``cmd_train``, ``cmd_data``, ``cmd_average``, ``cmd_translate`` and
``cmd_evaluate``, each with the checks it makes before any work."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import queue
import re
import sys
import threading
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Iterator

from tqdm import tqdm

from minitensor import DeviceError, backend, blas, distributed, threads
from minitensor.environment import VariableError

from . import data as D
from . import presets, wmt14
from .checkpoint import CheckpointError, model_config, read_meta, step_checkpoints, write_checkpoint
from .corpus import prepare
from .evaluate import DecodingTooLarge, LongLineError, bleu, translate
from .export import export
from .flags import FlagError, InputError
from .graphed import check_processes
from .model import Transformer
from .files import (Busy, FileWriteError, LockUnwritable, Output, WriterBusy, claim, output_target, whole_lines,
                    write_file, write_new)
from .presets import DEFAULT_PRESET, PRESETS, plan_batches
from .progress import stderr_copied_to
from .rundir import (Loaded, RunDirInUse, RunLock, archive, average_of, check_fresh, check_not_busy, check_run_dir,
                     check_vocabulary, checkpoint_kind, leftovers, load_model, previous_run, record_run_id,
                     refuse_copy_task_run, resumable, run_file, run_id_of)
from .settings import (DATA_NAMES, DATA_SETTINGS, RANGES, DataSettings, SettingsError, TrainSettings, model_with,
                       run_differences)
from .signals import Stopped, close_stdout
from .tokenizer import Tokenizer, TokenizerModelError, VocabularyTooLarge, VocabularyTooSmall
from .train import RunFileError, Trainer, TrainingDiverged, read_metrics


# what the user can mend: reported with exit status 2 (anything else is a failure, status 1)
INPUT_ERRORS = (InputError, SettingsError, FlagError, D.DataError, CheckpointError, RunFileError, TrainingDiverged,
                TokenizerModelError, VocabularyTooLarge, VocabularyTooSmall, FileNotFoundError, NotADirectoryError,
                IsADirectoryError, UnicodeDecodeError, Busy, RunDirInUse, LockUnwritable, WriterBusy, DeviceError,
                LongLineError, DecodingTooLarge, VariableError)


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


def data_source(args) -> DataSettings:
    """The data settings of the flags (with the run's own and the preset's filled in by
    :func:`data_settings` and :func:`recall_data`), for the library to read."""
    given = {f.name: getattr(args, f.name, None) for f in dataclasses.fields(DataSettings)}
    return DataSettings(**{name: value for name, value in given.items() if value is not None})


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
    if not (args.resume or args.overwrite):  # (--overwrite archives it, as any run in the way)
        refuse_copy_task_run(run, "train into another --run-dir, or add --overwrite to archive it first")
    run_id = run_id_of(run, lambda msg: print(msg, file=sys.stderr)) if args.resume else None
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
    check_processes(settings, comm.world_size)
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
            with stderr_copied_to(run / "train.log") if comm.rank == 0 else contextlib.nullcontext() as log:
                return _train(args, settings, run, comm, data, saved_data.get("train_sha256"), run_id,
                              saved.get("run_id"), log)
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
           run_id: str | None, saved_id, log=None) -> dict:
    """``log``: rank 0's copy of stderr for train.log (:func:`transformer.progress.stderr_copied_to`),
    kept once the start is accepted, so a refused start leaves the run directory as it was."""
    if comm.rank > 0:  # rank 0 (which made the run directory) trains the BPE model and writes the id caches first
        comm.barrier(timeout=24 * 3600)
    tok, train, valid, _, text_sha256 = prepare(data_source(args), run, quiet=comm.rank > 0,
                                                progress=not args.no_progress, expect_text=expect_text)
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
        if log is not None:
            log.keep()
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
    target = check_output(output, "--output")
    if TRAINING_NAME.match(target.name):
        raise InputError(f"--output {output}: checkpoint_<step>.npz is how train names its training checkpoints; "
                         "choose another name (average.npz, say)")
    check_not_busy(target.parent)  # a training run writing there owns its directory
    if (run / "spm.model").is_file():
        Tokenizer(run / "spm.model")  # a damaged vocabulary is named as such, not taken for another run's
    note = lambda msg: print(msg, file=sys.stderr)  # noqa: E731
    out = Output(output, binary=True, flag="--output")
    with out as f:  # the claim on --output: the check of what is there and the write are one writer's
        earlier = _replaceable(output, target) if not out.through else None
        ck, found = average_of(run, args.last, "--last", note)
        if earlier is not None and (differing := run_differences(earlier, read_meta(found[-1]),
                                                                 (f"in {output.name}", f"in {run}"))):
            raise InputError(f"--output {output} is an average of another run ({differing[0]}): averaging would "
                             "replace it; choose another --output")
        if earlier is not None:
            note(f"note: {output} holds an earlier average of this run ({', '.join(earlier.get('averaged', []))}): "
                 "it is replaced")
        model = Transformer(model_config(ck["meta"], found[-1]))
        model.load_state_dict(ck["model"])
        try:
            write_checkpoint(f, model, None, {**ck["meta"], "averaged": [p.name for p in found]}, kind="average")
        except OSError as e:
            raise FileWriteError(f"could not write {output}: {e.strerror or e}", e.errno) from None
    print(f"averaged {', '.join(p.name for p in found)} -> {output}")


def _replaceable(output: Path, target: Path) -> dict | None:
    """The metadata of the average at ``output`` that averaging may replace (None: nothing is
    there); a training checkpoint or any other file is refused."""
    if not target.exists():
        return None
    kind = checkpoint_kind(target)
    if kind != "average":
        what = f"a {kind} checkpoint" if kind else "not an average this tool wrote"
        raise InputError(f"--output {output} exists and is {what}: averaging would replace it; choose another --output")
    return read_meta(target)


def check_output(path: Path, flag: str) -> Path:
    """An output file must be writable where it is asked for: checked before any work. Returns
    the file that will be written (the one a symlink leads to; see :mod:`transformer.files`)."""
    try:
        target, through = output_target(path)
    except IsADirectoryError:
        raise InputError(f"{flag} {path}: a directory, not a file") from None
    except OSError as e:  # a symlink loop, a path through a file
        raise InputError(f"{flag} {path}: {e.strerror or e}") from None
    if through:  # a device, a FIFO, a terminal: written through, as `> NAME` would
        if not os.access(target, os.W_OK):
            raise InputError(f"{flag} {path}: not writable")
        return target
    if not target.parent.is_dir():
        raise InputError(f"{flag} {path}: the folder {target.parent} does not exist")
    if not os.access(target.parent, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise InputError(f"{flag} {path}: not writable")
    if len(target.name.encode()) + 24 > _name_max(target.parent):  # + room for the temporary name
        raise InputError(f"{flag} {path}: the file name is too long for its folder's file system")
    return target


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
    if source:
        yield from D.iter_lines(source)
        return
    try:  # stdin through a reader of its own: the thread that reads it may still wait on it at exit (arriving)
        stream = os.fdopen(os.dup(sys.stdin.fileno()), "rb")
    except (OSError, ValueError, AttributeError):  # (a stdin without a descriptor, as tests give)
        yield from D.decode_lines(sys.stdin.buffer, "stdin")
        return
    with stream:
        yield from D.decode_lines(stream, "stdin")


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


def refuse_run_file(target: Path, given: Path, flag: str, what: str) -> None:
    """Refuse an output ``target`` (``flag``'s value ``given``) that is a run's own file, by name or
    by what it holds: ``what`` would replace it."""
    if run_file(target) or (target.is_file() and checkpoint_kind(target)):
        raise InputError(f"{flag} {given} is a run's own file (a checkpoint, its BPE model, its logs): {what} "
                         f"would replace it; choose another {flag}")


def cmd_export(args) -> None:
    """The run's model (as translate loads it) written to --out as safetensors, whole or not at all."""
    out = Path(args.out)
    target = check_output(out, "--out")
    refuse_run_file(target, out, "--out", "the export")
    loaded = load_model(Path(args.run_dir), args.checkpoint, args.average)
    meta = {**loaded.meta, "averaged": [Path(f).name for f in loaded.files] if len(loaded.files) > 1 else None}
    export(loaded.model, out, args.layout, meta)
    print(f"wrote {out}: the weights of {loaded.name} ({loaded.model.cfg.num_parameters():,} parameters), "
          f"{args.layout} layout")


def cmd_translate(args) -> None:
    check_decoding_args(args)
    output = Path(args.output) if args.output else None
    source = check_input(args.input)
    if output:
        target = check_output(output, "--output")
        refuse_run_file(target, output, "--output", "translations")
        if source and target.is_file() and os.path.samefile(source, target):
            raise InputError(f"--output {output} is the --input file: translating it in place would replace the "
                             "source; choose another --output")
    out = Output(output, flag="--output") if output else None
    sink = out.open() if out else sys.stdout  # the claim on --output: a second translate into it refuses
    written, done = output or "stdout", 0
    try:
        loaded = load_model(Path(args.run_dir), args.checkpoint, args.average, args.device)
        options = _translate_options(args, loaded)
        total = count_lines(source)
        show = not args.no_progress and (output is not None or not sys.stdout.isatty())
        with tqdm(total=total, desc="translating", unit="line", disable=not show, file=sys.stderr) as bar:
            for lines in arriving(input_lines(source), TRANSLATE_CHUNK):
                text = "".join(line + "\n" for line in translate(loaded.model, loaded.tokenizer, lines, progress=False,
                                                                 first_line=done + 1, **options))
                with _writing(written):
                    sink.write(text)
                    sink.flush()
                done += len(lines)
                bar.update(len(lines))
        if out:
            out.commit()
    except BaseException as e:  # the lines finished so far are kept, whatever stopped the rest
        kept = _keep_partial(out, done) if out else None
        if isinstance(e, KeyboardInterrupt):
            why = f"interrupted ({e.signal_name})" if isinstance(e, Stopped) else "interrupted"
            raise TranslationStopped(f"{why}: {kept}" if output else why) from None
        if isinstance(e, FileWriteError):
            raise FileWriteError(f"{e}; {kept}" if kept else str(e), e.errno) from None
        if kept and done:
            print(f"note: {kept}", file=sys.stderr)
        raise


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


def _keep_partial(out: Output, done: int) -> str | None:
    """Keep the finished lines of ``out`` under its name and say how many: counted in the file
    (an interrupt may fall between two writes, or inside one; a line cut off mid-write is dropped).
    Written through (a device, a FIFO), they are there already."""
    if out.file is None:  # finished already (its rename failed): nothing left to keep
        return None
    if out.through:
        out.discard()
        return f"the {done} line(s) translated so far were written to {out.path}"
    counted = []

    def finished(data: bytes) -> int | None:
        keep = whole_lines(data)
        counted.append(data[:keep or 0].count(b"\n"))
        return keep
    try:
        kept = out.commit(keep=finished)
    except FileWriteError as e:
        return f"no line could be kept ({e})"
    return f"the {counted[0]} line(s) translated so far are in {out.path}" if kept else \
        f"no line was finished; {out.path} was not written"


TRANSLATE_CHUNK = 256  # lines translated (and written) together: batched by length inside, in order outside


def arriving(items: Iterator, n: int) -> Iterator[list]:
    """Consecutive lists of at most ``n`` items: as many as have come, so that a line typed, or
    sent alone down a pipe, is translated (and written) before the next one comes, and a file's
    lines go in lists of ``n``. The items are read in a thread, at most ``4 n`` ahead; an error
    reading them (a line that is not text) is raised here, in its turn."""
    ahead: queue.Queue = queue.Queue(maxsize=4 * n)
    end, stop = object(), threading.Event()

    def put(item) -> bool:
        while not stop.is_set():  # (the reader gives up once the translating has stopped)
            with contextlib.suppress(queue.Full):
                ahead.put(item, timeout=0.1)
                return True
        return False

    def read():
        try:
            for item in items:
                if not put(item):
                    return
        except BaseException as e:  # noqa: BLE001 - handed to the reader below
            put(_Raised(e))
        put(end)
    threading.Thread(target=read, daemon=True, name="translate-input").start()
    try:
        while True:
            group, item = [], ahead.get()  # (waits for the next line; a signal interrupts the wait)
            while item is not end and not isinstance(item, _Raised):
                group.append(item)
                if len(group) == n or ahead.empty():
                    break
                item = ahead.get()
            if group:
                yield group
            if item is end:
                return
            if isinstance(item, _Raised):
                raise item.error
    finally:
        stop.set()


class _Raised:
    """An error met while reading the input, passed to the thread that translates."""

    def __init__(self, error: BaseException):
        self.error = error


def _headline(run: Path, hypotheses: str, record: str, saved: Path) -> None:
    """The run's headline result, ``hypotheses.txt`` and ``evaluation.json``, written as one
    writer's pair (under the claim on evaluation.json); while another evaluate writes them, this
    one leaves them to it, with a note."""
    out = Output(run / "evaluation.json")
    try:
        f = out.open()
    except WriterBusy:
        print(f"note: another evaluate is writing {run / 'evaluation.json'} now: these results are in {saved} only",
              file=sys.stderr)
        return
    try:
        write_file(run / "hypotheses.txt", hypotheses)
        f.write(record)
    except BaseException:
        out.discard()
        raise
    out.commit()


def _check_writable(folder: Path, size: int) -> None:
    """evaluate writes about ``size`` bytes into ``folder`` (made if missing): tried with a file of
    its own of that size before the decoding that a failed write would waste (a read-only folder,
    a full disk, a quota)."""
    if folder.exists() and not folder.is_dir():
        raise InputError(f"{folder} is a file, not a folder, so the evaluation could not be saved there; move it away")
    where = folder if folder.is_dir() else folder.parent
    probe = None
    try:
        probe, fd = claim(where / "evaluation")  # (a probe left by a killed process goes with the next one)
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
    for flag, path in (("--src", args.src), ("--ref", args.ref)):
        if path and not Path(path).exists():
            raise InputError(f"{flag} {path}: no such file")
    run = Path(args.run_dir)
    loaded = load_model(run, args.checkpoint, args.average, args.device)
    model_languages(args, loaded.meta)
    if not args.src:
        recall_data(args, run)
    own_test = not args.src and not args.data_dir and recall_test_files(args, run, loaded.meta)
    if args.src:
        src, ref = D.read_parallel(args.src, args.ref)
        name, scored = Path(args.src).stem, {"source": str(Path(args.src).resolve()), "reference": str(Path(args.ref).resolve())}
        label = args.src
    elif args.data_dir and wmt14.is_prepared(args.data_dir):
        name = args.split or "test"
        files = wmt14.split_files(args.data_dir, name, args.src_lang, args.tgt_lang)
        src, ref = D.read_parallel(*files)
        scored = {"source": str(Path(files[0]).resolve()), "reference": str(Path(files[1]).resolve())}
        label = f"WMT14 {name} in {args.data_dir}"
    else:
        name = args.split or "test_2016_flickr"
        src, ref = D.multi30k(name, args.src_lang, args.tgt_lang, args.data_dir)
        scored = {"source": f"multi30k {name}.{args.src_lang}", "reference": f"multi30k {name}.{args.tgt_lang}",
                  "data_dir": str(Path(args.data_dir).resolve()) if args.data_dir else None}
        label = f"Multi30k {name}"
    first = args.limit is not None and args.limit < len(src)  # a part of the set, not all of it
    if first:
        src, ref = src[:args.limit], ref[:args.limit]
    label = f"{label}, {'the first ' if first else ''}{len(src)} sentences, {loaded.name}, beam {args.beam}"  # what is scored
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
            print(f"BLEU {cased['score']:.2f} on {label}  ({cased['signature']})")
            print(f"BLEU {lower['score']:.2f} lowercased  ({lower['signature']})", flush=True)
    except OSError as e:
        unprinted = e
        close_stdout()
    result = {"sentences": len(src), "bleu": cased["score"], "signature": cased["signature"],
              "bleu_lowercase": lower["score"], "signature_lowercase": lower["signature"],
              "beam": args.beam, "alpha": args.alpha, "checkpoint": loaded.name, "checkpoint_files": loaded.files,
              **scored, "split": None if args.src else name, "limit": args.limit,
              "empty_hypotheses": sum(1 for h, s in zip(hyps, src) if s.strip() and not h.strip())}
    text = "\n".join(hyps) + "\n"

    def files_named(name: str) -> dict:  # the record names its hypotheses file
        return {".txt": text, ".json": json.dumps({**result, "hypotheses": f"{name}.txt"}, indent=2, allow_nan=False)}
    try:
        folder.mkdir(exist_ok=True)
        taken = write_new(folder, stem, files_named)  # never replaces an evaluation
        path = taken.with_name(f"{taken.name}.json")  # (a stem may hold a dot: _alpha0.7)
        result["hypotheses"] = path.with_suffix(".txt").name
        if headline:
            _headline(run, text, json.dumps(result, indent=2, allow_nan=False), path)
    except OSError as e:  # the space probed for went to something else meanwhile
        raise FileWriteError(f"{e if isinstance(e, FileWriteError) else f'could not write in {folder}: {e.strerror}'}; "
                             "the scores above were not saved: free some space and evaluate again", e.errno) from None
    print(f"written to {path} and {path.with_suffix('.txt').name}", file=sys.stderr)
    if isinstance(unprinted, FileWriteError):
        raise FileWriteError(f"{unprinted}; the scores are saved in {path}", unprinted.errno)
    if unprinted is not None:
        raise unprinted  # a closed pipe: exit 141, quietly
    return result
