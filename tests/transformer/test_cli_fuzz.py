"""Two fuzzers of the command line, driven by hypothesis, that look for the next hostile case
before a user meets it.

1. **Flags.** Each verb's flags are drawn from the kinds they are declared with
   (:mod:`transformer.flags`): values in range, and values out of range, non-finite, huge and
   malformed. Every run either succeeds, or ends with one ``error:`` line and exit status 2
   (never a traceback, never status 1) and writes nothing.
2. **Damaged run directories.** Checkpoints truncated, altered, renamed, missing, replaced by
   other files, or another run's (of another vocabulary, or of the same vocabulary and model); the
   metrics log, the lock, ``settings.json``, ``data.json``, ``run.json`` (missing, garbled, another
   run's), the BPE model and the id cache damaged or missing; any file of the run directory altered
   in place at its own size. ``train --resume``, ``translate``, ``evaluate`` and ``average``
   either work or name the problem in one ``error:`` line with status 2, and lose nothing: every
   checkpoint that was there is still there, byte for byte, a resumed run's log holds each update
   once, a resumed run keeps the identity of the checkpoint it went on from, and ids altered in
   their cache are never trained on without a note.
3. **Outputs of every kind.** ``--output`` naming a device, a symlink to one, a FIFO with a reader,
   a symlink to a regular file, a hard link to a checkpoint or a directory: a device, a FIFO and a
   symlink stay what they were, and the checkpoint keeps its bytes.
4. **Environment variables.** Every declared variable set to a value its kind refuses: one
   ``error:`` line naming it, status 2, nothing written.
5. **Two commands racing on one name** (in subprocesses, so fewer cases): the first is paused
   (SIGSTOP) at one of its writes of the name while the second runs, then let go; each ends with
   status 0 or one ``error:`` line and status 2, the name holds one command's whole result (the
   last to finish of those that wrote), and no temporary file is left.

The commands run in this process (:func:`transformer.cli.run`): a refusal takes milliseconds,
so many cases fit in CI. ``--fuzz-scale K`` tries K times CI's counts, ``--fuzz-examples N``
N examples in each::

    pytest tests/transformer/test_cli_fuzz.py --fuzz-scale 5
"""
import argparse
import contextlib
import io
import json
import os
import re
import select
import shutil
import socket
import stat
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from transformer import cli, wmt14
from transformer.flags import Boolean, Choice, Kind, Real, Whole

from ..helpers import MULTI30K, PAUSING, REPO, SMALL, needs_multi30k, resume, start, stopped
from .test_wmt14_data import small_archives

pytestmark = [needs_multi30k, pytest.mark.slow]

# examples per test in CI (each verb of the flag fuzzer is a test; so is the damage fuzzer)
CI_EXAMPLES = {"data": 15, "train": 40, "translate": 30, "evaluate": 20, "average": 20, "damage": 60, "outputs": 20,
               "environment": 30, "races": 4}


def budget(request, name: str) -> int:
    return request.config.getoption("--fuzz-examples") or CI_EXAMPLES[name] * request.config.getoption("--fuzz-scale")


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


@pytest.mark.parametrize("verb", ["average", "data", "evaluate", "train", "translate"])
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
                                 "cache/train/key.json", "cache/train/src.ids", "train_summary.json", "run.json"]))
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
        "run.json": [None, b"", b"{", b'{"run_id": 5}', b'{"run_id": ""}', "foreign", "sibling"],
    }[name]
    what = draw(st.sampled_from(contents))
    if what is None:
        if path.is_file():
            path.unlink()
        return f"delete {name}"
    if what == "directory":
        path.mkdir(exist_ok=True)
    elif what in ("foreign", "sibling"):  # another run's file of that name
        shutil.copy(other[what] / name, path)
    elif what == "cut":  # an append cut off by a crash
        path.write_bytes(path.read_bytes() + b'{"step": 7, "lo')
    elif what == "middle":
        lines = path.read_bytes().splitlines(keepends=True)
        path.write_bytes(b"".join(lines[:2] + [b"\x00garbage\n"] + lines[2:]))
    else:
        path.write_bytes(what)
    return f"{name} <- {what!r}"


def alter_in_place(ws: Path, draw, other: dict) -> str:
    """Any file of the run directory altered at its own size: a byte flipped, its bytes reversed,
    two of its lines swapped, or (ids) each id shifted by one."""
    run = ws / "run"
    names = sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.is_file() and p.name != ".lock")
    name = draw(st.sampled_from(names), label="altered")
    path = run / name
    data = path.read_bytes()
    how = draw(st.sampled_from(["flip", "reverse", "swap lines", "shift ids"]))
    if how == "flip" and data:
        i = draw(st.integers(0, len(data) - 1))
        data = data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1:]
    elif how == "reverse":
        data = data[::-1]
    elif how == "swap lines" and data.count(b"\n") >= 2:
        lines = data.split(b"\n")
        i = draw(st.integers(0, len(lines) - 2))
        lines[i], lines[i + 1] = lines[i + 1], lines[i]
        data = b"\n".join(lines)
    elif how == "shift ids" and name.endswith(".ids"):
        data = (np.frombuffer(data, dtype=np.int32) + 1).astype(np.int32).tobytes()
    if data == path.read_bytes():
        return f"{how} {name}: no change"
    size = path.stat().st_size
    path.write_bytes(data)
    assert path.stat().st_size == size
    return f"{how} {name}"


def _meta(data: bytes) -> dict:
    """A checkpoint's metadata from its bytes ({} when they are not one)."""
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            return json.loads(str(z["meta"]))
    except Exception:  # noqa: BLE001 - damaged on purpose
        return {}


def _meta_step(data: bytes):
    return _meta(data).get("step")


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
        damages = [damage(draw(st.sampled_from([damage_checkpoint, damage_file, alter_in_place])), ws, draw, others)
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
            if name.suffix == ".npz" and "cache" not in name.parts:  # (under its name, or another a note gave)
                assert content in kept, (str(name), *context)
        if status == 0 and command == "resume":
            steps = [json.loads(x)["step"] for x in (ws / "run" / "metrics.jsonl").read_text().splitlines()]
            assert steps == list(range(steps[0], 9)) and steps[-1] == 8, (steps, *context)
            went_on = int(re.search(r"starting at update (\d+)", err).group(1))  # never another run's identity
            resumed = [before[k] for k in before if k.suffix == ".npz" and _meta_step(before[k]) == went_on]
            ids = {_meta(b).get("run_id") for b in resumed}
            assert _meta((ws / "run" / "checkpoint_8.npz").read_bytes()).get("run_id") in ids, context
        ids_altered = any(re.fullmatch(r"(flip|reverse|swap lines|shift ids) cache/train/\w+\.(ids|offsets\.npy)", d)
                          for d in damages)
        if ids_altered and status == 0 and command == "resume":
            assert "the token id cache is damaged" in err, context  # never trained on without a note

    check()


# ---------------------------------------------------------------------------- 3. outputs of every kind
class FifoReader:
    """Reads a FIFO to its end in a thread, opened first without waiting (so a writer's open never
    blocks), until ``stop``; ``data`` holds what came."""

    def __init__(self, path: Path):
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        self.data, self.done = b"", threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        while not self.done.is_set():
            ready, _, _ = select.select([self.fd], [], [], 0.05)
            if ready:
                self.data += os.read(self.fd, 1 << 16)

    def stop(self):
        self.done.set()
        self.thread.join(timeout=10)
        os.close(self.fd)


def refuses(kind, text: str) -> bool:
    try:
        kind(text)
    except argparse.ArgumentTypeError:
        return True
    return False


def kinds_of_output(ws: Path) -> dict:
    """{name: (path, what it is)}: the nodes an --output may name that are not a new file."""
    (ws / "real").mkdir()
    (ws / "real" / "target.txt").write_text("a file of the user's\n")
    made = {"fifo": (ws / "out.fifo", "fifo"),  # (devices by a link of the test's own: a regression would replace the link)
            "link-to-device": (ws / "null-link", "link"), "link-to-file": (ws / "file-link", "link"),
            "hard-link-to-checkpoint": (ws / "hard.npz", "file"), "directory": (ws / "adir", "dir")}
    os.mkfifo(ws / "out.fifo")
    (ws / "null-link").symlink_to(os.devnull)
    (ws / "file-link").symlink_to(ws / "real" / "target.txt")
    os.link(ws / "run" / "checkpoint_6.npz", ws / "hard.npz")
    return made


def node_kind(path: Path) -> str:
    mode = path.lstat().st_mode
    return ("link" if stat.S_ISLNK(mode) else "char" if stat.S_ISCHR(mode) else "fifo" if stat.S_ISFIFO(mode)
            else "dir" if stat.S_ISDIR(mode) else "file")


def test_outputs_of_every_kind_are_written_through_or_replaced_without_harm(small_run, tmp_path, request):
    @fuzz_settings(budget(request, "outputs"))
    @given(st.data())
    def check(data):
        ws = workspace(tmp_path, small_run, {})
        made = kinds_of_output(ws)
        which = data.draw(st.sampled_from(sorted(made)), label="output")
        path, kind = made[which]
        verb = data.draw(st.sampled_from(["translate", "average"]), label="verb")
        argv = (["translate", "--run-dir", ws / "run", "--input", ws / "text.txt", "--beam", "1", "--no-progress"]
                if verb == "translate" else ["average", "--run-dir", ws / "run", "--last", "2"]) + ["--output", path]
        checkpoint = (ws / "run" / "checkpoint_6.npz").read_bytes()
        reader = FifoReader(path) if kind == "fifo" else None
        try:
            status, _, err = run(argv)
        finally:
            if reader:
                reader.stop()
        event(f"{verb} into {which}: exit status {status}")
        assert_clean(argv, status, err)
        assert node_kind(path) == kind, (argv, err)  # a device, a FIFO, a symlink stay what they were
        assert (ws / "run" / "checkpoint_6.npz").read_bytes() == checkpoint, (argv, err)
        if which == "link-to-file" and status == 0:
            assert (ws / "real" / "target.txt").read_bytes() != b"a file of the user's\n", argv  # written, through it
        if kind == "fifo" and status == 0 and verb == "translate":
            assert reader.data.decode().count("\n") == 2, (argv, err)
        if which in ("directory", "hard-link-to-checkpoint"):
            assert status == 2, (argv, err)  # not a file to write; a run's checkpoint (by what it holds)
        assert list(ws.glob(".*.partial")) == [] and list((ws / "run").glob(".*.partial")) == []

    check()


# ---------------------------------------------------------------------------- 4. environment variables
def test_any_bad_environment_variable_is_one_line_naming_it_and_writes_nothing(small_run, tmp_path, request,
                                                                              monkeypatch):
    from minitensor import environment  # noqa: PLC0415

    @fuzz_settings(budget(request, "environment"))
    @given(st.data())
    def check(data):
        ws = workspace(tmp_path, small_run, {})
        name = data.draw(st.sampled_from(sorted(environment.VARIABLES)), label="variable")
        variable = environment.VARIABLES[name]
        bad = [v for v in out_of_kind(variable.kind) if v.strip() and refuses(variable.kind, v.strip())]
        if not bad:  # a folder's name: anything non-empty is taken, and checked where it is used
            return
        value = data.draw(st.sampled_from(bad), label="value")
        verb = data.draw(st.sampled_from(["train", "translate", "evaluate", "average", "data"]), label="verb")
        argv = base_argv(verb, ws)
        before = snapshot(ws)
        with monkeypatch.context() as m:
            m.setenv(name, value)
            status, out, err = run(argv)
        event(f"{name}: exit status {status}")
        assert status == 2 and err.startswith(f"error: {name} must be "), (name, value, err)
        assert len(err.strip().splitlines()) == 1 and out == "", (name, value, err)
        assert snapshot(ws) == before and not (ws / "new").exists() and not (ws / "wmt").exists()

    check()


# ---------------------------------------------------------------------------- 5. two commands racing on one name
RACERS = {  # a command that writes NAME in ws, and what the name holds when it wrote it
    "translate dogs": lambda ws, name: ["translate", "--run-dir", ws / "run", "--input", ws / "dogs.txt", "--beam", "1",
                                        "--no-progress", "--output", ws / name],
    "translate cats": lambda ws, name: ["translate", "--run-dir", ws / "run", "--input", ws / "cats.txt", "--beam", "1",
                                        "--no-progress", "--output", ws / name],
    "average of the run": lambda ws, name: ["average", "--run-dir", ws / "run", "--last", "2", "--output", ws / name],
    "average of another run": lambda ws, name: ["average", "--run-dir", ws / "sibling", "--last", "2", "--output",
                                                ws / name],
}


def test_two_commands_racing_on_one_name_leave_one_whole_result(small_run, sibling_run, tmp_path, request):
    ws = workspace(tmp_path, small_run, {})
    shutil.copytree(sibling_run, ws / "sibling")
    (ws / "dogs.txt").write_text("A dog runs.\nTwo dogs play.\n")
    (ws / "cats.txt").write_text("A cat sleeps.\nTwo cats eat.\n")
    results = {}  # what each command writes when it runs alone
    for racer, argv in RACERS.items():
        status, _, err = cli_subprocess(argv(ws, "alone"), PAUSING)
        assert status == 0, err
        results[racer] = what_it_holds(ws / "alone")
        (ws / "alone").unlink()

    @fuzz_settings(budget(request, "races"))
    @given(st.data())
    def check(data):
        first, second = (data.draw(st.sampled_from(sorted(RACERS)), label=label) for label in ("first", "second"))
        nth = data.draw(st.integers(1, 3), label="paused at its write")
        name = f"out{len(list(ws.glob('out*')))}.bin"
        paused = start(*RACERS[first](ws, name), pause_at=re.escape(name), nth=nth)
        was_paused = stopped(paused)
        status2, _, err2 = cli_subprocess(RACERS[second](ws, name), PAUSING)
        status1, _, err1 = resume(paused) if was_paused else (paused.returncode, *paused.communicate())
        event(f"{first} paused at write {nth} ({was_paused}), {second}: {status1}, {status2}")
        for status, err in ((status1, err1), (status2, err2)):
            assert status in (0, 2) and "Traceback" not in err, err
            assert status == 0 or len([x for x in err.splitlines() if x.startswith("error:")]) == 1, err
        written = [r for r, s in ((first, status1), (second, status2)) if s == 0]
        if (ws / name).exists():  # the result of the one that finished last of those that wrote
            last = written[0] if len(written) == 1 else first if was_paused else second
            assert written and what_it_holds(ws / name) == results[last], (first, second, err1, err2)
        assert list(ws.glob(".*.partial")) == [], (first, second)

    check()


def what_it_holds(path: Path):
    """A translation's bytes; an average's run and checkpoints (a .npz file's bytes hold the time
    it was written)."""
    data = path.read_bytes()
    meta = _meta(data)
    return (meta.get("run_id"), tuple(meta.get("averaged", ()))) if meta else data


def cli_subprocess(argv, code: str) -> tuple[int, str, str]:
    p = subprocess.run([sys.executable, "-c", code, *map(str, argv)], cwd=REPO, capture_output=True, text=True,
                       timeout=300, env={**os.environ, "MINITENSOR_DEBUG": "0"})
    return p.returncode, p.stdout, p.stderr
