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

from transformer.copytask import CopyTaskSettings, train_copy_task


def parse_args(argv=None) -> CopyTaskSettings:
    defaults = CopyTaskSettings()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    helps = {
        "vocab": "vocabulary size including pad/bos/eos", "min_length": "shortest sequence",
        "max_length": "longest sequence", "layers": "encoder and decoder layers (each)",
        "stop_at": "stop when validation exact match reaches this (0-1); 'none' runs every step",
        "eval_every": "validate every N steps", "run_dir": "where outputs go", "device": "cpu or cuda",
        "lr_factor": "multiplies the Noam learning rate", "warmup": "Noam warm-up steps",
        "smoothing": "label smoothing epsilon",
        "profile": "time every op of N updates (after the first) with minitensor.profile: a table on stderr "
                   "and profile.json in the run directory; 0 is off",
    }
    for f in fields(CopyTaskSettings):
        if f.name == "show_progress":
            continue
        default = getattr(defaults, f.name)
        flag = "--" + f.name.replace("_", "-")
        if f.name == "stop_at":
            p.add_argument(flag, type=lambda v: None if v.lower() == "none" else float(v), default=default,
                           help=helps[f.name] + f" (default {default})")
        else:
            p.add_argument(flag, type=type(default), default=default, help=helps.get(f.name, f.name.replace("_", " "))
                           + f" (default {default})")
    p.add_argument("--no-progress", action="store_true", help="print plain lines instead of a progress bar")
    a = p.parse_args(argv)
    kw = {f.name: getattr(a, f.name) for f in fields(CopyTaskSettings) if f.name != "show_progress"}
    return CopyTaskSettings(**kw, show_progress=not a.no_progress)


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
