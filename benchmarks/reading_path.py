"""The reader's path from ``python -m transformer train`` to the first update: the calls that
cross from one file to another before ``Trainer.update`` first runs, as a reader following the
code would take them.

It runs ``train`` in this process on a small Multi30k run (500 pairs, a tiny model, one update)
with a profile hook, and keeps each call whose caller is a file of ``transformer/`` (the
application a reader follows; the engine's calls among its own files are the engine's business)
and whose callee is a function of ``transformer/`` or ``minitensor/`` in another file than the
caller's. A function counts once, when it is first opened (a reader reads it once, however often
it runs), and the protocol methods a reader does not open (``__setattr__``, ``__getitem__``, ...;
``__init__`` stays) not at all. It prints the hops in order, the files they
touch and how many go back into a file already visited; then the same for the road alone: the
calls made by the functions on the stack when the first update starts (``cli.main``,
``cmd_train``, ``Trainer.fit``, ...), the path of a reader who follows the command to the update
and glances into each call on the way without reading further down.

    python benchmarks/reading_path.py --data-dir ../shared/data/multi30k
    PYTHONPATH=/tmp/old python benchmarks/reading_path.py --root /tmp/old ...   # another checkout
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def trace(root: Path, argv: list[str]) -> tuple[list[tuple[str, str, str, str]], set[tuple[str, str]]]:
    """(caller's file, caller, callee's file, callee) of each function opened in another file, in
    the order first called, until the first ``Trainer.update``; and the road to that update (the
    (file, function) of each call on the stack when it starts)."""
    sys.path.insert(0, str(root))
    from transformer import cli  # noqa: PLC0415

    app, packages = root / "transformer", (root / "transformer", root / "minitensor")
    hops, seen, done, road = [], set(), False, set()

    def where(code) -> Path | None:
        path = Path(code.co_filename)
        return path if any(p in path.parents for p in packages) else None

    def hook(frame, event, _arg):
        nonlocal done
        if done or event != "call" or frame.f_back is None or frame.f_code.co_name == "<module>":
            return
        name = frame.f_code.co_name
        if name.startswith("__") and name.endswith("__") and name != "__init__":
            return
        callee, caller = where(frame.f_code), where(frame.f_back.f_code)
        if callee == app / "train.py" and frame.f_code.co_name == "update":
            done, up = True, frame.f_back
            while up is not None:  # the road: the calls that lead from the command to the update
                if (place := where(up.f_code)) is not None:
                    road.add((str(place.relative_to(root)), up.f_code.co_qualname))
                up = up.f_back
            return
        if callee is None or caller is None or app not in caller.parents or callee == caller:
            return
        opened = (str(callee.relative_to(root)), frame.f_code.co_qualname)
        if opened not in seen:
            seen.add(opened)
            hops.append((str(caller.relative_to(root)), frame.f_back.f_code.co_qualname, *opened))

    sys.setprofile(hook)
    try:
        cli.run(argv)
    finally:
        sys.setprofile(None)
    if not done:
        raise SystemExit("the run made no update")
    return hops, road


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", default=str(HERE.parent), help="the checkout to read (default: this one)")
    p.add_argument("--data-dir", default=str(HERE.parent.parent / "shared" / "data" / "multi30k"))
    p.add_argument("--out", help="also write the JSON here")
    a = p.parse_args()
    root = Path(a.root).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["train", "--run-dir", str(Path(tmp) / "run"), "--data-dir", a.data_dir, "--limit", "500",
                "--vocab-size", "300", "--d-model", "32", "--n-heads", "2", "--d-ff", "64", "--max-steps", "1",
                "--eval-every", "1000", "--bleu-sentences", "0", "--no-progress"]
        hops, road = trace(root, argv)
    out = {"root": str(root), "argv": argv, "road": sorted(road)}
    for name, chosen in (("every function the application opens", hops),
                         ("the functions that the road's own functions call", [h for h in hops if h[:2] in road])):
        visited, back = set(), 0
        print(f"== {name}")
        for i, (src, fn, dst, callee) in enumerate(chosen, 1):
            print(f"{i:3d}  {src}:{fn} -> {dst}:{callee}{'   (back)' if dst in visited else ''}")
            back += dst in visited
            visited |= {src, dst}
        print(f"{len(chosen)} hops over {len(visited)} files before the first update, {back} of them back into a "
              "file already visited")
        out[name] = {"hops": chosen, "files": sorted(visited), "back": back}
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
