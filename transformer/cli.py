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
import os
import re
import sys
import time
import traceback
from dataclasses import fields
from pathlib import Path

from tqdm import tqdm

from minitensor import allocator, blas, distributed

from . import data as D
from . import wmt14
from .checkpoint import (CheckpointError, CheckpointWriteError, average_checkpoints, load_checkpoint, newest_loadable,
                         save_checkpoint, step_checkpoints)
from .config import TransformerConfig
from .corpus import PairFilter, ParallelText, bpe_sample, encode_corpus
from .download import DownloadError
from .evaluate import bleu, translate
from .model import Transformer
from .presets import PRESETS
from .tokenizer import Tokenizer, VocabularyTooLarge, encode_cached
from .train import MODEL_FLAGS, Interrupted, ParallelData, SettingsError, Trainer, TrainingDiverged, TrainSettings


# pairs the joint BPE model is trained on, sampled from the whole corpus (every pair of a smaller one)
BPE_SAMPLE_PAIRS = 1_000_000


class InputError(Exception):
    """Bad usage or input, found before any work: ``error: <message>``, exit status 2."""


EXIT_FAILURE, EXIT_INPUT, EXIT_INTERRUPTED = 1, 2, 130
# what the user can mend: reported with exit status 2 (anything else is a failure, status 1)
INPUT_ERRORS = (InputError, SettingsError, D.DataError, CheckpointError, VocabularyTooLarge, FileNotFoundError,
                NotADirectoryError, IsADirectoryError, UnicodeDecodeError)


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
def load_model(run: Path, checkpoint: str | None = None, average: int = 0, device: str = "cpu"):
    """(model, tokenizer) from a run directory: a given checkpoint, the average of the last N, or the newest."""
    if not (run / "spm.model").exists():
        raise InputError(f"{run}: not a run directory of this tool (no spm.model in it); check --run-dir, or train first")
    tok = Tokenizer(run / "spm.model")
    if checkpoint:
        ck = load_checkpoint(checkpoint)
    else:
        found = step_checkpoints(run)
        if not found:
            raise InputError(f"{run}: no checkpoint_<step>.npz files; train first")
        if average > 1:
            ck = average_checkpoints(found[-average:])
        else:  # the newest that loads, saying which were skipped and why
            ck, _ = newest_loadable(found, warn=lambda msg: print(msg, file=sys.stderr))
    if ck["meta"].get("vocab_sha256") not in (None, tok.fingerprint()):
        raise InputError(f"the checkpoint was trained with another vocabulary than {run / 'spm.model'}")
    model = Transformer(TransformerConfig.from_dict(ck["meta"]["config"]))
    model.load_state_dict(ck["model"])
    return model.to(device).eval(), tok


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


def cmd_train(args) -> dict:
    preset = PRESETS[args.preset]
    args.dataset = args.dataset or preset["dataset"]
    names = [*MODEL_FLAGS, *(f.name for f in fields(TrainSettings) if f.name != "model")]
    overrides = {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}
    settings = TrainSettings(**{**preset["settings"], **overrides, "run_dir": args.run_dir,
                                "progress": not args.no_progress})
    check_data_args(args, args.vocab_size or preset["vocab_size"])
    run = Path(args.run_dir)
    comm = distributed.init(settings.device) if args.distributed else distributed.SingleProcess()
    if comm.rank == 0:
        run.mkdir(parents=True, exist_ok=True)
    else:  # rank 0 trains the BPE model and writes the id caches first; the others then load them
        comm.barrier(timeout=24 * 3600)
    tok, train, valid, _ = prepare(args, run, args.vocab_size or preset["vocab_size"], args.limit, quiet=comm.rank > 0)
    if comm.rank == 0 and comm.world_size > 1:
        comm.barrier(timeout=24 * 3600)
    trainer = Trainer(settings, tok, train, valid, resume=args.resume, comm=comm)
    if comm.rank == 0:
        print(f"model: {trainer.model.num_parameters():,} parameters; {len(train)} training pairs; "
              f"{comm.world_size} process(es); starting at update {trainer.step}", file=sys.stderr)
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
    run = Path(args.run_dir)
    found = step_checkpoints(run)[-args.last:]
    if not found:
        raise InputError(f"{run}: no checkpoints to average")
    ck = average_checkpoints(found)
    model = Transformer(TransformerConfig.from_dict(ck["meta"]["config"]))
    model.load_state_dict(ck["model"])
    out = save_checkpoint(args.output or run / "average.npz", model, None, {**ck["meta"], "averaged": [p.name for p in found]})
    print(f"averaged {', '.join(p.name for p in found)} -> {out}")


def cmd_translate(args) -> None:
    model, tok = load_model(Path(args.run_dir), args.checkpoint, args.average, args.device)
    lines = D.read_lines(args.input) if args.input else [x.rstrip("\n") for x in sys.stdin]
    out = translate(model, tok, lines, beam_size=args.beam, alpha=args.alpha, device=args.device,
                    progress=args.output is not None)
    text = "\n".join(out) + ("\n" if out else "")
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)


def cmd_evaluate(args) -> dict:
    run = Path(args.run_dir)
    model, tok = load_model(run, args.checkpoint, args.average, args.device)
    if args.src and args.ref:
        src, ref = D.read_parallel(args.src, args.ref)
    elif args.data_dir and wmt14.is_prepared(args.data_dir):
        src, ref = D.read_parallel(*wmt14.split_files(args.data_dir, args.split or "test", args.src_lang, args.tgt_lang))
    else:
        split = args.split or "test_2016_flickr"
        src, ref = D.multi30k(split, args.src_lang, args.tgt_lang, args.data_dir)
    if args.limit:
        src, ref = src[:args.limit], ref[:args.limit]
    hyps = translate(model, tok, src, beam_size=args.beam, alpha=args.alpha, device=args.device)
    cased, lower = bleu(hyps, ref), bleu(hyps, ref, lowercase=True)
    result = {"sentences": len(src), "bleu": cased["score"], "signature": cased["signature"],
              "bleu_lowercase": lower["score"], "signature_lowercase": lower["signature"],
              "beam": args.beam, "alpha": args.alpha, "checkpoint": args.checkpoint or f"last {max(args.average, 1)}"}
    (run / "hypotheses.txt").write_text("\n".join(hyps) + "\n", encoding="utf-8")
    (run / "evaluation.json").write_text(json.dumps(result, indent=2, allow_nan=False))
    print(f"BLEU {cased['score']:.2f}  ({cased['signature']})")
    print(f"BLEU {lower['score']:.2f} lowercased  ({lower['signature']})")
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
    t.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --run-dir")
    t.add_argument("--vocab-size", type=int, help="joint BPE vocabulary (default: the preset's)")
    t.add_argument("--limit", type=int, help="use only the first N training pairs (for quick trials)")
    t.add_argument("--no-progress", action="store_true", help="plain log lines instead of a progress bar")
    t.add_argument("--distributed", action="store_true",
                   help="data parallel over the processes of an mpiexec launch (NCCL on cuda, MPI on cpu)")
    add_data_args(t)
    model_fields = {f.name: f for f in fields(TransformerConfig)}
    settings = [(name, model_fields[first]) for name, (first, *_) in MODEL_FLAGS.items()]
    settings += [(f.name, f) for f in fields(TrainSettings) if f.name not in ("run_dir", "progress", "model")]
    for name, f in settings:
        kind = type(f.default)
        flag = "--" + name.replace("_", "-")
        if kind is bool:
            t.add_argument(flag, type=lambda v: v.lower() in ("1", "true", "yes"), default=None, help="true/false")
        else:
            t.add_argument(flag, type=kind, default=None,
                           help=f.metadata.get("help", f"default: the preset's (else {f.default})"))
    t.set_defaults(func=cmd_train)

    for name, func, helptext in (("translate", cmd_translate, "translate text (stdin -> stdout, or files)"),
                                 ("evaluate", cmd_evaluate, "BLEU on a test set (Multi30k test2016 by default)")):
        c = sub.add_parser(name, help=helptext)
        c.add_argument("--run-dir", required=True)
        c.add_argument("--checkpoint", help="a checkpoint file (default: the newest, or --average N)")
        c.add_argument("--average", type=int, default=0, help="average the last N checkpoints")
        c.add_argument("--beam", type=int, default=4)
        c.add_argument("--alpha", type=float, default=0.6)
        c.add_argument("--device", default="cpu")
        if name == "translate":
            c.add_argument("--input", help="a text file, one sentence per line (default: stdin)")
            c.add_argument("--output", help="where to write (default: stdout)")
        else:
            c.add_argument("--split", help="Multi30k split (default test_2016_flickr); in a WMT14 folder, test "
                                           "(newstest2014, the default) or valid (newstest2013)")
            c.add_argument("--data-dir", help="a local Multi30k directory, or a folder `data wmt14` prepared")
            c.add_argument("--src", help="a source file (WMT: newstest2014, plain or .sgm)")
            c.add_argument("--ref", help="its reference translations")
            c.add_argument("--src-lang", default="en", help="the source side's language code (default en)")
            c.add_argument("--tgt-lang", default="de", help="the target side's language code (default de)")
            c.add_argument("--limit", type=int, help="only the first N sentences")
        c.set_defaults(func=func)

    a = sub.add_parser("average", help="average the last N checkpoints into one file")
    a.add_argument("--run-dir", required=True)
    a.add_argument("--last", type=int, default=5)
    a.add_argument("--output")
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
    if isinstance(error, Interrupted):
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
