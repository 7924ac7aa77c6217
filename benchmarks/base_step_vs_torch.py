"""One training step of Transformer (base): minitensor vs PyTorch eager, same configuration,
same device, per precision: target tokens/s, ms/step, peak memory and model FLOP utilisation.
The two take turns, one step each per round, so both see the machine at the same speed; the
JSON has every step's time and the spread of the per-round ratios, and of every step the host's
part (until the step's call returned, before the device is waited for) and the time Python's
garbage collector ran in it. On a GPU each precision runs in a fresh process, as a training run
would (``--same-process`` to run them all in one).

A step is forward, label-smoothed loss, backward and the Adam update (0.9, 0.98, 1e-9);
dropout 0.1, vocabulary 37000. Precisions: fp32, tf32 (float32 products on TF32 tensor
cores), fp16 (autocast + dynamic loss scaling), bf16 (autocast). PyTorch is optional (a
separate environment, or the GPU machine's own).

    # CPU (the default), a small batch:
    python benchmarks/base_step_vs_torch.py --steps 3
    # GPU, a paper-sized batch (about 25,000 target tokens), every precision, JSON kept:
    python benchmarks/base_step_vs_torch.py --device cuda --batch 400 --length 64 \\
        --precisions fp32,tf32,fp16,bf16 --out benchmarks/results/base_step_h100.json

The JSON also holds the projection of the paper's base run (100,000 steps of about 25,000
target tokens) to hours on this one device, beside the paper's 12 hours on 8 P100s.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from harness import environment, peak_tflops, product_timer, sync, write_results

import minitensor as mt
from minitensor import amp
from transformer import Transformer, TransformerConfig, fuse, label_smoothed_loss, paper_adam

PAPER = {"steps": 100_000, "target_tokens_per_step": 25_000, "hours": 12.0, "hardware": "8 x P100"}


def batch(rng, B, T, V):
    src = rng.integers(3, V, (B, T))
    tgt = rng.integers(3, V, (B, T + 1))
    tgt[:, 0] = 1
    return src, tgt[:, :-1], tgt[:, 1:]


def train_flops(cfg: TransformerConfig, B: int, Ts: int, Tt: int) -> float:
    """Matrix-product FLOPs of one training step (forward x 3), counted layer by layer."""
    d, f, V = cfg.d_model, cfg.d_ff, cfg.vocab_size
    src, tgt = B * Ts, B * Tt
    enc = src * (2 * 4 * d * d + 2 * 2 * d * f) + B * 2 * 2 * Ts * Ts * d
    dec = (tgt * (2 * 4 * d * d + 2 * 2 * d * d + 2 * 2 * d * f) + src * 2 * 2 * d * d
           + B * 2 * 2 * (Tt * Tt + Tt * Ts) * d)
    forward = cfg.n_encoder_layers * enc + cfg.n_decoder_layers * dec + tgt * 2 * d * V
    return 3.0 * forward


def products_probe(cfg: TransformerConfig, args):
    """A probe for run_side_by_side: each round, the best rate (GFLOP/s) NumPy's BLAS reaches
    on the step's own Linear shapes and a 2048-cube, timed alone between the steps."""
    rows, d, f, V = args.batch * args.length, cfg.d_model, cfg.d_ff, cfg.vocab_size
    rates = product_timer([(rows, d, d), (rows, d, f), (rows, f, d), (rows, d, V), (rows, V, d)])
    return lambda: max(rates(2).values())


def products_floor(flops: float, best_rates: list, row: dict) -> dict:
    """The least time the step's matrix products can take on this CPU: its product FLOPs at the
    fastest rate the probe saw in the same round. However fast everything else became, a step
    could not beat it. Over minitensor's step of the same round it gives the products' share of
    the step (1 would leave nothing else); against PyTorch's, the largest tokens/s ratio the
    products allow, round by round (matmul_floor.py counts the products of real updates instead
    of this formula)."""
    floors = [flops / (r * 1e9) for r in best_rates]
    out = {"gflop_per_s_best": round(float(np.median(best_rates)), 1),
           "ms_per_step": round(1000 * float(np.median(floors)), 1)}
    # the products' share of minitensor's step, round by round: the floor over the step of the same round
    share = [fl / (t / 1000) for t, fl in zip(row["minitensor"]["ms_per_step_each"], floors)]
    out["share_of_minitensor_step"] = round(float(np.median(share)), 3)
    out["share_per_round"] = {"min": round(min(share), 3), "max": round(max(share), 3)}
    if isinstance(row.get("torch"), dict):
        ceil = [t / 1000 / fl for t, fl in zip(row["torch"]["ms_per_step_each"], floors)]
        out["largest_ratio_tokens_per_s"] = round(float(np.median(ceil)), 3)
        out["largest_ratio_per_round"] = {"min": round(min(ceil), 3), "max": round(max(ceil), 3)}
    return out


def config(args) -> TransformerConfig:
    """Transformer (base) for ``args.vocab`` words, with ``args.layers`` encoder and decoder layers
    (the base model's 6 unless fewer were asked for: a quick check of the script)."""
    return TransformerConfig.base(args.vocab, n_encoder_layers=args.layers, n_decoder_layers=args.layers)


def minitensor_step(args, data, precision: str):
    """(step(i), peak()): one minitensor training step on batch i, and its peak-memory probe."""
    dev = args.device
    if dev == "cuda":
        mt.cuda.set_tf32(precision == "tf32")
    mt.manual_seed(0)
    model = fuse(Transformer(config(args))).to(dev)  # the form a training run uses
    opt = paper_adam(model.parameters(), lr=1e-4)
    scaler = amp.LossScaler() if precision == "fp16" else None
    half = {"fp16": "float16", "bf16": "bfloat16"}.get(precision)
    inputs = [tuple(mt.tensor(a, device=dev) for a in d) for d in data]
    if getattr(args, "cuda_graphs", False):
        return graphed_step(model, opt, half, inputs), lambda: mt.cuda.PeakMemory()

    def step(i):
        if dev == "cuda":
            mt.cuda.set_tf32(precision == "tf32")
        src, ti, to = inputs[i % len(inputs)]
        with amp.autocast(half, weights=model.parameters()):
            loss = label_smoothed_loss(model(src, ti), to, 0, 0.1, reduction="sum")
        opt.zero_grad()
        (loss * scaler.scale if scaler else loss).backward()
        if scaler:
            ok = scaler.unscale_(opt.params)
            scaler.update(not ok)
            if not ok:
                return
        opt.step()

    return step, lambda: mt.cuda.PeakMemory() if dev == "cuda" else contextlib.nullcontext()


def graphed_step(model, opt, half, inputs):
    """step(i) replayed from a CUDA graph (minitensor.cuda.graphs), as ``train --cuda-graphs``
    does: the host counts Adam's step and reseeds dropout, the batch is copied into the arrays the
    capture read, and one launch runs the rest. The first step runs without a graph (the kernels
    compile, Adam's moments are made), the second is captured."""
    state = {}

    def device_part(src, ti, to):
        with amp.autocast(half, weights=model.parameters()):
            loss = label_smoothed_loss(model(src, ti), to, 0, 0.1, reduction="sum")
        opt.zero_grad()
        loss.backward()
        opt.update_params()

    def step(i):
        mt.manual_seed(i)
        opt.count_step()
        batch = inputs[i % len(inputs)]
        if not state:
            state["warm"] = device_part(*batch)
            return
        if "graph" not in state:
            state["static"] = tuple(mt.tensor(t.data.copy()) for t in batch)
            state["graph"] = mt.cuda.Graph(batch[0].xp, lambda: device_part(*state["static"]))
        else:
            for kept, t in zip(state["static"], batch):
                kept.data[...] = t.data
        state["graph"].replay()

    return step


def torch_step(args, data, precision: str):
    """(step(i), peak()) for the same model in PyTorch eager."""
    import torch
    from torch_reference import TorchTransformer

    dev = args.device
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = config(args)
    model = TorchTransformer(args.vocab, cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.n_encoder_layers,
                             dropout=cfg.dropout).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    half = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    scaler = torch.amp.GradScaler(dev) if precision == "fp16" else None
    inputs = [tuple(torch.from_numpy(a).to(dev) for a in d) for d in data]

    def step(i):
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        src, ti, to = inputs[i % len(inputs)]
        with torch.autocast(dev, dtype=half or torch.float16, enabled=half is not None):
            logits = model(src, ti)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, args.vocab).float(), to.reshape(-1),
                                                     ignore_index=0, label_smoothing=0.1, reduction="sum")
        opt.zero_grad()
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()

    class TorchPeak:
        def __enter__(self):
            torch.cuda.reset_peak_memory_stats()
            return self

        def __exit__(self, *exc):
            self.peak_bytes = torch.cuda.max_memory_allocated()

    return step, lambda: TorchPeak() if dev == "cuda" else contextlib.nullcontext()


class GcClock:
    """The seconds Python's cyclic garbage collector ran while inside the ``with`` block."""

    def __enter__(self):
        self.seconds, self._start = 0.0, None
        gc.callbacks.append(self._tick)
        return self

    def _tick(self, phase, info):
        if phase == "start":
            self._start = time.perf_counter()
        elif self._start is not None:
            self.seconds += time.perf_counter() - self._start
            self._start = None

    def __exit__(self, *exc):
        gc.callbacks.remove(self._tick)


def busy_ms(trace: dict) -> float | None:
    """The milliseconds in which the GPU ran at least one kernel, copy or fill, from a Chrome trace
    of PyTorch's profiler (CUPTI records every CUDA activity of the process, CuPy's kernels too):
    the union of their intervals. None when the trace holds no GPU activity."""
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in trace.get("traceEvents", [])
                   if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e)
    if not spans:
        return None
    total, (start, end) = 0.0, spans[0]
    for a, b in spans[1:]:
        if a > end:
            total, start = total + end - start, a
        end = max(end, b)
    return (total + end - start) / 1000  # the trace's times are microseconds


def device_busy_ms(step, i: int, device: str) -> float | None:
    """The GPU's busy time in one call of ``step(i)`` (:func:`busy_ms`): beside the step's wall
    time it says how much of the step the GPU was idle, waiting for the host. None on the CPU or
    without PyTorch's CUDA profiler."""
    if device != "cuda":
        return None
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step(i)
        sync(device)
    with tempfile.TemporaryDirectory() as tmp:
        prof.export_chrome_trace(str(Path(tmp) / "trace.json"))
        return busy_ms(json.loads((Path(tmp) / "trace.json").read_text()))


def spread(values: list) -> dict:
    """The median and the spread over rounds, in milliseconds."""
    ms = np.array(values) * 1000
    return {"median": round(float(np.median(ms)), 2), "min": round(float(ms.min()), 2),
            "p25": round(float(np.percentile(ms, 25)), 2), "p75": round(float(np.percentile(ms, 75)), 2),
            "max": round(float(ms.max()), 2)}


def run_side_by_side(args, runners: dict, probe=None) -> dict:
    """Time the runners' steps in turns (one step of each, then the next round), after a
    warm-up of each: a machine whose speed drifts slows both sides alike, and each round gives
    one paired ratio. Both models and optimizers are built before this: their objects are moved
    out of the garbage collector's reach (``gc.freeze``), so that a collection that would walk
    them all (about 150 ms, once in a 12-round sitting) does not land in one side's round. Then
    one extra step of each for its peak memory, and on a GPU one for its busy time.
    ``probe()``, if given, is called once a round after the steps; its values go to ``out["probe"]``."""
    gc.collect()
    gc.freeze()
    for step, _ in runners.values():
        for i in range(args.warmup):
            step(i)
    sync(args.device)
    times = {name: [] for name in runners}
    host = {name: [] for name in runners}   # until step() returned: the host's part (all of it on the CPU)
    gc_time = {name: [] for name in runners}
    probed = []
    with GcClock() as gc_clock:
        for i in range(args.steps):
            for name, (step, _) in runners.items():
                gc_before = gc_clock.seconds
                t0 = time.perf_counter()
                step(i)
                host[name].append(time.perf_counter() - t0)
                sync(args.device)
                times[name].append(time.perf_counter() - t0)
                gc_time[name].append(gc_clock.seconds - gc_before)
        if probe is not None:
            probed.append(probe())
    out = {"probe": probed} if probe is not None else {}
    for name, (step, peak) in runners.items():
        med = float(np.median(times[name]))
        r = {"ms_per_step": round(1000 * med, 2), "target_tokens_per_s": round(args.batch * args.length / med, 1),
             "ms_per_step_spread": spread(times[name]), "host_ms_spread": spread(host[name]),
             "ms_per_step_each": [round(1000 * t, 1) for t in times[name]],
             "host_ms_each": [round(1000 * t, 1) for t in host[name]],
             "gc_ms_each": [round(1000 * t, 1) for t in gc_time[name]]}
        with peak() as p:
            step(0)
            sync(args.device)
        if p is not None and hasattr(p, "peak_bytes"):
            r["peak_memory_gib"] = round(p.peak_bytes / 2**30, 3)
        if (busy := device_busy_ms(step, 0, args.device)) is not None:
            # the GPU's share of the step: well under 1 is a step that waits on the host's launches
            r["gpu_busy_ms"], r["gpu_busy_share"] = round(busy, 2), round(busy / (1000 * med), 3)
        out[name] = r
    if len(times) == 2:
        pair = [t / m for m, t in zip(times["minitensor"], times["torch"])]  # our tokens/s over theirs, per round
        out["ratio_tokens_per_s_minitensor_over_torch"] = round(out["torch"]["ms_per_step"] / out["minitensor"]["ms_per_step"], 3)
        out["ratio_per_round"] = {"median": round(float(np.median(pair)), 3), "min": round(min(pair), 3),
                                  "max": round(max(pair), 3)}
    gc.unfreeze()
    return out


def in_own_process(a, precision: str) -> dict:
    """The results of this script for one precision, run in a fresh Python process."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        started = sys.orig_argv[1:len(sys.orig_argv) - len(sys.argv)]   # e.g. -m tests.cupy_double.run: the same
        argv = [sys.executable, *started, str(Path(__file__).resolve()), "--device", a.device,
                "--precisions", precision, "--batch", str(a.batch), "--length", str(a.length), "--vocab", str(a.vocab),
                "--layers", str(a.layers), "--steps", str(a.steps), "--warmup", str(a.warmup), "--out", str(out)]
        argv += (["--threads", str(a.threads)] if a.threads else []) + (["--no-torch"] if a.no_torch else [])
        argv += ["--cuda-graphs"] if a.cuda_graphs else []
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        return json.loads(out.read_text())["results"][precision]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--precisions", default="fp32", help="comma-separated: fp32, tf32, fp16, bf16")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--length", type=int, default=32, help="source and target tokens per sentence")
    p.add_argument("--vocab", type=int, default=37000)
    p.add_argument("--layers", type=int, default=6, help="encoder and decoder layers each (the base model's 6; "
                                                           "fewer for a quick check)")
    p.add_argument("--steps", type=int, default=3, help="timed rounds (one step of each framework per round)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=None, help="PyTorch CPU threads")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--same-process", action="store_true",
                   help="on cuda, run every precision in this one process (by default each runs in a process of "
                        "its own, as a training run would: no precision inherits the models, memory pools and "
                        "caches of the ones before it)")
    p.add_argument("--cuda-graphs", action="store_true",
                   help="on cuda, minitensor's step replayed from a CUDA graph (fp32, tf32 or bf16), as "
                        "train --cuda-graphs does")
    p.add_argument("--out", help="also write the JSON here (e.g. benchmarks/results/...json)")
    a = p.parse_args()
    mt.allocator.from_environment()  # as the programs that train do: freed arrays are reused
    precisions = a.precisions.split(",")
    if a.device == "cpu" and set(precisions) - {"fp32", "fp16"}:
        p.error("on the CPU only fp32 and fp16 (NumPy float16) exist")
    if a.cuda_graphs and (a.device != "cuda" or "fp16" in precisions):
        p.error("--cuda-graphs: on cuda, in fp32, tf32 or bf16 (the graphed step here has no loss scaler)")
    rng = np.random.default_rng(0)
    data = [batch(rng, a.batch, a.length, a.vocab) for _ in range(2)]
    env = environment(a.device)
    cfg = config(a)
    flops = train_flops(cfg, a.batch, a.length, a.length)
    out = {"benchmark": "transformer-base training step", "environment": env, "config": vars(a),
           "train_gflop_per_step": round(flops / 1e9, 1), "paper_base_run": PAPER, "results": {}}
    if a.device == "cuda" and len(precisions) > 1 and not a.same_process:
        out["config"]["processes"] = "one per precision"
        for prec in precisions:
            out["results"][prec] = in_own_process(a, prec)
        write_results(out, a.out)
        return
    for prec in precisions:
        runners = {"minitensor": minitensor_step(a, data, prec)}
        if not a.no_torch:
            try:
                runners["torch"] = torch_step(a, data, prec)
            except ImportError:
                pass
        floor = a.device == "cpu" and prec == "fp32"
        row = run_side_by_side(a, runners, products_probe(cfg, a) if floor else None)
        if "torch" not in runners and not a.no_torch:
            row["torch"] = "not installed"
        peak = peak_tflops(env.get("gpu", ""), prec) if a.device == "cuda" else None
        for who in ("minitensor", "torch"):
            r = row.get(who)
            if isinstance(r, dict):
                achieved = flops / (r["ms_per_step"] / 1000) / 1e12
                r["achieved_tflops"] = round(achieved, 2)
                if peak:
                    r["mfu"] = round(achieved / peak, 4)
                tps = r["target_tokens_per_s"]
                r["paper_base_run_hours_on_this_device"] = round(
                    PAPER["steps"] * PAPER["target_tokens_per_step"] / tps / 3600, 1)
        if floor:
            row["products_floor"] = products_floor(flops, row.pop("probe"), row)
        out["results"][prec] = row
    write_results(out, a.out)


if __name__ == "__main__":
    main()
