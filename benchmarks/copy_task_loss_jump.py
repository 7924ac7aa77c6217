"""The jump in the copy task's loss curve: how often, how large, and whether a usual remedy removes it.

The quick start's copy task (``examples/copy_task.py``, defaults) often shows one jump in
``loss.png``: the loss falls to about 0.01, leaps back up by one to three nats within a few
updates, and falls again. This script trains the copy task for several seeds, with the defaults
and with one setting changed at a time, and reports for each run:

- ``updates``: when validation exact match reached 100% (the run stops there);
- ``jump``: the largest rise of the training loss above its lowest value so far, after update 50
  (so warm-up's noise does not count), with the update it peaked at and the low it rose from;
- ``exact_match``: on the 100 fresh test sequences;
- ``validation``: exact match at every evaluation.

Variants: ``default``; ``lr_factor=0.3`` (a lower peak rate than 0.5); ``clip=1`` (gradients
clipped to norm 1 before Adam); ``eps=1e-6`` and ``beta2=0.999`` (Adam's, against the paper's
1e-9 and 0.98); ``pre_norm`` (``norm_first=True``).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/copy_task_loss_jump.py \\
        --seeds 0 1 2 3 4 5 --out benchmarks/results/copy_task_loss_jump_<date>.json
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from minitensor import optim  # noqa: E402
from transformer import copytask  # noqa: E402
from transformer.copytask import CopyTaskSettings, copy_model, train_copy_task  # noqa: E402

from harness import commit, environment, write_results  # noqa: E402

VARIANTS = ("default", "lr_factor=0.3", "clip=1", "eps=1e-6", "beta2=0.999", "pre_norm")


def largest_jump(losses: list, after: int = 50) -> dict:
    """The largest rise of ``losses`` above its running minimum, counted from update ``after`` + 1."""
    low, best = float("inf"), {"rise": 0.0, "at_update": None, "from_loss": None}
    for update, loss in enumerate(losses, 1):
        if update > after and loss - low > best["rise"]:
            best = {"rise": loss - low, "at_update": update, "from_loss": low}
        low = min(low, loss)
    return best


def adam_for(variant: str):
    """``paper_adam`` as the copy task calls it, with the variant's one change."""
    paper_adam = copytask.paper_adam

    def make(params, lr: float = 0.0):
        params = list(params)
        opt = paper_adam(params, lr)
        if variant == "eps=1e-6":
            opt.eps = 1e-6
        elif variant == "beta2=0.999":
            opt.betas = (opt.betas[0], 0.999)
        elif variant == "clip=1":
            step = opt.step

            def clipped_step():
                optim.clip_grad_norm(params, 1.0)
                step()
            opt.step = clipped_step
        return opt
    return make


def run(variant: str, seed: int, folder: Path) -> dict:
    settings = CopyTaskSettings(seed=seed, run_dir=str(folder / f"{variant}_{seed}"), show_progress=False)
    if variant == "lr_factor=0.3":
        settings = replace(settings, lr_factor=0.3)
    if variant == "pre_norm":
        settings = replace(settings, model=replace(copy_model(), norm_first=True))
    paper_adam = copytask.paper_adam
    copytask.paper_adam = adam_for(variant)
    try:
        summary = train_copy_task(settings)
    finally:
        copytask.paper_adam = paper_adam
    records = [json.loads(line) for line in (Path(settings.run_dir) / "metrics.jsonl").read_text().splitlines()]
    jump = largest_jump([r["loss"] for r in records])
    return {"variant": variant, "seed": seed, "updates": summary["steps"], "exact_match": summary["exact_match"],
            **{k: (round(v, 4) if isinstance(v, float) else v) for k, v in jump.items()},
            "validation": [[r["step"], r["val_exact_match"]] for r in records if "val_exact_match" in r]}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4, 5])
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    ap.add_argument("--out", help="write the results here as JSON")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for variant in args.variants:
            for seed in args.seeds:
                rows.append(run(variant, seed, Path(tmp)))
                r = rows[-1]
                print(f"{variant:>12} seed {seed}: 100% at update {r['updates']:4d}, test {r['exact_match']:.0%}; "
                      f"largest jump +{r['rise']:.2f} to update {r['at_update']} from {r['from_loss']:.3f}",
                      file=sys.stderr, flush=True)
    summary = {}
    for variant in args.variants:
        mine = [r for r in rows if r["variant"] == variant]
        summary[variant] = {"updates": sorted(r["updates"] for r in mine),
                            "jumps_over_0.8_from_below_0.05": sum(r["rise"] > 0.8 and r["from_loss"] < 0.05
                                                                    for r in mine),
                            "largest_jumps": sorted(round(r["rise"], 2) for r in mine)}
    write_results({"benchmark": "copy_task_loss_jump", "commit": commit(HERE.parent), "environment": environment("cpu"),
                   "summary": summary, "runs": rows}, args.out)


if __name__ == "__main__":
    main()
