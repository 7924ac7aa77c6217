"""Two fuzzers of the command line, driven by hypothesis, that look for the next hostile case
before a user meets it.

1. **Flags.** Each verb's flags are drawn from the kinds they are declared with
   (:mod:`transformer.flags`): values in range, and values out of range, non-finite, huge and
   malformed. Every run either succeeds, or ends with one ``error:`` line and exit status 2
   (never a traceback, never status 1) and writes nothing.
2. **Damaged run directories.** Checkpoints truncated, altered, renamed, missing, replaced by
   other files, or another run's (of another vocabulary, or of the same vocabulary and model); the metrics log, the lock, ``settings.json``, ``data.json``, the
   BPE model and the id cache damaged or missing. ``train --resume``, ``translate``,
   ``evaluate`` and ``average`` either work or name the problem in one ``error:`` line with
   status 2, and lose nothing: every checkpoint that was there is still there, byte for byte,
   and a resumed run's log holds each update once.

The commands run in this process (:func:`transformer.cli.run`): a refusal takes milliseconds,
so many cases fit in CI. ``--fuzz-examples N`` searches longer::

    pytest tests/transformer/test_cli_fuzz.py --fuzz-examples 2000
"""
import argparse
import contextlib
import io
import json
import os
import shutil
import socket
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from transformer import cli, wmt14
from transformer.flags import Boolean, Choice, Kind, Real, Whole

from ..helpers import MULTI30K, SMALL, needs_multi30k
from .test_wmt14_data import small_archives

pytestmark = [needs_multi30k, pytest.mark.slow]

# examples per test in CI (each verb of the flag fuzzer is a test; so is the damage fuzzer)
CI_EXAMPLES = {"data": 15, "train": 40, "translate": 30, "evaluate": 20, "average": 20, "damage": 60}


def budget(request, name: str) -> int:
    return request.config.getoption("--fuzz-examples") or CI_EXAMPLES[name]


def fuzz_settings(n: int):
    return settings(max_examples=n, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                           HealthCheck.data_too_large])


# ---------------------------------------------------------------------------- running a command
def run(argv: list, stdin: str = "A dog runs.\n") -> tuple[int, str, str]:
    """``python -m transformer ARGV`` in this process: (status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode()), encoding="utf-8")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = cli.run([str(a) for a in argv])
    finally:
        sys.stdin = saved
    return status, out.getvalue(), err.getvalue()


def snapshot(folder: Path) -> dict:
    """Every file under ``folder`` with its bytes."""
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def assert_clean(argv, status, err):
    """Success, or exactly one ``error:`` line and status 2; never a traceback or status 1."""
    assert "Traceback" not in err, (argv, err)
    assert status in (0, 2), (status, argv, err)
    if status == 2:
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, (argv, err)


PREPARED = ("spm.model", "spm.vocab", "cache")  # what a start keeps for the next one, and says so


def assert_wrote_nothing(before: dict, after: dict, err: str, argv):
    """A refusal leaves every file as it was. The one exception is a new run's prepared data
    (BPE model, id cache) when the refusal came after preparing it: kept for the next start,
    with a note that says so."""
    new = {k for k in after.keys() - before.keys()}
    prepared = {k for k in new if any(part in PREPARED for part in k.parts)}
    if prepared:
        assert "are kept: the next train there reuses them" in err, (argv, err)
    assert new - prepared == set(), (argv, sorted(map(str, new - prepared)), err)
    changed = [k for k in before if k.name != ".lock" and after.get(k) != before[k]]
    assert changed == [], (argv, sorted(map(str, changed)), err)


# ---------------------------------------------------------------------------- 1. flags
def verbs() -> dict:
    parser = cli.build_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def declared(parser) -> tuple[dict, list]:
    """({flag: kind} of the flags that take a value, [switches])."""
    values = {a.option_strings[0]: a.type for a in parser._actions if a.option_strings and isinstance(a.type, Kind)}
    switches = [a.option_strings[0] for a in parser._actions if a.option_strings and a.nargs == 0
                and a.option_strings[0] != "-h"]
    return values, switches


def test_every_value_flag_of_every_verb_declares_its_kind():
    """The fuzzer reads the kinds: a flag taking a value without one would escape it."""
    for name, parser in verbs().items():
        loose = [a.option_strings[0] for a in parser._actions
                 if a.option_strings and a.nargs is None and not isinstance(a.type, Kind)]
        assert loose == [], (name, loose)


def out_of_kind(kind) -> list[str]:
    """Values a kind must refuse: out of range, non-finite, huge, malformed."""
    malformed = ["", " ", "abc", "1,5", "0x10", "١٢"]
    if isinstance(kind, Whole):
        high = kind.high if kind.high is not None else 10**40
        return [*malformed, str(kind.low - 1), str(high + 1), "9" * 400, "1e3", "2.5", "nan", "inf", "-0"]
    if isinstance(kind, Real):
        out = [*malformed, "nan", "-nan", "inf", "-inf", "1e309", "1e-400x"]
        if kind.low is not None:
            out += [repr(kind.low) if kind.low_open else repr(kind.low - 1.5)]
        if kind.high is not None:
            out += [repr(kind.high * 10 + 1)]
        return out
    if isinstance(kind, Boolean):
        return [*malformed, "yes", "no", "1", "0", "2", "maybe", "t"]
    if isinstance(kind, Choice):
        return [*malformed, "bogus", str(kind.names[0]).upper()]
    return [""]  # Text: an empty name


# values in range that keep a run short (the fuzzer is not a benchmark): budgets, sizes, beams
QUICK = {"--max-steps": ["1", "2"], "--max-epochs": ["1", "3"], "--max-minutes": ["0", "0.001", "10000000"],
         "--d-model": ["1", "8", "32", "65536"], "--n-heads": ["1", "2", "3", "1024"], "--d-ff": ["1", "64", "262144"],
         "--layers": ["1", "2"], "--bleu-sentences": ["0", "2"], "--beam-size": ["1", "2"], "--profile": ["0", "1"],
         "--limit": ["1", "5", "300"], "--vocab-size": ["5", "60", "250", "100000"], "--beam": ["1", "2", "9"],
         "--beam-max": ["1", "4", "10000"], "--average": ["1", "2", "3", "100"], "--last": ["1", "3", "100"],
         "--max-pieces": ["1", "4", "1000"], "--memory-gib": ["1e-12", "0.001", "2", "1048576"],
         "--max-tokens": ["1", "20", "800", "2147483647"], "--update-freq": ["1", "2", "1000000"],
         "--eval-every": ["1", "1000"], "--save-every": ["1", "1000"], "--timeout": ["0.001", "5"],
         "--retries": ["0", "1"]}


def in_kind(kind) -> list[str]:
    """Values a kind takes, spread over its range."""
    if isinstance(kind, Whole):
        return [str(kind.low), str(kind.low + 1), *([str(kind.high)] if kind.high is not None else [])]
    if isinstance(kind, Real):
        low = (kind.low if kind.low is not None else 0.0) + (1e-9 if kind.low_open else 0.0)
        high = kind.high if kind.high is not None else 1e6
        return [repr(low), repr((low + high) / 2), repr(high - (1e-9 if kind.high_open else 0.0))]
    if isinstance(kind, Boolean):
        return ["true", "false", "TRUE"]
    if isinstance(kind, Choice):
        return [str(n) for n in kind.names]
    return []


def names_for(flag: str, ws: Path) -> list[str]:
    """Candidates for a flag that names something: the real thing, and things that are not."""
    common = [str(ws / "missing"), str(ws / "adir"), str(ws / "text.txt")]
    return {"--run-dir": [str(ws / "new"), str(ws / "run"), *common],
            "--data-dir": [str(MULTI30K), *common],
            "--input": [str(ws / "text.txt"), os.devnull, *common],
            "--output": [str(ws / "out.txt"), str(ws / "adir" / "out.npz"), str(ws / "run" / "checkpoint_6.npz"),
                         str(ws / "run" / "checkpoint_99.npz"), str(ws / "missing" / "x"), *common],
            "--checkpoint": [str(ws / "run" / "checkpoint_4.npz"), str(ws / "plain.npz"), str(ws / "run" / "spm.model"),
                             *common],
            "--src": [str(ws / "text.txt"), *common], "--ref": [str(ws / "ref.txt"), *common],
            "--train-src": [str(ws / "text.txt"), *common], "--train-tgt": [str(ws / "ref.txt"), *common],
            "--valid-src": [str(ws / "text.txt")], "--valid-tgt": [str(ws / "ref.txt")],
            "--test-src": [str(ws / "text.txt")], "--test-tgt": [str(ws / "ref.txt")],
            "--out": [str(ws / "wmt"), str(ws / "text.txt"), str(ws / "adir")],
            "--from": [str(ws / "archives"), *common],
            "--device": ["cpu", "cuda", "cuda:1", "tpu", "CPU"],
            "--src-lang": ["en", "de", "fr", "xx", "../en"], "--tgt-lang": ["de", "en", "xx"],
            "--split": ["val", "test_2016_flickr", "test", "bogus", "../train"],
            "--url-base": ["http://127.0.0.1:9/mirror"]}.get(flag, common)


def base_argv(verb: str, ws: Path) -> list:
    """What each verb is given before the drawn flags (which, coming later, override it)."""
    data = ["--data-dir", MULTI30K]
    return {"data": ["data", "wmt14", "--out", ws / "wmt", "--from", ws / "archives", "--no-progress"],
            "train": ["train", "--run-dir", ws / "new", *SMALL, "--max-steps", "2", "--save-every", "1"],
            "translate": ["translate", "--run-dir", ws / "run", "--input", ws / "text.txt", "--beam", "1", "--no-progress"],
            "evaluate": ["evaluate", "--run-dir", ws / "run", *data, "--limit", "2", "--beam", "1"],
            "average": ["average", "--run-dir", ws / "run"]}[verb]


@pytest.fixture(scope="module")
def archives_bytes():
    return small_archives()


def workspace(root: Path, small_run: Path, archives: dict) -> Path:
    """A fresh folder: a trained run, two text files, an empty folder, a plain .npz, the WMT archives."""
    ws = root / "ws"
    shutil.rmtree(ws, ignore_errors=True)
    ws.mkdir()
    shutil.copytree(small_run, ws / "run")
    (ws / "text.txt").write_text("A dog runs in the park.\nTwo cats sleep.\n")
    (ws / "ref.txt").write_text("Ein Hund rennt im Park.\nZwei Katzen schlafen.\n")
    (ws / "adir").mkdir()
    np.savez(ws / "plain.npz", x=np.arange(3))
    (ws / "archives").mkdir()
    for name, data in archives.items():
        (ws / "archives" / name).write_bytes(data)
    return ws


@pytest.mark.parametrize("verb", sorted(CI_EXAMPLES.keys() - {"damage"}))
def test_any_flag_values_are_taken_or_refused_in_one_line_writing_nothing(verb, small_run, archives_bytes, tmp_path,
                                                                         request, monkeypatch):
    parser = verbs()[verb]
    values, switches = declared(parser)
    flags = sorted(values) + switches
    monkeypatch.setattr(wmt14, "ARCHIVES", {n: wmt14.Archive(f"http://127.0.0.1:9/{n}", len(d), _sha(d))
                                            for n, d in archives_bytes.items()})
    found = []

    @fuzz_settings(budget(request, verb))
    @given(st.data())
    def check(data):
        ws = workspace(tmp_path, small_run, archives_bytes)
        chosen = data.draw(st.lists(st.sampled_from(flags), max_size=4, unique=True), label="flags")
        argv = base_argv(verb, ws)
        for flag in chosen:
            if flag in switches:
                argv.append(flag)
                continue
            kind = values[flag]
            good = QUICK.get(flag) or in_kind(kind) or names_for(flag, ws)
            bad = out_of_kind(kind)
            value = data.draw(st.one_of(st.sampled_from(good), st.sampled_from(bad)), label=flag)
            argv.append(f"{flag}={value}")
        before = snapshot(ws)
        status, _, err = run(argv)
        event(f"exit status {status}")
        try:
            assert_clean(argv, status, err)
            if status == 2:
                assert_wrote_nothing(before, snapshot(ws), err, argv)
        except AssertionError:
            found.append(argv)
            raise

    check()


def _sha(data: bytes) -> str:
    import hashlib  # noqa: PLC0415

    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------- 2. damaged run directories
def _checkpoint(ws: Path, draw) -> Path:
    return ws / "run" / f"checkpoint_{draw(st.sampled_from([2, 4, 6]))}.npz"


def damage_checkpoint(ws: Path, draw, other: dict) -> str:
    path = _checkpoint(ws, draw)
    how = draw(st.sampled_from(["truncate", "flip", "rename", "delete", "foreign", "sibling", "plain", "average",
                                "meta", "directory", "empty"]))
    if not path.is_file() or path.stat().st_size < 2:
        return f"{how} {path.name}: already gone"
    data = path.read_bytes()
    if how == "truncate":
        path.write_bytes(data[:draw(st.integers(0, len(data) - 1))])
    elif how == "flip":
        i = draw(st.integers(0, len(data) - 1))
        path.write_bytes(data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:])
    elif how == "rename":
        path.rename(path.with_name(f"checkpoint_{draw(st.sampled_from([0, 1, 3, 5, 7, 20, 10**6]))}.npz"))
    elif how == "delete":
        path.unlink()
    elif how in ("foreign", "sibling"):  # another vocabulary's; the same vocabulary's and model's, another run's
        shutil.copy(other[how] / "checkpoint_4.npz", path)
    elif how == "plain":
        np.savez(path, x=np.arange(4))
    elif how == "average":  # an average of the run's last two checkpoints, saved under a training name
        status, _, err = run(["average", "--run-dir", other["foreign"], "--last", "2", "--output", ws / "average.npz"])
        assert status == 0, err
        shutil.copy(ws / "average.npz", path)
    elif how == "meta":  # arrays intact (the hash holds), metadata altered
        with np.load(path) as z:
            arrays = {k: z[k] for k in z.files}
        meta = json.loads(str(arrays["meta"]))
        key = draw(st.sampled_from(sorted(meta)))
        meta[key] = draw(st.sampled_from([None, -1, "x", [], {}]))
        arrays["meta"] = np.array(json.dumps(meta))
        with open(path, "wb") as f:
            np.savez(f, **arrays)
        how = f"meta[{key}]={meta[key]!r}"
    elif how == "directory":
        path.unlink()
        path.mkdir()
    elif how == "empty":
        path.write_bytes(b"")
    return f"{how} {path.name}"


def damage_file(ws: Path, draw, other: dict) -> str:
    name = draw(st.sampled_from(["metrics.jsonl", ".lock", "settings.json", "data.json", "spm.model",
                                 "cache/train/key.json", "cache/train/src.ids", "train_summary.json"]))
    path = ws / "run" / name
    contents = {
        "metrics.jsonl": [None, b"", b"garbage\n", b"[1, 2]\n", b'{"step": "x"}\n', "cut", "middle"],
        ".lock": [b"", b"garbage", b"[1, 2]", b"null", json.dumps({"pid": 1, "host": "elsewhere.example"}).encode(),
                  json.dumps({"pid": os.getpid(), "host": socket.gethostname()}).encode(), "directory"],
        "settings.json": [None, b"", b"{", b"[]"],
        "data.json": [None, b"", b"{", b"[]", json.dumps({"data_dir": str(ws / "missing")}).encode(),
                      json.dumps({"data_dir": str(ws / "text.txt")}).encode(), json.dumps({"data_dir": 5}).encode(),
                      json.dumps({"files": {"train_src": str(ws / "missing")}}).encode(),
                      json.dumps({"files": {"train_src": 5, "valid_src": []}}).encode(), b'{"files": []}'],
        "spm.model": [None, b"", b"not a sentencepiece model", "foreign"],
        "cache/train/key.json": [None, b"", b"{", b"[]", b'{"key": 5}'],
        "cache/train/src.ids": [None, b"", b"\x00\x01"],
        "train_summary.json": [None, b"{"],
    }[name]
    what = draw(st.sampled_from(contents))
    if what is None:
        if path.is_file():
            path.unlink()
        return f"delete {name}"
    if what == "directory":
        path.mkdir(exist_ok=True)
    elif what == "foreign":
        shutil.copy(other["foreign"] / "spm.model", path)
    elif what == "cut":  # an append cut off by a crash
        path.write_bytes(path.read_bytes() + b'{"step": 7, "lo')
    elif what == "middle":
        lines = path.read_bytes().splitlines(keepends=True)
        path.write_bytes(b"".join(lines[:2] + [b"\x00garbage\n"] + lines[2:]))
    else:
        path.write_bytes(what)
    return f"{name} <- {what!r}"


def damage(how, ws: Path, draw, other: dict) -> str:
    """Apply one damage; one that an earlier damage made impossible (altering a file that is gone) is skipped."""
    try:
        return how(ws, draw, other)
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as e:
        return f"{how.__name__}: not applied ({type(e).__name__})"


COMMANDS = {
    "resume": lambda ws: ["train", "--run-dir", ws / "run", *SMALL, "--resume", "--max-steps", "8", "--save-every", "2"],
    "translate": lambda ws: ["translate", "--run-dir", ws / "run", "--input", ws / "text.txt", "--beam", "1",
                             "--no-progress"],
    "translate-average": lambda ws: ["translate", "--run-dir", ws / "run", "--input", ws / "text.txt", "--beam", "1",
                                     "--average", "3", "--no-progress"],
    "evaluate": lambda ws: ["evaluate", "--run-dir", ws / "run", "--limit", "2", "--beam", "1"],
    "average": lambda ws: ["average", "--run-dir", ws / "run", "--last", "3"],
}


def test_damaged_run_directories_are_named_and_nothing_is_lost(small_run, other_run, sibling_run, tmp_path, request,
                                                              monkeypatch):
    monkeypatch.setenv("MULTI30K_DIR", str(MULTI30K))

    @fuzz_settings(budget(request, "damage"))
    @given(st.data())
    def check(data):
        ws = workspace(tmp_path, small_run, {})
        draw = data.draw
        others = {"foreign": other_run, "sibling": sibling_run}
        damages = [damage(draw(st.sampled_from([damage_checkpoint, damage_file])), ws, draw, others)
                   for _ in range(draw(st.integers(1, 3), label="damages"))]
        command = draw(st.sampled_from(sorted(COMMANDS)), label="command")
        argv = COMMANDS[command](ws)
        before = snapshot(ws)
        status, _, err = run(argv)
        event(f"{command}: exit status {status}")
        context = (command, damages, err)
        assert "Traceback" not in err, context
        assert status in (0, 2), (status, *context)
        if status == 2:
            assert len([x for x in err.splitlines() if x.startswith("error:")]) == 1, context
            assert_wrote_nothing(before, snapshot(ws), err, argv)
        after = snapshot(ws)
        kept = set(after.values())
        for name, content in before.items():  # every checkpoint that was there is still there, byte for byte
            if name.suffix == ".npz":            # (under its own name, or another one a note gave)
                assert content in kept, (str(name), *context)
        if status == 0 and command == "resume":
            steps = [json.loads(x)["step"] for x in (ws / "run" / "metrics.jsonl").read_text().splitlines()]
            assert steps == list(range(steps[0], 9)) and steps[-1] == 8, (steps, *context)

    check()
