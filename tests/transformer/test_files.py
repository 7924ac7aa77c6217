"""transformer.files: outputs that replace only what is theirs, claims and locks that one writer
holds at a time (checked at every interleaving of their system calls, up to two preemptions, and
in races of real processes under CPU load), names taken without replacing, remembered hashes."""
import hashlib
import os
import stat
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pytest

from transformer import files
from transformer.files import (Busy, FileWriteError, Lock, Output, WriterBusy, claim, output_target, remove_stale,
                               sha256_of, write_file, write_new)

from ..helpers import REPO


# ---------------------------------------------------------------------------- what an output replaces
def test_a_regular_file_or_a_new_name_is_replaced_whole_and_keeps_its_mode(tmp_path):
    new, old = tmp_path / "new.txt", tmp_path / "old.txt"
    write_file(new, "a\n")
    old.write_text("before\n")
    os.chmod(old, 0o640)
    inode = old.stat().st_ino
    write_file(old, "after\n")
    assert new.read_text() == "a\n" and old.read_text() == "after\n"
    assert old.stat().st_ino != inode and stat.S_IMODE(old.stat().st_mode) == 0o640  # renamed over, mode kept
    assert list(tmp_path.glob(".*")) == []  # no temporary file left


def test_a_symlink_to_a_regular_file_writes_the_file_and_stays_a_symlink(tmp_path):
    (tmp_path / "real").mkdir()
    target, link = tmp_path / "real" / "out.txt", tmp_path / "link.txt"
    target.write_text("before\n")
    link.symlink_to(target)
    write_file(link, "after\n")
    assert link.is_symlink() and target.read_text() == "after\n"
    dangling = tmp_path / "dangling.txt"
    dangling.symlink_to(tmp_path / "real" / "later.txt")
    write_file(dangling, "made\n")  # as `> NAME` would: the file the link names is created
    assert dangling.is_symlink() and (tmp_path / "real" / "later.txt").read_text() == "made\n"


def test_a_hard_link_is_replaced_by_name_and_the_other_name_keeps_its_bytes(tmp_path):
    (tmp_path / "kept.npz").write_bytes(b"a checkpoint")
    os.link(tmp_path / "kept.npz", tmp_path / "out.txt")
    write_file(tmp_path / "out.txt", "translations\n")
    assert (tmp_path / "kept.npz").read_bytes() == b"a checkpoint"
    assert (tmp_path / "out.txt").read_text() == "translations\n"


def test_a_device_a_fifo_and_a_symlink_to_a_device_are_written_through_and_never_replaced(tmp_path):
    link = tmp_path / "null"  # (a link of the test's own: code that renamed over it would replace the link, not /dev/null)
    link.symlink_to(os.devnull)
    assert output_target(link) == (link, True)
    write_file(link, "discarded\n")
    assert link.is_symlink() and stat.S_ISCHR(os.stat(os.devnull).st_mode)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    write_file(fifo, "through the pipe\n")
    reader.join(timeout=30)
    assert got == ["through the pipe\n"] and stat.S_ISFIFO(fifo.lstat().st_mode)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_a_full_device_is_a_write_error_naming_it(tmp_path):
    full = tmp_path / "full"
    full.symlink_to("/dev/full")
    with pytest.raises(FileWriteError, match=f"could not write {full}: No space left on device"):
        write_file(full, "x" * 100000)


def test_a_directory_is_not_an_output(tmp_path):
    with pytest.raises(IsADirectoryError):
        Output(tmp_path)


def test_a_failed_write_leaves_the_name_as_it_was_and_no_temporary_file(tmp_path):
    out = tmp_path / "out.txt"
    out.write_text("before\n")
    with pytest.raises(RuntimeError), Output(out) as f:
        f.write("half")
        raise RuntimeError("the writer failed")
    assert out.read_text() == "before\n" and list(tmp_path.glob(".*")) == []


def test_a_second_writer_of_a_name_refuses_naming_the_first_and_a_dead_writers_file_is_taken_over(tmp_path):
    out = tmp_path / "out.txt"
    first = Output(out, flag="--output")
    first.open().write("mine\n")
    with pytest.raises(WriterBusy, match=rf"--output {out} is being written by process {os.getpid()} "):
        Output(out, flag="--output").open()
    first.commit()
    assert out.read_text() == "mine\n"
    dead = tmp_path / ".out.txt.999999.0.partial"  # what a SIGKILL leaves: no one holds its lock
    dead.write_text("half")
    write_file(out, "next\n")
    assert not dead.exists() and out.read_text() == "next\n"


def test_remove_stale_removes_only_the_files_whose_writers_are_gone(tmp_path):
    dead = tmp_path / ".checkpoint_6.npz.999999.0.partial"
    dead.write_bytes(b"half")
    live, fd = claim(tmp_path / "checkpoint_8.npz")
    (tmp_path / ".hidden.partial").write_text("not a claim")  # no pid and number: not ours
    try:
        assert remove_stale(tmp_path) == [dead]
        assert live.exists() and (tmp_path / ".hidden.partial").exists()
    finally:
        os.close(fd)


def test_lines_are_kept_when_ctrl_c_ends_a_log(tmp_path):
    out = tmp_path / "metrics.jsonl"
    with pytest.raises(KeyboardInterrupt), Output(out, lines_on_interrupt=True) as f:
        f.write("1\n2\n3")
        raise KeyboardInterrupt
    assert out.read_text() == "1\n2\n"


# ---------------------------------------------------------------------------- new names
def test_write_new_never_replaces_and_racing_writers_get_distinct_names(tmp_path):
    (tmp_path / "run.json").write_text("an earlier evaluation\n")
    names, errors = [], []

    def one(i):
        try:
            names.append(write_new(tmp_path, "run", lambda name: {".txt": f"{i}\n", ".json": f'{{"txt": "{name}.txt"}}'}))
        except Exception as e:  # noqa: BLE001
            errors.append(e)
    workers = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == [] and len(set(names)) == 8
    assert (tmp_path / "run.json").read_text() == "an earlier evaluation\n" and not (tmp_path / "run.txt").exists()
    for stem in names:  # each record names its own text
        assert stem.with_suffix(".json").read_text() == f'{{"txt": "{stem.name}.txt"}}'
    assert sorted(p.name for p in tmp_path.glob(".*")) == []


# ---------------------------------------------------------------------------- remembered hashes
def test_a_hash_is_remembered_and_a_change_at_the_same_size_is_seen_even_with_its_times_put_back(tmp_path):
    data, stamps = tmp_path / "train.en", tmp_path / ".sha256.json"
    data.write_bytes(b"line one\nline two\n")
    old = time.time() - 100
    os.utime(data, (old, old))
    time.sleep(0.01)
    files._known.clear()
    assert sha256_of(data, stamps) == hashlib.sha256(data.read_bytes()).hexdigest()
    if data.stat().st_ctime >= time.time() - 2:  # (a file changed in the last 2 s is not remembered)
        time.sleep(2.2)
        files._known.clear()
        sha256_of(data, stamps)
    assert stamps.exists()
    files._known.clear()
    data.write_bytes(b"line two\nline one\n")  # two lines swapped: same size
    os.utime(data, (old, old))  # and the modification time put back
    assert sha256_of(data, stamps) == hashlib.sha256(b"line two\nline one\n").hexdigest()


def test_a_file_changed_just_now_is_not_remembered(tmp_path):
    data, stamps = tmp_path / "fresh", tmp_path / ".sha256.json"
    data.write_bytes(b"abc")
    files._known.clear()
    sha256_of(data, stamps)
    assert not stamps.exists() and files._known == {}


# ---------------------------------------------------------------------------- every interleaving
class Scheduler:
    """Runs contenders (threads) one step at a time; a step ends at each call of the ``os`` and
    lock (portalocker) functions that transformer.files makes where a name changes or is looked at, so any
    order of those calls can be forced. One thread runs at a time: the scheduler hands the turn
    over with locks (``threading.Lock`` may be released by another thread than its holder)."""

    STEPS = ("open", "lock", "unlock", "stat", "unlink", "close", "replace", "scandir")

    def __init__(self, choices: list[int]):
        self.choices, self.trace = list(choices), []
        self.me = threading.local()
        self.go: dict[int, threading.Lock] = {}
        self.parked = threading.Lock()
        self.parked.acquire()
        self.state: dict[int, str] = {}

    def point(self):
        me = getattr(self.me, "i", None)
        if me is None:  # (the test's own calls, outside the contenders)
            return
        self.state[me] = "waiting"
        self.parked.release()
        self.go[me].acquire()

    def proxy(self, module):
        def step(f):
            def call(*a, **k):
                self.point()
                return f(*a, **k)
            return call
        return types.SimpleNamespace(**{n: step(getattr(module, n)) if n in self.STEPS else getattr(module, n)
                                        for n in dir(module) if not n.startswith("__")})

    def run(self, contenders) -> list:
        """Run the contenders to the end, choosing by ``choices`` and then by keeping the last
        runner while it can run (no preemption); returns [(enabled, chosen)] per step."""
        threads = []
        for i, body in enumerate(contenders):
            self.go[i] = threading.Lock()
            self.go[i].acquire()

            def main(i=i, body=body):
                self.me.i = i
                self.point()  # wait for a first turn
                try:
                    body()
                finally:
                    self.state[i] = "done"
                    self.parked.release()
            threads.append(threading.Thread(target=main, daemon=True))
            threads[-1].start()
            self.parked.acquire()  # parked at its first point
        last = None
        while enabled := sorted(i for i, state in self.state.items() if state == "waiting"):
            chosen = self.choices.pop(0) if self.choices else last if last in enabled else enabled[0]
            self.trace.append((enabled, chosen))
            self.state[chosen], last = "running", chosen
            self.go[chosen].release()
            assert self.parked.acquire(timeout=30), "a contender did not come back"
        for t in threads:
            t.join(timeout=30)
        return self.trace


def explore(run_one, preemptions: int = 2):
    """Every schedule of ``run_one(choices) -> trace`` with at most ``preemptions`` switches away
    from a contender that could have gone on; yields each trace."""
    def switches(trace, upto):
        return sum(1 for k in range(1, upto) if trace[k][1] != trace[k - 1][1] and trace[k - 1][1] in trace[k][0])

    stack = [[]]
    while stack:
        prefix = stack.pop()
        trace = run_one(prefix)
        yield trace
        for i in range(len(prefix), len(trace)):
            enabled, chosen = trace[i]
            for alt in enabled:
                if alt == chosen:
                    continue
                candidate = trace[:i] + [(enabled, alt)]
                if switches(candidate, i + 1) <= preemptions:
                    stack.append([c for _, c in candidate])


def lock_contenders(folder: Path, start: str, overlaps: list):
    """Two contenders that take the lock, hold it for a step and let it go; with ``start`` "held",
    the lock is taken before they start and a third contender lets it go while they try."""
    holding = []

    def contender(i):
        lock = Lock(folder, "wait")
        try:
            lock.acquire()
        except Busy:
            return
        holding.append(i)
        if len(holding) > 1:
            overlaps.append(list(holding))
        files.os.stat(folder)  # (a step inside the critical section: others may run while it is held)
        holding.remove(i)
        lock.release()
    bodies = [lambda i=i: contender(i) for i in (1, 2)]
    if start == "held":
        first = Lock(folder, "wait")
        first.acquire()
        holding.append(0)
        bodies.insert(0, lambda: (holding.remove(0), first.release()))
    elif start == "stale":
        (folder / ".lock").write_text('{"pid": 999999, "host": "' + os.uname().nodename + '"}')
    return bodies


def run_scheduled(monkeypatch, choices: list, bodies: list) -> list:
    """Run ``bodies`` under a :class:`Scheduler` of ``choices``, transformer.files's calls of ``os``
    and of the lock as its steps; returns the trace."""
    sched = Scheduler(choices)
    monkeypatch.setattr(files, "os", sched.proxy(os))
    monkeypatch.setattr(files, "portalocker", sched.proxy(REAL_LOCKS))
    try:
        return sched.run(bodies)
    finally:
        monkeypatch.setattr(files, "os", os)
        monkeypatch.setattr(files, "portalocker", REAL_LOCKS)


def fresh_folder(tmp_path: Path) -> Path:
    folder = tmp_path / f"s{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    return folder


def run_lock_schedules(tmp_path, monkeypatch, start: str, preemptions: int) -> tuple[int, list]:
    overlaps = []

    def run_one(choices):  # (the lock held at the start is taken before the steps)
        return run_scheduled(monkeypatch, choices, lock_contenders(fresh_folder(tmp_path), start, overlaps))
    return sum(1 for _ in explore(run_one, preemptions)), overlaps


REAL_LOCKS = files.portalocker


@pytest.mark.parametrize("start", ["none", "stale", "held"])
def test_no_two_contenders_ever_hold_a_lock_at_any_interleaving(tmp_path, monkeypatch, capsys, start):
    """Two contenders for a lock (with no lock file at the start, a stale one, or one held and let
    go by a third while they try), every order of their system calls with up to two
    preemptions: never two holders at once."""
    traces, overlaps = run_lock_schedules(tmp_path, monkeypatch, start, preemptions=2)
    assert traces > 50 and overlaps == [], (traces, overlaps[:3])


def test_the_interleavings_find_a_lock_that_does_not_check_its_name_after_locking(tmp_path, monkeypatch, capsys):
    """The check is not vacuous: a lock that skips the name check after locking lets two
    contenders hold it at some schedule (one locks the file that the holder removed as it let go,
    the other the new one)."""
    def unchecked(fd, path):
        return files.TAKEN if files._try_lock(fd) else files.HELD
    monkeypatch.setattr(files, "_lock_verified", unchecked)
    _, overlaps = run_lock_schedules(tmp_path, monkeypatch, "held", preemptions=2)
    assert overlaps


def run_claim_schedules(tmp_path, monkeypatch) -> tuple[int, list]:
    problems = []

    def run_one(choices):
        folder = fresh_folder(tmp_path)
        (folder / ".out.txt.999999.0.partial").write_text("left by a writer that was killed\n")
        holding = []

        def writer(i):
            try:
                with Output(folder / "out.txt") as f:
                    holding.append(i)
                    if len(holding) > 1:
                        problems.append(("overlap", list(holding)))
                    f.write(f"writer {i}\n" * 3)
                    files.os.stat(folder)  # (a step inside the claim)
                    holding.remove(i)
            except WriterBusy:
                pass
        trace = run_scheduled(monkeypatch, choices, [lambda i=i: writer(i) for i in range(2)])
        out = folder / "out.txt"
        if out.exists() and out.read_text() not in {f"writer {i}\n" * 3 for i in range(2)}:
            problems.append(("mixed", out.read_text()))
        if left := [p.name for p in folder.iterdir() if p.name != "out.txt"]:
            problems.append(("left", left))
        return trace
    return sum(1 for _ in explore(run_one)), problems


def test_no_two_writers_ever_hold_a_claim_at_any_interleaving(tmp_path, monkeypatch):
    """Two writers of one output, beside the temporary file of a third that was killed, every
    order of their system calls with up to two preemptions: never two inside their claims at
    once, no temporary file left, and the output always one writer's whole text."""
    traces, problems = run_claim_schedules(tmp_path, monkeypatch)
    assert traces > 100 and problems == [], (traces, problems[:3])


def test_the_interleavings_find_a_claim_that_does_not_look_for_other_writers(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "_claims", lambda target: [])
    _, problems = run_claim_schedules(tmp_path, monkeypatch)
    assert any(kind == "overlap" for kind, _ in problems)


# ---------------------------------------------------------------------------- races of real processes
RACES = """
import os, sys, time
from pathlib import Path
from transformer.files import Busy
from transformer.rundir import RunLock

def contender(run, start, report, release):
    lock = RunLock(run)
    while time.time() < start:
        pass
    try:
        lock.acquire()
    except Busy:
        os.write(report, b"refused\\n")
        return
    os.write(report, b"took\\n")
    os.read(release, 1)  # held until both have tried: two "took" are two holders at once
    lock.release()

both = 0
for trial in range(int(sys.argv[2])):
    run = Path(sys.argv[1]) / f"r{trial}"
    run.mkdir()
    if trial % 2:
        (run / ".lock").write_text('{"pid": 999999, "host": "' + os.uname().nodename + '"}')  # stale
    start, (r, w), (rr, rw) = time.time() + 0.02, os.pipe(), os.pipe()
    children = []
    for _ in range(2):
        pid = os.fork()
        if pid == 0:
            os.close(2)  # the takeover note
            contender(run, start, w, rr)
            os._exit(0)
        children.append(pid)
    said = b""
    while said.count(b"\\n") < 2:
        said += os.read(r, 100)
    os.write(rw, b"xx")
    for pid in children:
        os.waitpid(pid, 0)
    for fd in (r, w, rr, rw):
        os.close(fd)
    both += sorted(said.decode().split()) != ["refused", "took"]
print(both)
"""

BUSY = "while True: pass"


def test_two_processes_racing_for_a_lock_never_both_hold_it_under_cpu_load(tmp_path):
    """100 races of two processes started on the same instant, half against a stale lock file,
    beside two processes that keep the cores busy: each time exactly one holds the lock while the
    other tries (each holder keeps it until both have tried, so a second "took" is an overlap)."""
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(2)]
    try:
        p = subprocess.run([sys.executable, "-c", RACES, str(tmp_path), "100"], cwd=REPO, capture_output=True,
                           text=True, timeout=600)
    finally:
        for b in busy:
            b.kill()
            b.wait()
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "0"


@pytest.mark.parametrize("interrupted", [False, True])
def test_a_ctrl_c_during_the_rename_takes_effect_after_it_with_the_file_whole(tmp_path, monkeypatch, interrupted):
    """A SIGINT that arrives while a finished file is renamed into place (here: sent from inside
    the rename) is held until the name holds the whole file, then raises; the same for a log kept
    on a first Ctrl-C, whose commit a second one must not cut."""
    import signal

    real_replace = files.os.replace

    def replace_under_a_signal(src, dst):
        os.kill(os.getpid(), signal.SIGINT)     # arrives now, in the middle of the commit
        time.sleep(0.05)                         # (an unblocked signal would have run its handler by now)
        real_replace(src, dst)

    monkeypatch.setattr(files.os, "replace", replace_under_a_signal)
    # Python's own Ctrl-C handler, whatever an earlier test in this process left in place
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    target = tmp_path / "metrics.jsonl"
    try:
        check_the_commit(target, interrupted)
    finally:
        signal.signal(signal.SIGINT, previous)


def check_the_commit(target, interrupted: bool) -> None:
    with pytest.raises(KeyboardInterrupt):
        with files.Output(target, lines_on_interrupt=True) as f:
            f.write('{"step": 1}\n{"step": 2}\n{"st')
            if interrupted:
                raise KeyboardInterrupt     # the first Ctrl-C: the log keeps its whole lines
            f.write('ep": 3}\n')
    want = '{"step": 1}\n{"step": 2}\n' + ("" if interrupted else '{"step": 3}\n')
    assert target.read_text() == want and not list(target.parent.glob(".*partial"))
