"""Train a small Transformer to copy random sequences, on the CPU, in well under a minute.

    python examples/copy_task.py                      # defaults: d_model 64, 2+2 layers
    python examples/copy_task.py --d-model 128 --steps 3000 --run-dir runs/copy-big

Writes to the run directory: summary.json (exact_match, token_accuracy, train_seconds, steps),
metrics.jsonl, loss.png, attention.png and examples.txt.
"""
import argparse
import json
from dataclasses import fields

from minitensor import blas

from transformer.copytask import RANGES, CopyTaskSettings, train_copy_task
from transformer.flags import Parser, help_text


def parse_args(argv=None) -> CopyTaskSettings:
    """The settings from the flags, each parsed with its declared kind (transformer.copytask.RANGES):
    a value out of range is one usage line naming the flag, exit status 2."""
    defaults = CopyTaskSettings()
    p = Parser(prog="python examples/copy_task.py", description=__doc__,
               formatter_class=argparse.RawDescriptionHelpFormatter)
    helps = {
        "vocab": "vocabulary size including pad/bos/eos", "min_length": "shortest sequence",
        "max_length": "longest sequence", "layers": "encoder and decoder layers (each)",
        "stop_at": "stop when validation exact match reaches this; 'none' runs every step",
        "eval_every": "validate every N steps", "run_dir": "where outputs go", "device": "cpu or cuda",
        "lr_factor": "multiplies the Noam learning rate", "warmup": "Noam warm-up steps",
        "smoothing": "label smoothing epsilon", "d_model": "model width", "n_heads": "attention heads",
        "d_ff": "feed-forward inner width", "dropout": "residual and embedding dropout", "batch": "sequences per update",
        "steps": "updates at most", "eval_size": "validation sequences", "test_size": "test sequences",
        "seed": "random seed (weights, data, dropout)",
        "profile": "time every op of N updates (after the first) with minitensor.profile: a table on stderr "
                   "and profile.json in the run directory; 0 is off",
    }
    for f in fields(CopyTaskSettings):
        if f.name == "show_progress":
            continue
        kind, default = RANGES[f.name], getattr(defaults, f.name)
        kind_or_none = (lambda v, kind=kind: None if v == "none" else kind(v)) if f.name == "stop_at" else kind
        p.add_argument("--" + f.name.replace("_", "-"), type=kind_or_none, default=default,
                       help=f"{help_text(kind, helps.get(f.name, f.name.replace('_', ' ')))} (default {default})")
    p.add_argument("--no-progress", action="store_true", help="print plain lines instead of a progress bar")
    a = p.parse_args(argv)
    kw = {f.name: getattr(a, f.name) for f in fields(CopyTaskSettings) if f.name != "show_progress"}
    settings = CopyTaskSettings(**kw, show_progress=not a.no_progress)
    try:
        settings.check()  # what one flag alone cannot say: --min-length past --max-length, heads that do not divide
    except ValueError as e:
        p.error(str(e))
    return settings


def main(argv=None) -> dict:
    settings = parse_args(argv)
    blas.print_advice(settings.device)
    summary = train_copy_task(settings)
    shown = {k: summary[k] for k in ("exact_match", "token_accuracy", "train_seconds", "steps", "parameters")}
    print(json.dumps(shown, indent=2))
    extra = " profile.json" if settings.profile else ""
    print(f"outputs in {settings.run_dir}/: summary.json loss.png attention.png examples.txt metrics.jsonl{extra}")
    return summary


if __name__ == "__main__":
    main()
