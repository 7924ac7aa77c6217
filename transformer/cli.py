"""``python -m transformer``: data, train, translate, evaluate, average, export.

    python -m transformer data wmt14 --out data/wmt14      # the paper's data, downloaded and checked
    python -m transformer train --preset multi30k-cpu --run-dir runs/m30k
    python -m transformer evaluate --run-dir runs/m30k --average 3
    echo "A dog runs in the park." | python -m transformer translate --run-dir runs/m30k
    python -m transformer average --run-dir runs/m30k --last 3 --output runs/m30k/average.npz
    python -m transformer export --run-dir runs/m30k --average 3 --out m30k.safetensors --layout torch
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
import platform
import re
import signal
import sys
import traceback

import numpy as np
from tqdm import tqdm

import minitensor
from minitensor import allocator, environment

from . import wmt14
from .checkpoint import CheckpointWriteError
from .commands import (INPUT_ERRORS, TranslationStopped, cmd_average, cmd_data, cmd_evaluate, cmd_export,
                       cmd_train, cmd_translate)
from .config import RANGES as MODEL_RANGES
from .decoding import MAX_BEAM
from .download import DownloadError
from .evaluate import DECODE_MEMORY_GIB, LONG_LINES
from .export import LAYOUTS
from .flags import Boolean, Choice, InputError, Parser, Real, Text, Whole, help_text, usage_error
from .files import FileWriteError
from .settings import DATA_SETTINGS, HELP, RANGES
from .signals import OTHER_ENDING_SIGNALS, Stopped, closed_pipe, handled, raise_stopped
from .train import Interrupted, TrainingDiverged


EXIT_FAILURE, EXIT_INPUT, EXIT_INTERRUPTED = 1, 2, 130


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


VERBS_THAT_DECODE = (  # name, function, one line for the verb list, the verb's --help description
    ("translate", cmd_translate, "translate text (stdin -> stdout, or files)",
     "Translate one sentence per line with a trained run's model (its newest checkpoint, --checkpoint, or the "
     "average of the last --average N): beam search with a length penalty (Section 6.1: beam 4, alpha 0.6)."),
    ("evaluate", cmd_evaluate, "BLEU on a test set (Multi30k test2016 by default)",
     "Translate a test set and score it with sacreBLEU, cased and lowercased: Multi30k test2016 by default, "
     "newstest2014 in a folder `data wmt14` prepared, or --src/--ref files. The scores, their signatures and the "
     "hypotheses are written to <run-dir>/evaluations/; a whole default test set also to evaluation.json."),
)


MODULE_PROG = "python -m transformer"
CONSOLE_PROG = "minitensor-transformer"  # the console script (pyproject.toml's [project.scripts])


def version_line() -> str:
    """What ``--version`` prints: the project's version and what it runs on."""
    return (f"{minitensor.DISTRIBUTION} {minitensor.__version__} (Python {platform.python_version()}, "
            f"NumPy {np.__version__}, {platform.system() or 'unknown system'} {platform.machine()})")


class _Version(argparse.Action):
    """``--version``: the line of :func:`version_line`, made only when asked (reading the package
    metadata takes about 10 ms, which every other command would pay)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_line())
        parser.exit()


def build_parser(prog: str = MODULE_PROG) -> argparse.ArgumentParser:
    """Every verb and flag; each value flag parses with its declared kind (:mod:`transformer.flags`),
    so a value out of range is refused here, naming the flag, before any work."""
    p = _Parser(prog=prog, description=plain_text(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--debug", action="store_true", help="print the traceback of an error")
    p.add_argument("--version", action=_Version, help="print the version and exit")
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
    _value(t, "--fused", RANGES["fused"], None, HELP["fused"])
    _value(t, "--memory-every", RANGES["memory_every"], None, HELP["memory_every"])
    _value(t, "--profile", RANGES["profile"], None, HELP["profile"])
    _value(t, "--tensorboard", RANGES["tensorboard"], None, HELP["tensorboard"])
    _value(t, "--cuda-graphs", RANGES["cuda_graphs"], None, HELP["cuda_graphs"])
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

    x = sub.add_parser("export", help="write a run's weights as safetensors (for PyTorch and other tools)",
                       description="Write the weights of a run's model (the newest checkpoint, --checkpoint, or the "
                                   "average of the last --average N) to one safetensors file, with the model's "
                                   "configuration in its metadata. --layout torch names and shapes them for "
                                   "transformer.export.torch_transformer, a PyTorch module of torch.nn's encoder and "
                                   "decoder layers that gives the same logits.")
    x.add_argument("--run-dir", required=True, type=Text("folder"), help="a run directory that train wrote")
    x.add_argument("--checkpoint", type=Text("file"), help="a checkpoint file (default: the newest, or --average N)")
    _value(x, "--average", Whole(1, 10**6), None, "average the last N checkpoints (default: the newest)")
    x.add_argument("--out", required=True, type=Text("new file"), help="the safetensors file to write")
    _value(x, "--layout", Choice(LAYOUTS), "minitensor",
           "minitensor: this project's names and shapes, which model_from_safetensors reads back; torch: those of "
           "the PyTorch module (default minitensor)")
    x.set_defaults(func=cmd_export)
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


def main(argv=None, prog: str = MODULE_PROG):
    """Run one command and return its result; errors propagate (for scripts and tests)."""
    args = build_parser(prog).parse_args(argv)
    return args.func(args)


def _close_progress_bars() -> None:
    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()


def console() -> None:
    """The ``minitensor-transformer`` command: :func:`run`, its usage lines under that name."""
    sys.exit(run(prog=CONSOLE_PROG))


def run(argv=None, prog: str = MODULE_PROG) -> int:
    """The command line: :func:`main` with errors as one ``error:`` line and an exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    try:
        environment.check()  # every variable the project reads, before any work
        debug = debug or environment.switch("MINITENSOR_DEBUG")
        allocator.from_environment()  # a program's choice for its whole process: freed arrays are reused
        with handled(OTHER_ENDING_SIGNALS, raise_stopped):  # as Ctrl-C: training catches them itself
            main(argv, prog)
        sys.stdout.flush()
        return 0
    except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001 - every failure becomes one line
        error = e
    if isinstance(error, BrokenPipeError):  # the reader of the output has all it wanted (`| head`)
        return closed_pipe()
    if isinstance(error, (Interrupted, TranslationStopped)):
        status, message = getattr(error, "status", EXIT_INTERRUPTED), str(error)
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
    stopped = isinstance(error, (Interrupted, TranslationStopped, KeyboardInterrupt))  # a stop, not an error
    print(message if stopped else f"error: {message}", file=sys.stderr)
    if not debug and status == EXIT_FAILURE and not _own_words(error):
        print("(run again with --debug for the traceback)", file=sys.stderr)
    return status


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
