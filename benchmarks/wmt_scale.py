"""The data pipeline at WMT14's size: time and peak memory of each stage, on a synthetic corpus.

For each --pairs size it writes a folder shaped like ``python -m transformer data wmt14``'s
(train/valid/test files and manifest.json) from the Multi30k files recombined to WMT14's
length distribution (see :func:`synthesise`), then runs, each in a fresh process so that its
peak resident memory is its own:

1. the first run: the real preparation of ``train --preset wmt14-base`` (read and filter with
   a reservoir sample, joint BPE of 37,000 trained on the sample, encoding on every core into
   the id cache), the token batches (25k tokens per update as the preset's 6250 x 4),
   the model, and two training updates of the wmt14-base model on the CPU;
2. the second run, the same from the cache, to the first update (and through it);
3. the command line itself: ``train --preset wmt14-base --data-dir <folder> --max-steps 2``.

    python benchmarks/wmt_scale.py --pairs 450000 4500000 --data-dir ../shared/data/multi30k \\
        --work /tmp/wmt_scale --out benchmarks/results/wmt_scale_<date>.json
"""
from __future__ import annotations

import argparse
import datetime
import gzip
import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

# WMT14 English-German's training text, approximately: English sentences of 24-25 words on
# average with a long tail (a log-normal, median 20 words), German about as long, a few pairs
# that the filter drops (over 250 words, or misaligned: a length ratio above 3).
MEDIAN_WORDS, SIGMA = 20.0, 0.65
RATIO_SIGMA = 0.15
MISALIGNED, OVERLONG = 0.01, 0.002
NAMES = 300_000     # a long tail of rare words (names, numbers) shared by both sides, Zipf-distributed
NAMED = 0.4         # share of pairs that carry one


def synthesise(folder: Path, pairs: int, multi30k: Path, seed: int = 0) -> dict:
    """Write train.{en,de} (``pairs`` lines), valid and test (Multi30k's val and test2016) and a manifest."""
    rng = np.random.default_rng(seed)
    en = _read(multi30k / "train.en.gz")
    de = _read(multi30k / "train.de.gz")
    en_words = [s.split() for s in en]
    de_words = [s.split() for s in de]
    names = _names(rng, NAMES)
    folder.mkdir(parents=True, exist_ok=True)
    target = np.maximum(1, np.round(rng.lognormal(np.log(MEDIAN_WORDS), SIGMA, pairs))).astype(int)
    target[rng.random(pairs) < OVERLONG] = 300
    ratio = rng.lognormal(0.0, RATIO_SIGMA, pairs)
    ratio[rng.random(pairs) < MISALIGNED] = 4.0
    picks = rng.integers(0, len(en), (pairs, 12))
    named = rng.random(pairs) < NAMED
    name_ids = np.minimum(rng.zipf(1.3, pairs), NAMES) - 1
    with open(folder / "train.en", "w", encoding="utf-8") as fe, open(folder / "train.de", "w", encoding="utf-8") as fd:
        for i in range(pairs):
            e, d, k = [], [], 0
            d_target = max(1, round(target[i] * ratio[i]))
            while len(e) < target[i] or len(d) < d_target:
                j = picks[i, k % 12] if k < 12 else rng.integers(0, len(en))
                e += en_words[j]
                d += de_words[j]
                k += 1
            e, d = e[:target[i]], d[:d_target]
            if named[i]:
                e.insert(len(e) // 2, names[name_ids[i]])
                d.insert(len(d) // 2, names[name_ids[i]])
            fe.write(" ".join(e) + "\n")
            fd.write(" ".join(d) + "\n")
    for split, name in (("valid", "val"), ("test", "test_2016_flickr")):
        for lang in ("en", "de"):
            (folder / f"{split}.{lang}").write_text("\n".join(_read(multi30k / f"{name}.{lang}.gz")) + "\n",
                                                   encoding="utf-8")
    from transformer.files import sha256_of  # noqa: PLC0415

    files = {}
    for split in ("train", "valid", "test"):
        for lang in ("en", "de"):
            path = folder / f"{split}.{lang}"
            with open(path, "rb") as f:
                lines = sum(1 for _ in f)
            files[path.name] = {"lines": lines, "bytes": path.stat().st_size, "sha256": sha256_of(path)}
    manifest = {"dataset": "wmt14", "synthetic": True, "languages": ["en", "de"], "files": files}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return manifest


def _read(path: Path) -> list:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def _names(rng, n: int) -> list:
    syllables = ["ka", "ro", "mi", "ten", "sa", "lu", "ber", "go", "vi", "an", "del", "tor", "mo", "ri", "zu", "wen"]
    parts = rng.integers(0, len(syllables), (n, 4))
    sizes = rng.integers(2, 5, n)
    return [("".join(syllables[p] for p in parts[i, :sizes[i]])).capitalize() + str(i % 97) for i in range(n)]


# the preset's 25k tokens per update cut as the results before the cut was planned per device
# (transformer/presets.py, plan_batches) were measured, so that figures stay comparable
FIXED_CUT = {"max_tokens": 6250, "update_freq": 4}


# ---------------------------------------------------------------------------- one run, in its own process
def one_run(folder: Path, run_dir: Path, updates: int) -> dict:
    """The preparation and set-up of ``train --preset wmt14-base --data-dir folder``, staged and
    timed, then ``updates`` updates; every stage's seconds and the peak resident memory after it."""
    from transformer import corpus  # noqa: PLC0415
    from transformer.batching import lengths, token_batches  # noqa: PLC0415
    from transformer.presets import PRESETS  # noqa: PLC0415
    from transformer.settings import DataSettings  # noqa: PLC0415
    from transformer.train import Trainer, TrainSettings  # noqa: PLC0415

    preset = PRESETS["wmt14-base"]
    data = DataSettings(dataset="wmt14", data_dir=str(folder), vocab_size=preset["settings"]["model"].vocab_size)
    start = time.perf_counter()
    stages, peaks = {}, {}
    run_dir.mkdir(parents=True, exist_ok=True)
    resident = {}
    tok, train, valid, _, _ = corpus.prepare(data, run_dir, timings=stages)
    peaks.update({name: None for name in stages})
    peaks[list(stages)[-1]] = _peak()
    resident[list(stages)[-1]] = _resident()

    def stage(name, fn):
        t = time.perf_counter()
        out = fn()
        stages[name] = time.perf_counter() - t
        peaks[name] = _peak()
        resident[name] = _resident()
        return out

    settings = TrainSettings(**{**preset["settings"], **FIXED_CUT, "device": "cpu", "run_dir": str(run_dir),
                                "progress": False})
    trainer = stage("model", lambda: Trainer(settings, tok, train, valid))
    batches = stage("token batches", lambda: token_batches(lengths(train.src), lengths(train.tgt),
                                                           settings.max_tokens, seed=settings.seed * 100_003))
    first_update_at = time.perf_counter() - start
    chunk = settings.update_freq
    losses = []

    def one_update(group):
        trainer.update(trainer.batches.mine(group))
        return trainer.read_loss()

    for u in range(updates):
        losses.append(stage(f"update {u + 1}", lambda u=u: one_update(batches[u * chunk:(u + 1) * chunk])))
    total = time.perf_counter() - start
    longest = np.maximum(train.src.lengths, train.tgt.lengths) + 1  # (TokenIds.lengths is computed on each read)
    tokens = [int(longest[b].sum()) for b in batches[:chunk]]
    return {"stages": {k: round(v, 2) for k, v in stages.items()},
            "peak_rss_after_stage_bytes": {k: v for k, v in peaks.items() if v is not None},
            "resident_after_stage_bytes": resident,
            "seconds_to_first_update": round(first_update_at, 2), "total_seconds": round(total, 2),
            "peak_rss_bytes": _peak(), "peak_rss_children_bytes": _peak(children=True),
            "losses": losses, "train_pairs": len(train), "train_tokens": int(len(train.src.flat) + len(train.tgt.flat)),
            "batches_per_epoch": len(batches), "padded_tokens_first_update": tokens, "vocab_size": tok.vocab_size}


def _resident() -> dict:
    """The process's resident memory now, in bytes: anonymous (arrays, Python objects) and
    file-backed (mapped files: libraries), from /proc/self/status."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("RssAnon", "RssFile"):
            fields[key] = int(value.split()[0]) * 1024
    return fields


def _peak(children: bool = False) -> int:
    """Peak resident memory so far in bytes (Linux reports kilobytes)."""
    who = resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF
    return resource.getrusage(who).ru_maxrss * 1024


def in_process(mode: str, *argv) -> dict:
    """Run this script in a fresh process (``--one``) and return its JSON."""
    out = subprocess.run([sys.executable, __file__, "--one", mode, *map(str, argv)], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{mode} failed:\n{out.stderr[-4000:]}")
    sys.stderr.write(out.stderr[-2000:])
    return json.loads(out.stdout.splitlines()[-1])


def cli_run(folder: Path, run_dir: Path) -> dict:
    """``python -m transformer train --preset wmt14-base --data-dir folder --max-steps 2`` on the CPU."""
    cmd = [sys.executable, "-m", "transformer", "train", "--preset", "wmt14-base", "--data-dir", str(folder),
           "--run-dir", str(run_dir), "--device", "cpu", "--max-steps", "2", "--no-progress",
           "--max-tokens", str(FIXED_CUT["max_tokens"]), "--update-freq", str(FIXED_CUT["update_freq"])]
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE.parent)
    if out.returncode:
        raise SystemExit(f"the command line failed:\n{out.stderr[-4000:]}")
    summary = json.loads(out.stdout[out.stdout.index("{"):])
    return {"command": " ".join(cmd[1:]), "seconds": round(time.perf_counter() - start, 1), "summary": summary,
            "stderr_tail": out.stderr.strip().splitlines()[-3:]}


# How each stage's work grows with the corpus: the passes over the text and the batching grow
# with it; the BPE model is trained on a sample of at most BPE_SAMPLE_PAIRS pairs, and the model
# and an update do not depend on the corpus at all.
GROWS_WITH_CORPUS = ("read and filter, BPE sample", "encode and cache", "token batches")


def projection(run: dict, factor: int = 10) -> dict:
    """The first run's stages at ``factor`` times the corpus: the growing stages times ``factor``
    (the measured growth from 450k to 4.5M pairs is close to linear), the others as measured."""
    stages = {k: round(v * factor if k in GROWS_WITH_CORPUS else v, 1) for k, v in run["stages"].items()}
    return {"pairs": run["pairs"] * factor, "stages": stages, "dominant": max(stages, key=stages.get),
            "total_seconds": round(sum(stages.values()), 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", type=int, nargs="+", default=[450_000, 4_500_000])
    p.add_argument("--data-dir", default=str(HERE.parent.parent / "shared" / "data" / "multi30k"))
    p.add_argument("--work", default="/tmp/wmt_scale", help="where the synthetic corpora and runs go")
    p.add_argument("--updates", type=int, default=2)
    p.add_argument("--no-cli", action="store_true", help="skip step 3, the command line")
    p.add_argument("--out")
    p.add_argument("--one", nargs="+", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.one:
        mode, folder, run_dir, updates = a.one
        print(json.dumps(one_run(Path(folder), Path(run_dir), int(updates))))
        return
    from harness import environment  # noqa: PLC0415

    work = Path(a.work)
    result = {"date": datetime.date.today().isoformat(), "machine": environment("cpu"),
              "command": "python benchmarks/wmt_scale.py " + " ".join(sys.argv[1:]), "runs": []}
    for pairs in a.pairs:
        folder, run_dir = work / f"corpus_{pairs}", work / f"run_{pairs}"
        t = time.perf_counter()
        manifest = synthesise(folder, pairs, Path(a.data_dir))
        made = round(time.perf_counter() - t, 1)
        print(f"{pairs:,} pairs synthesised in {made} s", file=sys.stderr, flush=True)
        shutil.rmtree(run_dir, ignore_errors=True)
        first = in_process("first", folder, run_dir, a.updates)
        print(f"first run: {json.dumps(first['stages'])}", file=sys.stderr, flush=True)
        second = in_process("second", folder, run_dir, a.updates)
        print(f"second run: {json.dumps(second['stages'])}", file=sys.stderr, flush=True)
        row = {"pairs": pairs, "total_seconds": first["total_seconds"], "peak_rss_bytes": first["peak_rss_bytes"],
               "stages": first["stages"], "synthesis_seconds_not_counted": made,
               "text_bytes": manifest["files"]["train.en"]["bytes"] + manifest["files"]["train.de"]["bytes"],
               "first_run": first, "second_run": second}
        if not a.no_cli:
            row["command_line"] = cli_run(folder, run_dir)
        result["runs"].append(row)
        if a.out:
            Path(a.out).write_text(json.dumps(result, indent=2) + "\n")
    result["projection_10x"] = projection(max(result["runs"], key=lambda r: r["pairs"]))
    if a.out:
        Path(a.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps([{k: r[k] for k in ("pairs", "total_seconds", "peak_rss_bytes", "stages")} for r in result["runs"]],
                     indent=2))
    p10 = result["projection_10x"]
    print(f"at {p10['pairs']:,} pairs: about {p10['total_seconds'] / 60:.0f} min, "
          f"the largest stage {p10['dominant']!r} ({p10['stages'][p10['dominant']] / 60:.0f} min)")


if __name__ == "__main__":
    main()
