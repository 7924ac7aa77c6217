"""The CPU benchmarks side by side in one sitting: the copy task over 3 seeds
(copy_task_vs_torch.py) and the Transformer-base training step (base_step_vs_torch.py),
minitensor against PyTorch, written with the machine's description to
benchmarks/results/cpu_<date>.json, then rewrites the table of docs/performance.md and the
README's summary from that file (--write JSON does only that).

With --checkout NAME=DIR (twice or more) it compares source trees instead: every run takes
its minitensor, transformer and benchmark scripts from one tree (PYTHONPATH; the scripts
beside this one where the tree has none), the trees alternate run by run
(A B A B ... for --repeats rounds, in each BLAS setting), and the result goes to
benchmarks/results/cpu_compare_<date>.json with a table of each tree's ratios against
PyTorch and of its own figures against the first tree's; the docs are left alone.

NumPy's OpenBLAS reads OPENBLAS_CORETYPE when it loads (see minitensor/blas.py), so each
BLAS setting is its own process: the environment as it is, and, where that forces an AVX2
core on an AVX-512 CPU, also without the variable (PyTorch's MKL does not read it).

    cd benchmarks && ../.venv-torch/bin/python cpu_session.py            # ~15 minutes on 2 cores
    python benchmarks/cpu_session.py --write benchmarks/results/cpu_2026-11-23.json
    git worktree add /tmp/before <commit>
    ../.venv-torch/bin/python cpu_session.py --checkout before=/tmp/before --checkout after=.. --repeats 2
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
README = HERE.parent / "README.md"
PERFORMANCE = HERE.parent / "docs" / "performance.md"
BEGIN, END = "<!-- cpu-benchmarks:begin -->", "<!-- cpu-benchmarks:end -->"


def next_results_file(date: str, stem: str = "cpu") -> Path:
    """results/<stem>_<date>.json, or <stem>_<date>_2.json, _3, ... when the day already has some."""
    first = HERE / "results" / f"{stem}_{date}.json"
    n = 1
    path = first
    while path.exists():
        n += 1
        path = first.with_name(f"{stem}_{date}_{n}.json")
    return path


def newest_session_file(folder: Path = HERE / "results") -> Path | None:
    """The newest single-tree session, results/cpu_<date>[_n].json (not a cpu_compare_ file),
    ordered by date and then by n (so _10 comes after _9)."""
    def order(path: Path):
        date, _, n = path.stem.removeprefix("cpu_").partition("_")
        return date, int(n or 1)
    files = sorted(folder.glob("cpu_[0-9]*.json"), key=order)
    return files[-1] if files else None


def machine() -> dict:
    """harness.environment("cpu") and the commit measured."""
    from harness import commit, environment  # noqa: PLC0415 (beside this script; the README test imports only table)

    return {**environment("cpu"), "commit": commit(HERE)}


def run_script(script: str, args: list, env: dict, tree: Path | None = None) -> dict:
    """Run one benchmark script in its own process; its JSON (--out). With ``tree``, the script
    of that tree's benchmarks/ where it has one, so that a script always meets the API it was
    written for."""
    where = tree / "benchmarks" if tree is not None and (tree / "benchmarks" / script).exists() else HERE
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        subprocess.run([sys.executable, script, *args, "--out", str(out)], cwd=where, env=env, check=True,
                       stdout=sys.stderr)
        return json.loads(out.read_text())


def blas_settings() -> dict:
    """{name: environment}: as it is, plus one without OPENBLAS_CORETYPE (and OPENBLAS_L2_SIZE)
    where that holds OpenBLAS back."""
    from minitensor import blas  # noqa: PLC0415

    envs = {"as is": dict(os.environ)}
    if blas.advice():
        envs["OPENBLAS_CORETYPE unset"] = {k: v for k, v in os.environ.items()
                                           if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    return envs


def measure(seeds: list, base_steps: int, env: dict, torch: bool = True, tree: Path | None = None) -> dict:
    """One copy-task run over ``seeds`` and one base-step run, each its own process (without
    PyTorch's side when ``torch`` is False; with ``tree``'s own scripts, see run_script)."""
    alone = [] if torch else ["--no-torch"]
    copy = run_script("copy_task_vs_torch.py", ["--seeds", *map(str, seeds), *alone], env, tree)
    base = run_script("base_step_vs_torch.py", ["--steps", str(base_steps), *alone], env, tree)
    return {"blas": base["environment"]["blas"], "copy_task": copy, "base_step": base}


FIGURES = {  # name: (where in one measure() result, True when larger is better for minitensor)
    "copy ms per update": (lambda r: r["copy_task"]["minitensor_ms_per_update"], False),
    "copy CPU ms per update": (lambda r: _cpu_ms_per_update(r["copy_task"]), False),
    "copy ratio ms per update": (lambda r: r["copy_task"].get("ratio_ms_per_update"), False),
    "copy ratio time to 99%": (lambda r: r["copy_task"].get("ratio_median_seconds"), False),
    "base tokens/s": (lambda r: r["base_step"]["results"]["fp32"]["minitensor"]["target_tokens_per_s"], True),
    "base ratio tokens/s": (lambda r: r["base_step"]["results"]["fp32"].get(
        "ratio_tokens_per_s_minitensor_over_torch"), True),
}


def _cpu_ms_per_update(copy: dict) -> float | None:
    """minitensor's processor milliseconds per copy-task update (all threads; where recorded)."""
    rows = [r["minitensor"] for r in copy["rows"]]
    if not all("cpu_seconds" in r for r in rows):
        return None
    return 1000 * sum(r["cpu_seconds"] for r in rows) / sum(r["steps"] for r in rows)


def compare(trees: dict, seeds: list, base_steps: int, repeats: int, torch: bool = True) -> dict:
    """The trees measured in turn (A B A B ...) in each BLAS setting; every run as measure() gives it."""
    runs = {}
    for setting, env in blas_settings().items():
        runs[setting] = {name: [] for name in trees}
        for r in range(repeats):
            for name, tree in trees.items():
                print(f"== BLAS {setting}, round {r + 1}/{repeats}: {name} ({tree})", file=sys.stderr, flush=True)
                runs[setting][name].append(measure(seeds, base_steps, {**env, "PYTHONPATH": str(tree)}, torch, tree))
    return runs


def comparison_table(result: dict) -> str:
    """Medians over the rounds of each figure, per BLAS setting and tree; each tree's figure over
    the first tree's in brackets (above 1: more of that figure)."""
    rows = []
    for setting, by_tree in result["runs"].items():
        first = next(iter(by_tree))
        commits = ", ".join(f"{n}: {result['trees'][n]['commit']}" for n in by_tree)
        rows += [f"\n{setting} ({commits})\n",
                 "| figure | better | " + " | ".join(by_tree) + " |", "|---|---|" + "---|" * len(by_tree)]
        for figure, (get, larger) in FIGURES.items():
            med = {n: statistics.median(v) if (v := [x for x in map(get, rs) if x is not None]) else None
                   for n, rs in by_tree.items()}
            cells = [("–" if m is None else f"{m:.4g}" if n == first or med[first] is None
                      else f"{m:.4g} ({m / med[first]:.3f})") for n, m in med.items()]
            rows.append(f"| {figure} | {'higher' if larger else 'lower'} | " + " | ".join(cells) + " |")
    return "\n".join(rows).lstrip("\n")


def rounds(base: dict) -> str:
    """" (0.98-1.51)": the spread of the base step's per-round ratios, where the JSON has them."""
    r = base.get("ratio_per_round")
    return f" ({r['min']}-{r['max']})" if r else ""


def ceiling(base: dict) -> str:
    """The base step's largest tokens/s ratio the matrix products allow, with the floor's ms
    (base_step_vs_torch.products_floor), where the JSON has it."""
    f = base.get("products_floor") or {}
    if "largest_ratio_tokens_per_s" not in f:
        return "–"
    r = f["largest_ratio_per_round"]
    return (f"{f['largest_ratio_tokens_per_s']} ({r['min']}-{r['max']}; {f['ms_per_step']} ms at "
            f"{f['gflop_per_s_best']} GFLOP/s)")


def share(base: dict) -> str:
    """The matrix products' share of minitensor's base step (the floor over the step, round by
    round: base_step_vs_torch.products_floor), where the JSON has it."""
    f = base.get("products_floor") or {}
    if "share_of_minitensor_step" not in f:
        return "–"
    r = f["share_per_round"]
    return f"{f['share_of_minitensor_step']:.0%} ({r['min']:.0%}-{r['max']:.0%})"


def table(result: dict) -> str:
    """docs/performance.md's table (Markdown) from one session's JSON."""
    m = result["machine"]
    rows = ["| BLAS kernels | copy task: median s to 99% (seeds 0-2) | ms per update | "
            "base step: target tokens/s | ratio time to 99% | ratio ms per update | ratio tokens/s (base) | "
            "largest base ratio the products allow | products' share of the base step |",
            "|---|---|---|---|---|---|---|---|---|"]
    for name, r in result["runs"].items():
        c, b = r["copy_task"], r["base_step"]["results"]["fp32"]
        torch_c = f" vs {c['torch_median_seconds']}" if "torch_median_seconds" in c else ""
        torch_u = f" vs {c['torch_ms_per_update']}" if "torch_ms_per_update" in c else ""
        torch_b = f" vs {b['torch']['target_tokens_per_s']}" if isinstance(b.get("torch"), dict) else ""
        rows.append(f"| {r['blas']['core']} ({name}) | {c['minitensor_median_seconds']}{torch_c} | "
                    f"{c['minitensor_ms_per_update']}{torch_u} | {b['minitensor']['target_tokens_per_s']}{torch_b} | "
                    f"{c.get('ratio_median_seconds', '–')} | {c.get('ratio_ms_per_update', '–')} | "
                    f"{b.get('ratio_tokens_per_s_minitensor_over_torch', '–')}{rounds(b)} | {ceiling(b)} | "
                    f"{share(b)} |")
    head = (f"Measured on {result['date']} by `benchmarks/cpu_session.py` (`{result['file']}`): {m['cpu']}, "
            f"{m['cores']} cores, {m['memory_gib']} GiB; NumPy {m['numpy']}, PyTorch {m.get('torch')} "
            f"({m.get('torch_threads')} threads); commit {m.get('commit')}. Each cell is minitensor vs "
            "PyTorch; a time ratio below 1 and a tokens/s ratio above 1 favour minitensor. Both start the copy "
            "task from the same weights, but their trajectories part after ~20 updates and the updates needed "
            "vary from 250 to 550 for either, so the time to 99% carries that luck; ms per update "
            "(evaluation included) does not. The base step alternates the two frameworks step by step; the "
            "range after its ratio is that of the per-round ratios. The last column divides PyTorch's step by "
            "the least time the step's matrix products take at the fastest rate NumPy's BLAS reached in the "
            "same round (its median, the rounds' range, the floor and the rate): no speed-up of anything else "
            "could take the ratio past it. The products' share divides that floor by minitensor's own step of "
            "the same round: the rest of the step is everything else.")
    return head + "\n\n" + "\n".join(rows)


def summary(result: dict) -> str:
    """The README's lines: the latest ratios against PyTorch, and where the rest is."""
    m = result["machine"]
    ratios = {}
    for r in result["runs"].values():
        c, b = r["copy_task"], r["base_step"]["results"]["fp32"]
        forced = r["blas"].get("forced_core")
        setting = f"OPENBLAS_CORETYPE={forced}" if forced else f"the {r['blas'].get('core')} kernels OpenBLAS chose"
        ratios[setting] = (c.get("ratio_median_seconds"), c.get("ratio_ms_per_update"),
                           b.get("ratio_tokens_per_s_minitensor_over_torch"))
    best = next((s for s in ratios if not s.startswith("OPENBLAS_CORETYPE=")), next(iter(ratios)))
    t, u, k = ratios[best]
    text = (f"On {m['cores']} cores of an {m['cpu']} ({result['date']}), against PyTorch {m.get('torch')}: the copy "
            f"task reaches 99% in {t}× PyTorch's time at {u}× its time per update, and a Transformer-base "
            f"training step processes {k}× its tokens per second ({best}")
    others = [f"{t2}×, {u2}× and {k2}× with {s}" for s, (t2, u2, k2) in ratios.items() if s != best]
    text += ("; " + "; ".join(others) if others else "") + "). "
    return text + "Method, tables and history: [docs/performance.md](docs/performance.md)."


def fill(path: Path, block: str) -> None:
    """Replace what lies between BEGIN and END in ``path`` by ``block``."""
    text = path.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{path} has no {BEGIN} ... {END} block to fill")
    before, rest = text.split(BEGIN, 1)
    after = rest.split(END, 1)[1]
    path.write_text(f"{before}{BEGIN}\n{block}\n{END}{after}")


def write_docs(result: dict) -> None:
    fill(PERFORMANCE, table(result))
    fill(README, summary(result))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--base-steps", type=int, default=9)
    p.add_argument("--out", help="default: benchmarks/results/cpu_<today>.json, or cpu_<today>_<n>.json for the "
                                 "n-th session of a day (names sort in time order: the docs show the last)")
    p.add_argument("--write", metavar="JSON", help="only rewrite docs/performance.md's table and the README's "
                                                   "summary from this file")
    p.add_argument("--checkout", action="append", metavar="NAME=DIR",
                   help="compare source trees (e.g. git worktrees of two commits), alternating run by run; "
                        "give it twice or more")
    p.add_argument("--repeats", type=int, default=2, help="with --checkout: rounds of A B ... per BLAS setting")
    p.add_argument("--no-torch", action="store_true",
                   help="with --checkout: minitensor only (the trees against each other; faster, so more rounds fit)")
    a = p.parse_args()
    sys.path.insert(0, str(HERE.parent))  # this checkout's minitensor, whichever environment runs the script
    if a.write:
        write_docs(json.loads(Path(a.write).read_text()))
        return
    date = datetime.date.today().isoformat()
    if a.checkout:
        from harness import commit  # noqa: PLC0415 (beside this script)

        if len(a.checkout) < 2 or any("=" not in c for c in a.checkout):
            p.error("--checkout NAME=DIR, at least twice")
        trees = {name: Path(tree).resolve() for name, tree in (c.split("=", 1) for c in a.checkout)}
        out = Path(a.out).resolve() if a.out else next_results_file(date, "cpu_compare")
        result = {"date": date, "file": str(out.relative_to(HERE.parent)) if out.is_relative_to(HERE.parent)
                  else str(out), "machine": machine(), "seeds": a.seeds, "base_steps": a.base_steps,
                  "trees": {n: {"dir": str(t), "commit": commit(t)} for n, t in trees.items()}}
        result["runs"] = compare(trees, a.seeds, a.base_steps, a.repeats, torch=not a.no_torch)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")
        print(comparison_table(result))
        return
    out = Path(a.out).resolve() if a.out else next_results_file(date)
    result = {"date": date, "file": str(out.relative_to(HERE.parent)) if out.is_relative_to(HERE.parent) else str(out),
              "machine": machine(), "runs": {}}
    for name, env in blas_settings().items():
        print(f"== BLAS: {name}", file=sys.stderr, flush=True)
        result["runs"][name] = measure(a.seeds, a.base_steps, env)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))
    write_docs(result)


if __name__ == "__main__":
    main()
