"""A run directory belongs to one run: an exclusive lock while a command writes into it, and a
fresh ``train`` never mixes its files with an old run's.

``train`` (and ``average`` when it writes into a run directory) holds :class:`RunLock` for as
long as it writes: a file ``.lock`` created atomically, holding the holder's process id, host and
command. A second writer refuses in one line naming the holder. A lock whose process is gone
(killed with SIGKILL, a power cut) is stale: the next writer on the same host takes it over and
says so. A lock from another host cannot be checked and is never taken over.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import time
from pathlib import Path

from .checkpoint import process_alive, step_checkpoints

LOCK_NAME = ".lock"
# files that say a run has trained in the directory (spm.model and cache/ alone are only prepared data)
RUN_FILES = ("metrics.jsonl", "best.npz", "train_summary.json")


class RunDirBusy(Exception):
    """Another process holds the run directory's lock."""


class RunDirInUse(Exception):
    """A fresh ``train`` was pointed at a directory that holds another run."""


def _describe(holder: dict) -> str:
    return (f"process {holder.get('pid')} on {holder.get('host')} ({holder.get('command', '?')}, "
            f"since {holder.get('since', '?')})")


class RunLock:
    """``with RunLock(run_dir):`` holds the directory's lock; raises :class:`RunDirBusy` if a live
    process holds it. Released (the file removed) when the block ends, whatever ends it."""

    def __init__(self, run: str | Path, command: str | None = None):
        self.run = Path(run)
        self.path = self.run / LOCK_NAME
        self.command = command or " ".join(["python -m transformer", *sys.argv[1:]])[:200]
        self.held = False

    def holder(self) -> dict | None:
        """The lock file's contents, or None when there is none (an unreadable one counts as held)."""
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {"pid": None, "host": "?", "command": "unreadable lock file"}

    def _stale(self, holder: dict) -> bool:
        return (holder.get("host") == socket.gethostname() and isinstance(holder.get("pid"), int)
                and not process_alive(holder["pid"]))

    def acquire(self) -> None:
        self.run.mkdir(parents=True, exist_ok=True)
        me = {"pid": os.getpid(), "host": socket.gethostname(), "command": self.command,
              "since": time.strftime("%Y-%m-%d %H:%M:%S")}
        for _ in range(2):  # a second try after removing a stale lock
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = self.holder()
                if holder is None:
                    continue  # released between the two calls
                if self._stale(holder):
                    print(f"note: {self.path} was left by {_describe(holder)}, which is no longer running; "
                          "taking it over", file=sys.stderr)
                    self.path.unlink(missing_ok=True)
                    continue
                raise RunDirBusy(f"{self.run} is in use by {_describe(holder)}; wait for it to finish or use "
                                 f"another --run-dir (if that process is gone for sure, delete {self.path})") from None
            with os.fdopen(fd, "w") as f:
                json.dump(me, f)
            self.held = True
            return
        raise RunDirBusy(f"{self.run}: could not take {self.path}; another process keeps taking it")

    def release(self) -> None:
        if self.held:
            self.path.unlink(missing_ok=True)
            self.held = False

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def check_not_busy(folder: str | Path) -> None:
    """Raise :class:`RunDirBusy` if a live process holds ``folder``'s lock (for writers that only
    add one file, such as ``average --output``)."""
    lock = RunLock(folder)
    holder = lock.holder()
    if holder is not None and not lock._stale(holder):
        raise RunDirBusy(f"{folder} is in use by {_describe(holder)}; write elsewhere or wait for it to finish")


def previous_run(run: str | Path) -> list[Path]:
    """The files of an earlier run in ``run``: its step checkpoints and logs (empty for a new one)."""
    run = Path(run)
    if not run.is_dir():
        return []
    return step_checkpoints(run) + [run / name for name in RUN_FILES if (run / name).exists()]


def check_fresh(run: str | Path) -> None:
    """A new ``train`` (no ``--resume``) must not add its checkpoints beside an old run's."""
    found = previous_run(run)
    if found:
        raise RunDirInUse(f"{run} already holds a run ({', '.join(p.name for p in found[-3:])}); continue it with "
                          "--resume, train into a new --run-dir, or add --overwrite to archive the old run first")


def archive(run: str | Path) -> Path | None:
    """Move everything in ``run`` but its lock into a sibling ``<name>.archived-<time>`` folder;
    returns that folder (None when there was nothing to move)."""
    run = Path(run)
    entries = [p for p in run.iterdir() if p.name != LOCK_NAME] if run.is_dir() else []
    if not entries:
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    dest = run.with_name(f"{run.name}.archived-{stamp}")
    n = 2
    while dest.exists():
        dest, n = run.with_name(f"{run.name}.archived-{stamp}-{n}"), n + 1
    dest.mkdir()
    for p in entries:
        shutil.move(str(p), dest / p.name)
    return dest
