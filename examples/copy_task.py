"""Train a small Transformer to copy random sequences, on the CPU, in well under a minute.

    python examples/copy_task.py                      # defaults: d_model 64, 2+2 layers
    python examples/copy_task.py --d-model 128 --steps 3000 --run-dir runs/copy-big

Writes to the run directory: summary.json (exact_match, token_accuracy, train_seconds, steps),
metrics.jsonl, loss.png, attention.png and examples.txt, replacing an earlier run's (a note says so).
Ctrl-C (or SIGTERM, SIGHUP) stops training after the update in flight; the fresh sequences are
still decoded and every file written, and the exit status is 130. A second Ctrl-C stops at once.
"""
import argparse
import json
import sys

from minitensor import allocator, blas, environment

from transformer.config import RANGES as MODEL_RANGES
from transformer.copytask import OUTPUTS, RANGES, CopyTaskSettings, train_copy_task
from transformer.flags import Parser, help_text
from transformer.settings import model_with


def parse_args(argv=None) -> CopyTaskSettings:
    """The settings from the flags, each parsed with its declared kind (transformer.copytask.RANGES,
    and the model's transformer.config.RANGES): a value out of range is one usage line naming the
    flag, exit status 2."""
    defaults = CopyTaskSettings()
    p = Parser(prog="python examples/copy_task.py", description=__doc__,
               formatter_class=argparse.RawDescriptionHelpFormatter)

    def flag(name: str, kind, default, text: str, parse=None) -> None:
        p.add_argument(name, type=parse or kind, default=default, help=f"{help_text(kind, text)} (default {default})")

    # the model's flags: each sets the field of the TransformerConfig of its name (--layers: both stacks)
    model = defaults.model
    flag("--d-model", MODEL_RANGES["d_model"], model.d_model, "model width")
    flag("--n-heads", MODEL_RANGES["n_heads"], model.n_heads, "attention heads")
    flag("--d-ff", MODEL_RANGES["d_ff"], model.d_ff, "feed-forward inner width")
    flag("--layers", MODEL_RANGES["n_encoder_layers"], model.n_encoder_layers, "encoder and decoder layers (each)")
    flag("--dropout", MODEL_RANGES["dropout"], model.dropout, "residual and embedding dropout")
    # the task's and the recipe's flags: each sets the CopyTaskSettings field of its name
    helps = {
        "vocab": "vocabulary size including pad/bos/eos", "min_length": "shortest sequence",
        "max_length": "longest sequence",
        "stop_at": "stop when validation exact match reaches this; 'none' runs every step",
        "eval_every": "validate every N steps", "run_dir": "where outputs go", "device": "cpu or cuda",
        "lr_factor": "multiplies the Noam learning rate", "warmup": "Noam warm-up steps",
        "smoothing": "label smoothing epsilon", "batch": "sequences per update",
        "steps": "updates at most", "eval_size": "validation sequences", "test_size": "test sequences",
        "seed": "random seed (weights, data, dropout)",
        "profile": "time every op of N updates (after the first) with minitensor.profile: a table on stderr "
                   "and profile.json in the run directory; 0 is off",
        "fused": "the model's sub-layers in their fused forms (transformer/fused.py); false: as the paper writes them",
    }
    for name, kind in RANGES.items():
        kind_or_none = (lambda v, kind=kind: None if v == "none" else kind(v)) if name == "stop_at" else kind
        flag("--" + name.replace("_", "-"), kind, getattr(defaults, name), helps[name], parse=kind_or_none)
    p.add_argument("--no-progress", action="store_true", help="print plain lines instead of a progress bar")
    a = p.parse_args(argv)
    try:
        environment.check()  # every variable the project reads, before any work
        model = model_with(model, d_model=a.d_model, n_heads=a.n_heads, d_ff=a.d_ff, n_encoder_layers=a.layers,
                           n_decoder_layers=a.layers, dropout=a.dropout)  # heads that do not divide: named by flag
        settings = CopyTaskSettings(model=model, show_progress=not a.no_progress, **{n: getattr(a, n) for n in RANGES})
        settings.check()  # what one flag alone cannot say: --min-length past --max-length
    except ValueError as e:
        p.error(str(e))
    return settings


def main(argv=None) -> dict:
    settings = parse_args(argv)
    allocator.from_environment()  # a program's choice for its whole process: freed arrays are reused
    blas.print_advice(settings.device)
    summary = train_copy_task(settings)
    copied = round(summary["exact_match"] * settings.test_size)
    print(f"fresh sequences, never seen in training: {copied} of {settings.test_size} copied exactly")
    shown = {k: summary[k] for k in ("exact_match", "token_accuracy", "train_seconds", "steps", "parameters")}
    print(json.dumps(shown, indent=2))
    extra = " profile.json" if settings.profile else ""
    print(f"outputs in {settings.run_dir}/: {' '.join(OUTPUTS)}{extra}")
    return summary


if __name__ == "__main__":
    try:
        stopped_by = main()["stopped_by"]
    except KeyboardInterrupt:  # a second Ctrl-C: stopped at once, as the line before said
        print("interrupted", file=sys.stderr)
        stopped_by = "interrupted"
    sys.exit(130 if stopped_by == "interrupted" else 0)  # 130: what a shell reports after Ctrl-C
