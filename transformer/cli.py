"""``python -m transformer``: data, train, translate, evaluate, average.

    python -m transformer data wmt14 --out data/wmt14      # the paper's data, downloaded and checked
    python -m transformer train --preset multi30k-cpu --run-dir runs/m30k
    python -m transformer evaluate --run-dir runs/m30k --average 3
    echo "A dog runs in the park." | python -m transformer translate --run-dir runs/m30k
    python -m transformer average --run-dir runs/m30k --last 3 --output runs/m30k/average.npz
    mpiexec -n 2 python -m transformer train --preset multi30k-cpu --run-dir runs/m30k-dp --distributed

Errors are one line, ``error: <message>``, on stderr: exit status 2 for bad usage or input
(flags out of range, missing or damaged files), 1 for a failure while working, 130 when a
signal stopped training (after a checkpoint was saved). ``--debug`` or ``MINITENSOR_DEBUG=1``
adds the traceback.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import sys
import time
import traceback
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Iterator

from tqdm import tqdm

from minitensor import DeviceError, allocator, backend, blas, distributed, threads

from . import data as D
from . import wmt14
from .checkpoint import (CheckpointError, CheckpointWriteError, average_checkpoints, load_checkpoint, newest_loadable,
                         read_meta, save_checkpoint, step_checkpoints)
from .config import POSITIONAL, TransformerConfig
from .corpus import PairFilter, ParallelText, bpe_sample, encode_corpus
from .download import DownloadError
from .decoding import MAX_BEAM
from .evaluate import DECODE_MEMORY_GIB, LONG_LINES, DecodingTooLarge, LongLineError, bleu, translate
from .model import Transformer
from .presets import PRESETS
from .rundir import RunDirBusy, RunDirInUse, RunLock, archive, check_fresh, check_not_busy, previous_run
from .tokenizer import Tokenizer, VocabularyTooLarge, encode_cached
from .train import (MODEL_FLAGS, PRECISIONS, Interrupted, ParallelData, SettingsError, Trainer, TrainingDiverged, TrainSettings,
                    resume_differences)


# pairs the joint BPE model is trained on, sampled from the whole corpus (every pair of a smaller one)
BPE_SAMPLE_PAIRS = 1_000_000


class InputError(Exception):
    """Bad usage or input, found before any work: ``error: <message>``, exit status 2."""


EXIT_FAILURE, EXIT_INPUT, EXIT_INTERRUPTED = 1, 2, 130
# what the user can mend: reported with exit status 2 (anything else is a failure, status 1)
INPUT_ERRORS = (InputError, SettingsError, D.DataError, CheckpointError, VocabularyTooLarge, FileNotFoundError,
                NotADirectoryError, IsADirectoryError, UnicodeDecodeError, RunDirBusy, RunDirInUse, DeviceError, LongLineError, DecodingTooLarge)


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
            timings: dict | None = None):
    """Filter, train (or load) the joint BPE model on a sample, encode on every core (cached):
    -> tokenizer, train, valid, test. The training text is streamed, never held. ``timings``,
    when given, receives each stage's seconds."""
    timings = {} if timings is None else timings
    with _stage(timings, "read and filter, BPE sample"):
        corpora = load_corpora(args)
        keep = PairFilter(args.max_words, args.max_ratio, limit)
        model_path = run / "spm.model"
        if not model_path.exists():
            src, tgt, report = bpe_sample(corpora["train"], keep, BPE_SAMPLE_PAIRS)
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
                                         progress=not (quiet or args.no_progress))
        vs, vt = corpora["valid"]
        cache = run / "cache"
        valid = ParallelData(encode_cached(tok, vs, cache / "valid.src.npz"),
                             encode_cached(tok, vt, cache / "valid.tgt.npz"), vs, vt)
    allocator.release_free_memory()  # why: the text read and sampled is garbage now; training reuses none of it
    if not quiet:
        print(f"training data: {report}; {len(src.flat) + len(tgt.flat):,} tokens; ready in "
              f"{sum(timings.values()):.1f} s ({', '.join(f'{k} {v:.1f} s' for k, v in timings.items())})",
              file=sys.stderr)
    return tok, ParallelData(src, tgt), valid, corpora["test"]


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
    """A run directory's model: a given checkpoint, the average of the last N, or the newest that loads."""
    check_run_dir(run)
    if not (run / "spm.model").exists():
        raise InputError(f"{run}: not a run directory of this tool (no spm.model in it); check --run-dir, or train first")
    tok = Tokenizer(run / "spm.model")
    if checkpoint:
        ck, files = load_checkpoint(checkpoint), [Path(checkpoint)]
        name = Path(checkpoint).stem
    else:
        found = step_checkpoints(run)
        if not found:
            raise InputError(f"{run}: no checkpoint_<step>.npz files; train first")
        if average and average > 1:
            files = found[-average:]
            ck, name = average_checkpoints(files), f"average{len(files)}-{files[-1].stem}"
        else:  # the newest that loads, saying which were skipped and why
            ck, path = newest_loadable(found, warn=lambda msg: print(msg, file=sys.stderr))
            files, name = [path], path.stem
    if ck["meta"].get("vocab_sha256") not in (None, tok.fingerprint()):
        raise InputError(f"the checkpoint was trained with another vocabulary than {run / 'spm.model'}")
    model = Transformer(TransformerConfig.from_dict(ck["meta"]["config"]))
    model.load_state_dict(ck["model"])
    return Loaded(model.to(device).eval(), tok, name, [str(f) for f in files], ck["meta"])


# ---------------------------------------------------------------------------- commands
def add_data_args(p):
    p.add_argument("--dataset", choices=["multi30k", "wmt14"], help="default: the preset's")
    p.add_argument("--data-dir", help="multi30k: a local Multi30k directory (default: $MULTI30K_DIR, else download into "
                                      "the cache); wmt14: a folder prepared by `python -m transformer data wmt14`")
    p.add_argument("--src-lang", default="en", help="the source side's language code (default en)")
    p.add_argument("--tgt-lang", default="de", help="the target side's language code (default de)")
    for side in ("train", "valid", "test"):
        for lang in ("src", "tgt"):
            p.add_argument(f"--{side}-{lang}", help=f"WMT14 {side} {lang} file(s), plain or .sgm")
    p.add_argument("--max-words", type=int, default=250, help="drop training pairs with a longer side")
    p.add_argument("--max-ratio", type=float, default=3.0, help="drop training pairs with a larger length ratio")


def check_data_args(args, vocab_size: int) -> None:
    """The data flags, checked before anything is read (each error names its flag)."""
    if vocab_size < 5:
        raise InputError(f"--vocab-size must be >= 5 (4 special pieces and at least one more), got {vocab_size}")
    for name, low in (("limit", 1), ("max_words", 1), ("max_ratio", 1.0)):
        v = getattr(args, name, None)
        if v is not None and v < low:
            raise InputError(f"--{name.replace('_', '-')} must be >= {low}, got {v}")
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
                if not Path(path).is_file():
                    raise InputError(f"--{side}-{lang} {path}: no such file")


def check_run_dir(path: Path, flag: str = "--run-dir") -> None:
    if path.exists() and not path.is_dir():
        raise InputError(f"{flag} {path}: a file, not a directory")


DATA_RECORD = "data.json"  # in a run directory: the --data-dir it was trained from


def remember_data_dir(args, run: Path) -> None:
    """Record the run's ``--data-dir`` (absolute), so that ``--resume`` and ``evaluate`` find the data again."""
    if args.data_dir:
        (run / DATA_RECORD).write_text(json.dumps({"data_dir": str(Path(args.data_dir).resolve())}) + "\n")


def recall_data_dir(args, run: Path) -> None:
    """Without ``--data-dir``, use the one the run was trained from, if it is still there (with a note)."""
    if args.data_dir or not (run / DATA_RECORD).is_file():
        return
    with contextlib.suppress(OSError, ValueError, AttributeError):
        folder = json.loads((run / DATA_RECORD).read_text()).get("data_dir")
        if folder and Path(folder).is_dir():
            args.data_dir = folder
            print(f"note: --data-dir {folder}, the run's own (give --data-dir to use another)", file=sys.stderr)


def saved_settings(run: Path) -> dict | None:
    """The settings stored in the newest checkpoint of ``run`` whose metadata reads (None if none)."""
    for path in reversed(step_checkpoints(run) if run.is_dir() else []):
        with contextlib.suppress(CheckpointError):
            return read_meta(path).get("settings")
    return None


def cmd_train(args) -> dict:
    preset = PRESETS[args.preset]
    args.dataset = args.dataset or preset["dataset"]
    names = [*MODEL_FLAGS, *(f.name for f in fields(TrainSettings) if f.name != "model")]
    overrides = {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}
    overrides.update(run_dir=args.run_dir, progress=not args.no_progress)
    settings = TrainSettings(**{**preset["settings"], **overrides})
    vocab_size = args.vocab_size if args.vocab_size is not None else preset["vocab_size"]
    run = Path(args.run_dir)
    check_run_dir(run)
    if args.resume:
        recall_data_dir(args, run)
    check_data_args(args, vocab_size)
    if args.resume and args.overwrite:
        raise InputError("--resume continues the run in --run-dir and --overwrite archives it: give one of them")
    comm = distributed.init(settings.device) if args.distributed else distributed.SingleProcess()
    if comm.rank == 0:
        try:
            run.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise InputError(f"--run-dir {run}: cannot create it ({e.strerror or e})") from None
    with RunLock(run) if comm.rank == 0 else contextlib.nullcontext():
        saved = saved_settings(run) if args.resume else None
        if saved is not None:  # the run's own settings, changed only by the flags given now
            model = TransformerConfig.from_dict(saved["model"])
            settings = TrainSettings(model, **{k: v for k, v in saved.items() if k != "model"} | overrides)
            if differing := resume_differences(saved, settings):
                raise InputError(f"--resume: {len(differing)} setting(s) differ from the run in {run}, which keeps its "
                                 f"own (leave them out): {'; '.join(differing)}")
        elif comm.rank == 0 and not args.resume and previous_run(run):
            if not args.overwrite:
                check_fresh(run)
            print(f"--overwrite: the old run in {run} moved to {archive(run)}", file=sys.stderr)
        if comm.rank == 0 and not args.resume and args.vocab_size is not None and (run / "spm.model").exists():
            # a BPE model prepared earlier is reused, unless --vocab-size asks for another size
            pieces = Tokenizer(run / "spm.model").vocab_size
            if pieces != vocab_size:
                raise InputError(f"{run / 'spm.model'} has {pieces} pieces and --vocab-size asks for {vocab_size}: "
                                 "use a new --run-dir, or --overwrite to archive what is there")
        return _train(args, settings, run, comm, vocab_size)


def _train(args, settings: TrainSettings, run: Path, comm, vocab_size: int) -> dict:
    if comm.rank > 0:  # rank 0 (which made the run directory) trains the BPE model and writes the id caches first
        comm.barrier(timeout=24 * 3600)
    tok, train, valid, _ = prepare(args, run, vocab_size, args.limit, quiet=comm.rank > 0)
    if comm.rank == 0 and comm.world_size > 1:
        comm.barrier(timeout=24 * 3600)
    trainer = Trainer(settings, tok, train, valid, resume=args.resume, comm=comm)
    if comm.rank == 0:
        remember_data_dir(args, run)
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
    if args.retries < 0 or not args.timeout > 0:
        raise InputError("--retries must be >= 0 and --timeout > 0")
    if args.from_dir and not Path(args.from_dir).is_dir():
        raise InputError(f"--from {args.from_dir}: no such directory")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: not a directory")
    return wmt14.prepare(out, args.from_dir, args.url_base, progress=not args.no_progress, timeout=args.timeout,
                         retries=args.retries)


def cmd_average(args) -> None:
    if args.last < 1:
        raise InputError(f"--last must be >= 1, got {args.last}")
    run = Path(args.run_dir)
    check_run_dir(run)
    output = Path(args.output) if args.output else run / "average.npz"
    check_output(output, "--output")
    check_not_busy(output.parent)  # a training run writing there owns its directory
    found = step_checkpoints(run)[-args.last:]
    if not found:
        raise InputError(f"{run}: no checkpoints to average")
    if len(found) < args.last:
        print(f"note: --last {args.last}, but {run} holds {len(found)} checkpoint(s): averaging those", file=sys.stderr)
    ck = average_checkpoints(found)
    model = Transformer(TransformerConfig.from_dict(ck["meta"]["config"]))
    model.load_state_dict(ck["model"])
    out = save_checkpoint(output, model, None, {**ck["meta"], "averaged": [p.name for p in found]})
    print(f"averaged {', '.join(p.name for p in found)} -> {out}")


def check_output(path: Path, flag: str) -> None:
    """An output file must be writable where it is asked for: checked before any work."""
    if path.is_dir():
        raise InputError(f"{flag} {path}: a directory, not a file")
    if not path.parent.is_dir():
        raise InputError(f"{flag} {path}: the folder {path.parent} does not exist")
    if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise InputError(f"{flag} {path}: not writable")


def check_decoding_args(args) -> None:
    """translate's and evaluate's flags, checked before the model is loaded (each error names its flag)."""
    if args.beam_max < 1:
        raise InputError(f"--beam-max must be >= 1, got {args.beam_max}")
    if not 1 <= args.beam <= args.beam_max:
        raise InputError(f"--beam must be in [1, {args.beam_max}], got {args.beam}"
                         + (" (--beam-max raises the upper bound)" if args.beam > args.beam_max else ""))
    if not (math.isfinite(args.alpha) and args.alpha >= 0):
        raise InputError(f"--alpha must be finite and >= 0, got {args.alpha}")
    for name in ("average", "limit", "max_pieces"):
        v = getattr(args, name, None)
        if v is not None and v < 1:
            raise InputError(f"--{name.replace('_', '-')} must be >= 1, got {v}")
    if not (math.isfinite(args.memory_gib) and args.memory_gib > 0):
        raise InputError(f"--memory-gib must be > 0, got {args.memory_gib}")
    try:
        backend.normalize_device(args.device)
    except (ValueError, DeviceError) as e:
        raise InputError(f"--device: {e}") from None


def _translate_options(args, loaded: Loaded) -> dict:
    """translate()'s keywords from the flags; lines over what the model was trained on are split
    by default (a model trained on short sentences stops early on a much longer one)."""
    longest = loaded.meta.get("longest_source")
    max_pieces = args.max_pieces or (max(longest, 1) if longest else None)
    return dict(beam_size=args.beam, alpha=args.alpha, device=args.device, long_lines=args.long_lines,
                max_pieces=max_pieces, memory_gib=args.memory_gib)


def input_lines(path: str | None) -> Iterator[str]:
    """The lines to translate, one at a time: a file's or stdin's (invalid UTF-8 named by line)."""
    return D.iter_lines(path) if path else D.decode_lines(sys.stdin.buffer, "stdin")


class TranslationStopped(Exception):
    """SIGINT during translate: the lines finished so far were kept."""


def cmd_translate(args) -> None:
    check_decoding_args(args)
    output = Path(args.output) if args.output else None
    if output:
        check_output(output, "--output")
    if args.input and not Path(args.input).exists():
        raise InputError(f"--input {args.input}: no such file")
    if args.input and Path(args.input).is_dir():
        raise InputError(f"--input {args.input}: a directory, not a file")
    loaded = load_model(Path(args.run_dir), args.checkpoint, args.average, args.device)
    options = _translate_options(args, loaded)
    total = sum(1 for _ in open(args.input, "rb")) if args.input else None
    show = not args.no_progress and (output is not None or not sys.stdout.isatty())
    chunk = 1 if not args.input and sys.stdin.isatty() else TRANSLATE_CHUNK  # typed lines come back at once
    partial = output.with_name(f".{output.name}.partial") if output else None
    sink = open(partial, "w", encoding="utf-8") if output else sys.stdout
    try:
        with tqdm(total=total, desc="translating", unit="line", disable=not show, file=sys.stderr) as bar:
            done = 0
            for lines in batched(input_lines(args.input), chunk):
                for line in translate(loaded.model, loaded.tokenizer, lines, progress=False, first_line=done + 1,
                                      **options):
                    sink.write(line + "\n")
                sink.flush()
                done += len(lines)
                bar.update(len(lines))
    except BaseException as e:  # the lines finished so far are kept, whatever stopped the rest
        kept = _keep_partial(sink, partial, output) if output else None
        if isinstance(e, KeyboardInterrupt):
            raise TranslationStopped(f"interrupted: {kept}" if output else "interrupted") from None
        if kept:
            print(f"note: {kept}", file=sys.stderr)
        raise
    if output:
        sink.close()
        os.replace(partial, output)


def _keep_partial(sink, partial: Path, output: Path) -> str | None:
    """Close the partial output; if it holds finished lines, move it to ``output`` and say how
    many (counted in the file: an interrupt may fall between two writes, or inside one)."""
    sink.close()
    text = partial.read_bytes()
    text = text[:text.rfind(b"\n") + 1]  # a line cut off mid-write is dropped
    partial.write_bytes(text)
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


def cmd_evaluate(args) -> dict:
    check_decoding_args(args)
    if bool(args.src) != bool(args.ref):
        raise InputError("--src and --ref go together: a source file and its reference translations")
    run = Path(args.run_dir)
    loaded = load_model(run, args.checkpoint, args.average, args.device)
    if not args.src:
        recall_data_dir(args, run)
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
    if args.limit:
        src, ref = src[:args.limit], ref[:args.limit]
    hyps = translate(loaded.model, loaded.tokenizer, src, **_translate_options(args, loaded))
    cased, lower = bleu(hyps, ref), bleu(hyps, ref, lowercase=True)
    result = {"sentences": len(src), "bleu": cased["score"], "signature": cased["signature"],
              "bleu_lowercase": lower["score"], "signature_lowercase": lower["signature"],
              "beam": args.beam, "alpha": args.alpha, "checkpoint": loaded.name, "checkpoint_files": loaded.files,
              **scored, "split": None if args.src else name, "limit": args.limit,
              "empty_hypotheses": sum(1 for h, s in zip(hyps, src) if s.strip() and not h.strip())}
    folder = run / "evaluations"
    folder.mkdir(exist_ok=True)
    stem = f"{name}_{loaded.name}_beam{args.beam}" + (f"_alpha{args.alpha:g}" if args.alpha != 0.6 else "") \
        + (f"_first{args.limit}" if args.limit else "")
    path = _unique(folder, stem)
    result["hypotheses"] = path.with_suffix(".txt").name
    path.with_suffix(".txt").write_text("\n".join(hyps) + "\n", encoding="utf-8")
    path.write_text(json.dumps(result, indent=2, allow_nan=False))
    if not args.src and args.split is None and not args.limit:  # the default test set, whole: the run's headline
        (run / "hypotheses.txt").write_text("\n".join(hyps) + "\n", encoding="utf-8")
        (run / "evaluation.json").write_text(json.dumps(result, indent=2, allow_nan=False))
    print(f"BLEU {cased['score']:.2f}  ({cased['signature']})")
    print(f"BLEU {lower['score']:.2f} lowercased  ({lower['signature']})")
    print(f"written to {path} and {path.with_suffix('.txt').name}", file=sys.stderr)
    return result


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m transformer", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--debug", action="store_true", help="print the traceback of an error")
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("data", help="download and prepare a dataset (WMT14 English-German)",
                       description=plain_text(wmt14.__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("dataset", choices=["wmt14"], help="the dataset to prepare: wmt14 (English-German, Section 5.1)")
    d.add_argument("--out", required=True, help="the folder to prepare (train/valid/test files and manifest.json)")
    d.add_argument("--from", dest="from_dir", metavar="DIR",
                   help="a folder that already holds the archives (no download): " + ", ".join(wmt14.ARCHIVES))
    d.add_argument("--url-base", help="a mirror that serves the archives under their own names (URL_BASE/dev.tgz)")
    d.add_argument("--timeout", type=float, default=60.0, help="seconds a wait for the server may last (default 60)")
    d.add_argument("--retries", type=int, default=3,
                   help="times a download that broke off is resumed before giving up (default 3)")
    d.add_argument("--no-progress", action="store_true", help="no progress bars")
    d.set_defaults(func=cmd_data)

    t = sub.add_parser("train", help="train a translation model", description=TRAIN_HELP,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    t.add_argument("--preset", choices=sorted(PRESETS), default="multi30k-cpu",
                   help="the data, model and recipe (transformer/presets.py; default multi30k-cpu)")
    t.add_argument("--run-dir", required=True, help="checkpoints, metrics, plots and the BPE model go here")
    t.add_argument("--resume", action="store_true",
                   help="continue the run in --run-dir from its newest checkpoint, with its own settings (flags given "
                        "may change its budget: --max-steps, --max-minutes, ...)")
    t.add_argument("--overwrite", action="store_true",
                   help="--run-dir holds an old run: move it to <run-dir>.archived-<time> first and start afresh")
    t.add_argument("--vocab-size", type=int, help="joint BPE vocabulary (default: the preset's)")
    t.add_argument("--limit", type=int, help="use only the first N training pairs (for quick trials)")
    t.add_argument("--no-progress", action="store_true", help="plain log lines instead of a progress bar")
    t.add_argument("--distributed", action="store_true",
                   help="data parallel over the processes of an mpiexec launch (NCCL on cuda, MPI on cpu)")
    add_data_args(t)
    model_fields = {f.name: f for f in fields(TransformerConfig)}
    settings = [(name, model_fields[first]) for name, (first, *_) in MODEL_FLAGS.items()]
    settings += [(f.name, f) for f in fields(TrainSettings) if f.name not in ("run_dir", "progress", "model")]
    choices = {"precision": sorted(PRECISIONS), "positional": POSITIONAL}
    for name, f in settings:
        kind = type(f.default)
        flag = "--" + name.replace("_", "-")
        if kind is bool:
            t.add_argument(flag, type=lambda v: v.lower() in ("1", "true", "yes"), default=None, help="true/false")
        else:
            t.add_argument(flag, type=kind, default=None, choices=choices.get(name),
                           help=f.metadata.get("help", f"default: the preset's (else {f.default})"))
    t.set_defaults(func=cmd_train)

    for name, func, helptext in (("translate", cmd_translate, "translate text (stdin -> stdout, or files)"),
                                 ("evaluate", cmd_evaluate, "BLEU on a test set (Multi30k test2016 by default)")):
        c = sub.add_parser(name, help=helptext)
        c.add_argument("--run-dir", required=True, help="a run directory that train wrote")
        c.add_argument("--checkpoint", help="a checkpoint file (default: the newest, or --average N)")
        c.add_argument("--average", type=int, help="average the last N (>= 1) checkpoints (default: the newest)")
        c.add_argument("--beam", type=int, default=4, help="beam size, in [1, --beam-max] (default 4; 1: greedy)")
        c.add_argument("--beam-max", type=int, default=MAX_BEAM,
                       help=f"the largest --beam allowed (default {MAX_BEAM}: a larger beam rarely helps and costs memory)")
        c.add_argument("--alpha", type=float, default=0.6, help="length penalty, finite and >= 0 (default 0.6)")
        c.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
        c.add_argument("--memory-gib", type=float, default=DECODE_MEMORY_GIB,
                       help=f"decoding memory allowed per batch, estimated from beam, batch and length; larger batches "
                            f"are split (default {DECODE_MEMORY_GIB:g})")
        c.add_argument("--long-lines", choices=LONG_LINES, default="split",
                       help="a line longer than --max-pieces: translate it in parts (split, the default), translate "
                            "its start and say so (truncate), or stop with an error naming it (error)")
        c.add_argument("--max-pieces", type=int,
                       help="the longest line, in pieces, translated whole (default: the longest training source, "
                            "at most the model's positions)")
        if name == "translate":
            c.add_argument("--input", help="a text file, one sentence per line (default: stdin)")
            c.add_argument("--output", help="where to write (default: stdout); written as it goes, finished lines "
                                            "kept on Ctrl-C")
            c.add_argument("--no-progress", action="store_true",
                           help="no progress bar (shown on stderr when the output is a file or a pipe)")
        else:
            c.add_argument("--split", help="Multi30k split (default test_2016_flickr); in a WMT14 folder, test "
                                           "(newstest2014, the default) or valid (newstest2013)")
            c.add_argument("--data-dir", help="a local Multi30k directory, or a folder `data wmt14` prepared")
            c.add_argument("--src", help="a source file (WMT: newstest2014, plain or .sgm); needs --ref")
            c.add_argument("--ref", help="the reference translations of --src")
            c.add_argument("--src-lang", default="en", help="the source side's language code (default en)")
            c.add_argument("--tgt-lang", default="de", help="the target side's language code (default de)")
            c.add_argument("--limit", type=int, help="only the first N sentences")
        c.set_defaults(func=func)

    a = sub.add_parser("average", help="average the last N checkpoints into one file")
    a.add_argument("--run-dir", required=True, help="a run directory that train wrote")
    a.add_argument("--last", type=int, default=5, help="how many of the newest checkpoints, >= 1 (default 5)")
    a.add_argument("--output", help="the averaged checkpoint (default: <run-dir>/average.npz)")
    a.set_defaults(func=cmd_average)
    return p


class _Parser(argparse.ArgumentParser):
    """argparse, with usage errors raised (so that :func:`run` reports them like any other)."""

    def error(self, message):
        raise InputError(f"{message} (see {self.prog} --help)")


def main(argv=None):
    """Run one command and return its result; errors propagate (for scripts and tests)."""
    args = build_parser().parse_args(argv)
    return args.func(args)


def _close_progress_bars() -> None:
    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()


def run(argv=None) -> int:
    """The command line: :func:`main` with errors as one ``error:`` line and an exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv or os.environ.get("MINITENSOR_DEBUG", "") not in ("", "0")
    argv = [a for a in argv if a != "--debug"]
    try:
        main(argv)
        return 0
    except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001 - every failure becomes one line
        error = e
    if isinstance(error, (Interrupted, TranslationStopped)):
        status, message = EXIT_INTERRUPTED, str(error)
    elif isinstance(error, KeyboardInterrupt):
        status, message = EXIT_INTERRUPTED, "interrupted"
    elif isinstance(error, INPUT_ERRORS):
        status, message = EXIT_INPUT, _message(error)
    else:
        status, message = EXIT_FAILURE, _message(error)
    _close_progress_bars()
    sys.stdout.flush()
    if debug:
        traceback.print_exception(error)
    print(f"error: {message}" if status != EXIT_INTERRUPTED else message, file=sys.stderr)
    if not debug and status == EXIT_FAILURE and not _own_words(error):
        print("(run again with --debug for the traceback)", file=sys.stderr)
    return status


# failures this project describes in full: their message is the whole story, no traceback hint
OWN_WORDS = (*INPUT_ERRORS, CheckpointWriteError, TrainingDiverged, DownloadError, wmt14.PreparationError)


def _own_words(e: BaseException) -> bool:
    return isinstance(e, OWN_WORDS) and not isinstance(e, UnicodeDecodeError)


def _message(e: BaseException) -> str:
    """The error's own words where this project wrote them; else prefixed with its type."""
    text = str(e).strip() or type(e).__name__
    return text if _own_words(e) else f"{type(e).__name__}: {text}"
