"""Time to 99% exact match on the copy task: minitensor vs PyTorch (CPU), same configuration.

Both train the same architecture from the same initial weights (PyTorch loads minitensor's;
--own-init lets it draw its own) on the same batches (same numpy generator), with Adam
(0.9, 0.98, 1e-9) and the Noam schedule, validate by greedy decoding every --eval-every
steps and stop at the first validation exact match >= --target. PyTorch is optional: install
it in a separate environment (pip install torch==2.13.0) and run this script from there.

    python benchmarks/copy_task_vs_torch.py                      # d_model 128, 2+2 layers
    python benchmarks/copy_task_vs_torch.py --d-model 64 --d-ff 128
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

import minitensor as mt
from transformer import TransformerConfig
from transformer.copytask import CopyTaskSettings, build_model, make_batch, train_copy_task
from transformer.schedule import noam_lr


def settings_from(a) -> CopyTaskSettings:
    model = TransformerConfig(13, d_model=a.d_model, n_heads=a.heads, d_ff=a.d_ff, n_encoder_layers=a.layers,
                              n_decoder_layers=a.layers, dropout=0.0)
    return CopyTaskSettings(model=model, batch=a.batch, warmup=a.warmup, lr_factor=a.lr_factor, steps=a.max_steps,
                            seed=a.seed, show_progress=False)


def run_minitensor(s: CopyTaskSettings, target: float, eval_every: int) -> dict:
    """The project's own training loop (transformer.copytask), stopping at the target. ``cpu_seconds``:
    the processor time of every thread of this process over the whole run (set-up and plots
    included), which a busy neighbour on a shared machine disturbs less than the wall time."""
    cpu = time.process_time()
    with tempfile.TemporaryDirectory() as run_dir, contextlib.redirect_stdout(io.StringIO()):
        summary = train_copy_task(replace(s, stop_at=target, eval_every=eval_every, run_dir=run_dir))
    return {"seconds": summary["train_seconds"], "steps": summary["steps"],
            "cpu_seconds": round(time.process_time() - cpu, 2)}


def run_torch(s: CopyTaskSettings, target: float, eval_every: int, same_start: bool = True) -> dict:
    import torch

    from torch_reference import TorchTransformer, load_minitensor_weights, torch_greedy
    from transformer.copytask import score

    torch.manual_seed(s.seed)
    rng = np.random.default_rng(s.seed)
    val = make_batch(np.random.default_rng(s.seed + 1), s.eval_size, s)
    m = s.model
    model = TorchTransformer(s.vocab, m.d_model, m.n_heads, m.d_ff, m.n_encoder_layers, m.dropout, s.max_length + 2)
    if same_start:  # the weights train_copy_task starts from: the same seed, the same builder
        mt.manual_seed(s.seed)
        load_minitensor_weights(model, ((n, p.numpy()) for n, p in build_model(s).named_parameters()))
    opt = torch.optim.Adam(model.parameters(), lr=0.0, betas=(0.9, 0.98), eps=1e-9)
    t0 = time.perf_counter()
    for step in range(1, s.steps + 1):
        src, tgt_in, tgt_out = (torch.from_numpy(a) for a in make_batch(rng, s.batch, s))
        logits = model(src, tgt_in)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, s.vocab), tgt_out.reshape(-1), ignore_index=0,
                                                 label_smoothing=s.smoothing)
        opt.zero_grad()
        loss.backward()
        for g in opt.param_groups:
            g["lr"] = noam_lr(step, m.d_model, s.warmup, s.lr_factor)
        opt.step()
        if step % eval_every == 0:
            pred = torch_greedy(model, torch.from_numpy(val[0]), val[2].shape[1])
            exact, _ = score(pred, val[2])
            if exact >= target:
                return {"seconds": time.perf_counter() - t0, "steps": step}
    return {"seconds": float("nan"), "steps": s.steps}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--d-ff", type=int, default=256)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--lr-factor", type=float, default=1.0)
    p.add_argument("--max-steps", type=int, default=3000)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--target", type=float, default=0.99)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: PyTorch's own)")
    p.add_argument("--own-init", action="store_true",
                   help="PyTorch draws its own initial weights (default: both start from minitensor's, so the "
                        "runs differ only in arithmetic, not in luck)")
    p.add_argument("--no-torch", action="store_true", help="minitensor only, even where PyTorch is installed")
    p.add_argument("--out", help="also write the rows and medians as JSON here")
    a = p.parse_args()
    mt.allocator.from_environment()  # as the programs that train do: freed arrays are reused
    rows = []
    for seed in a.seeds:
        a.seed = seed
        s = settings_from(a)
        row = {"seed": seed, "minitensor": run_minitensor(s, a.target, a.eval_every)}
        try:
            if a.no_torch:
                raise ImportError("--no-torch")
            import torch

            if a.threads:
                torch.set_num_threads(a.threads)
            row["torch"] = run_torch(s, a.target, a.eval_every, same_start=not a.own_init)
            row["ratio_minitensor_over_torch"] = row["minitensor"]["seconds"] / row["torch"]["seconds"]
        except ImportError:
            row["torch"] = "not run" if a.no_torch else "not installed"
        print(json.dumps(row), flush=True)
        rows.append(row)
    mt_s = [r["minitensor"]["seconds"] for r in rows]
    out = {"benchmark": "copy task: seconds to the target exact match", "config": vars(a), "rows": rows,
           "minitensor_median_seconds": round(float(np.median(mt_s)), 2),
           "minitensor_ms_per_update": round(1000 * sum(mt_s) / sum(r["minitensor"]["steps"] for r in rows), 1)}
    print(f"minitensor: median {np.median(mt_s):.1f} s to {a.target:.0%} exact match over seeds {a.seeds}")
    if all(isinstance(r["torch"], dict) for r in rows):
        th_s = [r["torch"]["seconds"] for r in rows]
        out.update(torch_median_seconds=round(float(np.median(th_s)), 2),
                   torch_ms_per_update=round(1000 * sum(th_s) / sum(r["torch"]["steps"] for r in rows), 1),
                   ratio_median_seconds=round(float(np.median(mt_s) / np.median(th_s)), 3))
        out["ratio_ms_per_update"] = round(out["minitensor_ms_per_update"] / out["torch_ms_per_update"], 3)
        print(f"pytorch   : median {np.median(th_s):.1f} s")
        print(f"ratio minitensor/pytorch (median of times): {out['ratio_median_seconds']:.2f}; "
              f"per update (evaluation included): {out['ratio_ms_per_update']:.2f}")
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
