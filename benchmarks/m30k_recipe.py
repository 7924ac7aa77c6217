"""The Multi30k recipe search: each setting trained for the preset's 28 minutes and scored on
validation, one row per run, and the final run scored once on test2016.

    # train the multi30k-cpu preset with some flags changed, score val, append a row
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/m30k_recipe.py run \\
        --name "cool-down 0.3" --out benchmarks/results/m30k_val_recipe_<date>.json \\
        --data-dir ../shared/data/multi30k --work /tmp/m30k -- --cooldown 0.3

    # a run already trained: score val and append its row
    python benchmarks/m30k_recipe.py collect --name NAME --run-dir RUN --out FILE --data-dir DIR

    # decoding settings on val for a trained run (no training): beam x alpha x averaged checkpoints
    python benchmarks/m30k_recipe.py decode --run-dir RUN --out FILE --data-dir DIR --beam 4 6 --alpha 0.6 1.0

    # what an update costs at each batch size (no evaluation, no checkpoints; sizes alternate by round)
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/m30k_recipe.py speed \
        --max-tokens 2500 1250 625 --rounds 2 --out FILE --data-dir DIR
    # the same for another preset, with train's flags after --
    python benchmarks/m30k_recipe.py speed --preset multi30k-gpu --max-tokens 8192 16384 --data-dir DIR -- --tf32 true

    # the chosen run, once on test2016: runs[].test2016 with its signature, the curve, the README's figure
    python benchmarks/m30k_recipe.py final --run-dir RUN --out benchmarks/results/m30k_cpu_bleu_<date>.json \\
        --data-dir DIR --figure docs/multi30k_cpu_loss.png [--beam 4 --alpha 0.6 --average 1]

Settings are chosen on validation only; ``final`` is the one look at the test set. Every row
records the commit, the machine (CPU, BLAS kernels) and the flags, because a 28-minute budget
buys a different number of updates on another machine or day.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from transformer import cli  # noqa: E402

from harness import commit, environment, like_prepared, seconds_per_update  # noqa: E402


def curve(run: Path) -> list[dict]:
    """The validation points of a run's metrics.jsonl: step, seconds, loss, valid NLL and BLEU."""
    out = []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        if "valid_nll" in r:
            out.append({k: r[k] for k in ("step", "seconds", "loss", "valid_nll", "valid_bleu", "lr") if k in r})
    return out


def evaluate(run: Path, data_dir: str | None, split: str | None, beam: int = 4, alpha: float = 0.6,
             average: int = 1) -> dict:
    """``python -m transformer evaluate`` in this process; its result dict."""
    argv = ["evaluate", "--run-dir", str(run), "--beam", str(beam), "--alpha", str(alpha), "--average", str(average)]
    argv += ["--data-dir", data_dir] if data_dir else []
    argv += ["--split", split] if split else []
    result = cli.main(argv)
    return {k: result[k] for k in ("sentences", "bleu", "signature", "bleu_lowercase", "signature_lowercase", "beam",
                                   "alpha", "checkpoint", "checkpoint_files", "empty_hypotheses")}


def read(path: Path) -> dict:
    if path.exists():
        return json.loads(path.read_text())
    return {"purpose": "Multi30k recipe search on validation: settings are chosen on val only, test2016 is scored "
                       "once at the end", "runs": []}


def append(path: Path, row: dict) -> None:
    data = read(path)
    data["runs"].append(row)
    path.write_text(json.dumps(data, indent=2) + "\n")
    print(f"{row['name']}: appended to {path}", file=sys.stderr)


def trained_row(name: str, run: Path, flags: list[str], data_dir: str | None) -> dict:
    summary = json.loads((run / "train_summary.json").read_text())
    settings = json.loads((run / "settings.json").read_text())
    return {"name": name, "changes": flags, "commit": commit(ROOT), "date": time.strftime("%Y-%m-%d"),
            "machine": environment("cpu"), "settings": settings, "train": summary,
            "val": evaluate(run, data_dir, "val", settings.get("beam_size", 4), settings.get("alpha", 0.6)),
            "curve": curve(run)}


def cmd_run(a) -> None:
    run = Path(a.work) / a.name.replace(" ", "_").replace("/", "-")
    cmd = [sys.executable, "-m", "transformer", "train", "--preset", "multi30k-cpu", "--run-dir", str(run),
           "--no-progress", *(["--data-dir", a.data_dir] if a.data_dir else []), *a.flags]
    print("$ " + shlex.join(cmd), file=sys.stderr)
    run.parent.mkdir(parents=True, exist_ok=True)
    with open(run.parent / f"{run.name}.log", "w") as log:
        status = subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT).returncode
    if status != 0:
        sys.exit(f"training failed (exit {status}); see {run.parent / (run.name + '.log')}")
    append(Path(a.out), {**trained_row(a.name, run, a.flags, a.data_dir), "command": shlex.join(cmd),
                         "env_unset": [v for v in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") if v not in os.environ]})


def cmd_collect(a) -> None:
    append(Path(a.out), trained_row(a.name, Path(a.run_dir), a.changes or [], a.data_dir))


def cmd_decode(a) -> None:
    run = Path(a.run_dir)
    rows = []
    for average in a.average:
        for beam in a.beam:
            for alpha in a.alpha:
                r = evaluate(run, a.data_dir, "val", beam, alpha, average)
                rows.append({"beam": beam, "alpha": alpha, "average": average, "val": r})
                print(f"beam {beam} alpha {alpha:g} average {average}: val BLEU {r['bleu']:.2f} "
                      f"(lowercased {r['bleu_lowercase']:.2f})", file=sys.stderr)
    append(Path(a.out), {"name": f"decoding settings on {run.name}", "run_dir": str(run), "commit": commit(ROOT),
                         "date": time.strftime("%Y-%m-%d"), "decoding": rows})


def cmd_speed(a) -> None:
    """ms per update at each --max-tokens, in the steady state (the first --skip updates dropped),
    rounds alternating the sizes; the BPE model and id caches are prepared once and copied."""
    import tempfile  # noqa: PLC0415

    train = [sys.executable, "-m", "transformer", "train", "--preset", a.preset, "--no-progress", "--max-minutes",
             "0", "--eval-every", "1000000", "--save-every", "1000000",
             *(["--data-dir", a.data_dir] if a.data_dir else []), *a.flags]
    ms: dict[int, list[float]] = {t: [] for t in a.max_tokens}
    with tempfile.TemporaryDirectory() as tmp:
        prep = Path(tmp) / "prep"
        subprocess.run([*train, "--run-dir", str(prep), "--max-steps", "1"], cwd=ROOT, check=True, capture_output=True)
        device = json.loads((prep / "settings.json").read_text())["device"]
        for r in range(a.rounds):
            for tokens in a.max_tokens:
                run = like_prepared(prep, Path(tmp) / f"{tokens}_{r}")
                subprocess.run([*train, "--run-dir", str(run), "--max-steps", str(a.steps), "--max-tokens", str(tokens)],
                               cwd=ROOT, check=True, capture_output=True)
                ms[tokens].append(round(seconds_per_update(run, a.skip) * 1000, 1))
                print(f"round {r + 1}: --max-tokens {tokens}: {ms[tokens][-1]:.0f} ms per update", file=sys.stderr)
    first = a.max_tokens[0]
    per_token = {t: statistics.median(v) / t for t, v in ms.items()}
    rows = [{"max_tokens": t, "ms_per_update": v, "ms_per_1000_tokens": [round(x * 1000 / t, 1) for x in v],
             "cost_per_token_relative_to_first": round(per_token[t] / per_token[first], 3)} for t, v in ms.items()]
    out = {"benchmark": f"{a.preset}: ms per update by --max-tokens", "commit": commit(ROOT),
           "date": time.strftime("%Y-%m-%d"), "machine": environment(device), "flags": a.flags, "steps": a.steps,
           "skip": a.skip, "rows": rows}
    print(json.dumps(rows, indent=2))
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=2) + "\n")


def plot(rows: list[dict], figure: Path) -> None:
    """Validation NLL and BLEU against training minutes, one line per run."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    for r in rows:
        minutes = [c["seconds"] / 60 for c in r["curve"]]
        label = f"{r['name']} ({r['train_summary']['steps']} updates)"
        left.plot(minutes, [c["valid_nll"] for c in r["curve"]], marker="o", label=label)
        right.plot(minutes, [c["valid_bleu"] for c in r["curve"] if "valid_bleu" in c], marker="o", label=label)
        t = r["test2016"]
        right.axhline(t["bleu"], linestyle="--", color="grey")
        right.annotate(f"test2016 {t['bleu']:.1f} (all 1000, beam {t['beam']}, {t['checkpoint']})", (0.02, t["bleu"]),
                       xycoords=("axes fraction", "data"), textcoords="offset points", xytext=(0, -11), fontsize=8)
    left.set(xlabel="training minutes", ylabel="validation NLL per token", title="validation loss")
    right.set(xlabel="training minutes", ylabel="sacreBLEU", title="validation BLEU (first sentences, during training)")
    left.legend(fontsize=8)
    for ax in (left, right):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    figure.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(figure, dpi=110)
    print(f"figure: {figure}", file=sys.stderr)


def cmd_final(a) -> None:
    run, out = Path(a.run_dir), Path(a.out)
    settings = json.loads((run / "settings.json").read_text())
    row = {"name": a.name, "commit": commit(ROOT), "date": time.strftime("%Y-%m-%d"), "machine": environment("cpu"),
           "settings": settings, "train_summary": json.loads((run / "train_summary.json").read_text()),
           "curve": curve(run), "test2016": evaluate(run, a.data_dir, None, a.beam, a.alpha, a.average),
           "val": evaluate(run, a.data_dir, "val", a.beam, a.alpha, a.average)}
    data = json.loads(out.read_text()) if out.exists() else {"benchmark": "multi30k-cpu: 28 minutes on 2 CPU cores, "
                                                             "then sacreBLEU on test2016", "runs": []}
    data["runs"].append(row)
    out.write_text(json.dumps(data, indent=2) + "\n")
    print(f"test2016 sacreBLEU {row['test2016']['bleu']:.2f} cased, {row['test2016']['bleu_lowercase']:.2f} "
          f"lowercased ({row['test2016']['signature']})", file=sys.stderr)
    if a.figure:
        plot(data["runs"], Path(a.figure))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="train with the given flags, score val, append a row")
    r.add_argument("--name", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--work", default="runs/recipe", help="run directories go here")
    r.add_argument("--data-dir")
    r.add_argument("flags", nargs=argparse.REMAINDER, help="-- then train's flags")
    c = sub.add_parser("collect", help="score val for a trained run and append a row")
    c.add_argument("--name", required=True)
    c.add_argument("--run-dir", required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--data-dir")
    c.add_argument("--changes", nargs="*", help="the train flags the run changed")
    d = sub.add_parser("decode", help="beam x alpha x checkpoint averages on val for a trained run")
    d.add_argument("--run-dir", required=True)
    d.add_argument("--out", required=True)
    d.add_argument("--data-dir")
    d.add_argument("--beam", type=int, nargs="+", default=[4])
    d.add_argument("--alpha", type=float, nargs="+", default=[0.6])
    d.add_argument("--average", type=int, nargs="+", default=[1])
    s = sub.add_parser("speed", help="ms per update at several --max-tokens (steady state, sizes alternating)")
    s.add_argument("--max-tokens", type=int, nargs="+", default=[2500, 1250, 625])
    s.add_argument("--rounds", type=int, default=2)
    s.add_argument("--steps", type=int, default=30)
    s.add_argument("--skip", type=int, default=5)
    s.add_argument("--out")
    s.add_argument("--data-dir")
    s.add_argument("--preset", default="multi30k-cpu")
    s.add_argument("flags", nargs=argparse.REMAINDER, help="-- then further train flags (e.g. --tf32 true)")
    f = sub.add_parser("final", help="the chosen run on test2016, once; the README's figure")
    f.add_argument("--name", default="multi30k-cpu")
    f.add_argument("--run-dir", required=True)
    f.add_argument("--out", required=True)
    f.add_argument("--data-dir")
    f.add_argument("--beam", type=int, default=4)
    f.add_argument("--alpha", type=float, default=0.6)
    f.add_argument("--average", type=int, default=1)
    f.add_argument("--figure")
    a = p.parse_args(argv)
    if a.command in ("run", "speed"):
        a.flags = [x for x in a.flags if x != "--"]
    {"run": cmd_run, "collect": cmd_collect, "decode": cmd_decode, "speed": cmd_speed, "final": cmd_final}[a.command](a)


if __name__ == "__main__":
    main()
