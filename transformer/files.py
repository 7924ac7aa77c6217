"""Writing files so that nothing is lost and nothing is mixed: every file this tool writes, and
every name it takes, goes through here.

**Outputs** (:class:`Output`, :func:`write_file`). A regular file, or a name not yet taken, is
written under a temporary name in the same folder and renamed over the name once whole, so a
reader or a crash never meets half a file under it; a symlink to a regular file writes the
file it points to, the same way. Anything else (a device such as ``/dev/null``, a FIFO, a
terminal, a symlink to one of them) is written through, as ``> NAME`` would: renaming over it
would replace the node itself. ``/dev/stdout``, ``/dev/fd/N`` and ``/proc/self/fd/N`` name an
open descriptor: written through a copy of it, at its offset (so ``>> log`` appends).

**Claims.** The temporary name, ``.NAME.<pid>.<n>.partial``, is created with ``O_EXCL`` (it is
this writer's alone) and locked while it is written (``flock`` on POSIX, through portalocker):
that lock is the writer's claim on NAME. A second writer of NAME sees the claim and refuses (:class:`WriterBusy`) instead
of letting one result pass for the other's. The kernel releases the lock however its holder
ends, so a temporary file whose lock anyone can take was left by a writer that died (SIGKILL,
power loss): the next writer of the name removes it, and :func:`remove_stale` sweeps a folder.

**Locks** (:class:`Lock`): a lock on a file ``.lock`` in a folder, for commands that write
many files there (``train`` into a run directory, ``data wmt14`` into its folder).

**New names** (:func:`write_new`): files that must never replace anything (``evaluate``'s
records) are written whole and then hard-linked to a free name; a link fails when the name is
taken, so two writers never get one name.

**Hashes** (:func:`sha256_of`): a file's SHA-256, remembered beside its size, times, inode and
device, so that a large unchanged file is not read again at every start.

Both the claim and the lock are taken the same way (:func:`_lock_verified`): lock the open file,
then check that the name still leads to it. A file removed between one process's open and its
lock is then seen as removed, so no two processes ever hold one name (a stale lock file is
taken over by exactly one of them, whatever the timing).
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import socket
import stat
import sys
import time
from pathlib import Path
from typing import IO

import portalocker

from .signals import signals_held


class FileWriteError(OSError):
    """A file could not be written (a full disk, a quota, a file-size limit, a read-only folder);
    the message names the file and the reason, and nothing was left under its name half-written."""

    def __init__(self, message: str, errno: int | None = None):
        super().__init__(message)
        self.errno = errno  # the failed call's, so that callers can tell a full disk from a read-only folder


class WriterBusy(Exception):
    """Another live process is writing the same output (its claim on the name is held)."""


class Busy(Exception):
    """Another process holds a folder's :class:`Lock`."""


class LockUnwritable(Exception):
    """A folder's lock file cannot be written (a read-only folder, a full disk)."""


# ---------------------------------------------------------------------------- taking a name
HELD, MOVED, TAKEN = "held", "moved", "taken"


def _handle(fd: int) -> IO:
    """The open file ``fd`` as a file object, which every system's lock takes (closing it leaves ``fd`` open)."""
    return os.fdopen(fd, "rb", buffering=0, closefd=False)


def _try_lock(fd: int, shared: bool = False) -> bool:
    """Lock the open file ``fd`` without waiting (``flock`` on POSIX, ``msvcrt.locking`` on
    Windows, through portalocker); False when another process holds it."""
    kind = portalocker.LockFlags.SHARED if shared else portalocker.LockFlags.EXCLUSIVE
    with _handle(fd) as handle:
        try:
            portalocker.lock(handle, kind | portalocker.LockFlags.NON_BLOCKING)
        except portalocker.AlreadyLocked:
            return False
    return True


def _unlock(fd: int) -> None:
    with _handle(fd) as handle:
        portalocker.unlock(handle)


def _lock_verified(fd: int, path: Path) -> str:
    """Lock the open file ``fd`` (non-blocking) and check that ``path`` still names it: TAKEN, or
    with nothing held, HELD (another process holds the lock) or MOVED (the name was removed or
    now leads elsewhere: it changed between the open and the lock)."""
    if not _try_lock(fd):
        return HELD
    try:
        same = os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        same = False
    if not same:
        _unlock(fd)
    return TAKEN if same else MOVED


PARTIAL = ".partial"
_CLAIM = re.compile(r"\.(.+)\.(\d+)\.\d+" + re.escape(PARTIAL))  # .NAME.<pid>.<n>.partial


def _claim_path(target: Path, n: int) -> Path:
    return target.with_name(f".{target.name}.{os.getpid()}.{n}{PARTIAL}")


def _claim_files(folder: Path) -> list[tuple[Path, str, int]]:
    """The temporary files of writers in ``folder``: (path, the name they write, the pid they name)."""
    with contextlib.suppress(FileNotFoundError, NotADirectoryError), os.scandir(folder) as entries:
        return [(folder / entry.name, m.group(1), int(m.group(2))) for entry in entries
                if (m := _CLAIM.fullmatch(entry.name))]
    return []


def _claims(target: Path) -> list[tuple[Path, int]]:
    """The temporary files of writers of ``target`` in its folder, with the process ids they name."""
    return [(path, pid) for path, name, pid in _claim_files(target.parent) if name == target.name]


def _take_over(path: Path) -> bool:
    """Remove ``path`` if no process holds its lock (its writer died); True if it is gone or was
    removed, False while a live writer holds it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return True
    try:
        got = _lock_verified(fd, path)
        if got == TAKEN:
            os.unlink(path)  # while locked: whoever opened it meanwhile finds it gone (_lock_verified)
        return got != HELD  # (MOVED: renamed into place by its writer, or removed: no claim now)
    except OSError:  # a lock this file system cannot take, or a file not ours to remove: taken as live
        return False
    finally:
        os.close(fd)


def claim(target: Path) -> tuple[Path, int]:
    """A new temporary file for ``target``, created and locked by this process alone: (its path,
    its open descriptor, write-only). Stale temporary files of ``target`` are removed; a live
    writer's raises :class:`WriterBusy`, naming it. The check follows the creation, so of two
    writers that start together at least the later one sees the other (both may refuse; never
    both go on)."""
    n = 0
    while True:
        path = _claim_path(target, n)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:  # ours from an earlier claim in this process, or a dead process with this pid
            _take_over(path)
            n += 1
            continue
        if _lock_verified(fd, path) == TAKEN:
            break
        os.close(fd)  # a sweeper had it between our create and our lock (and removed it): take another
        n += 1
    live = [(other, pid) for other, pid in _claims(target) if other != path and not _take_over(other)]
    if live:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # (while still locked, as every removal here)
        os.close(fd)
        other, pid = live[0]
        raise WriterBusy(f"{target} is being written by process {pid} (its temporary file {other.name})")
    return path, fd


def remove_stale(folder: str | Path) -> list[Path]:
    """Remove the temporary files in ``folder`` whose writers are gone; returns them."""
    return [path for path, _, _ in _claim_files(Path(folder)) if path.exists() and _take_over(path)]


# ---------------------------------------------------------------------------- outputs
_DESCRIPTOR = re.compile(r"/(?:proc/self|dev)/fd/(\d+)")


def descriptor(path: str | Path) -> int | None:
    """The open descriptor of this process that ``path`` names (``/dev/stdout``, ``/dev/fd/1``,
    ``/proc/self/fd/1``, or a symlink to one of them), or None."""
    name = os.path.abspath(path)
    for _ in range(40):  # (as many links as the kernel follows)
        if m := _DESCRIPTOR.fullmatch(name):
            return int(m.group(1))
        if not os.path.islink(name):
            return None
        name = os.path.normpath(os.path.join(os.path.dirname(name), os.readlink(name)))
    return None


def output_target(path: str | Path) -> tuple[Path, bool]:
    """(the file that writing ``path`` writes, whether it is written through). A regular file or a
    new name, directly or through symlinks, is the file itself (replaced atomically); any other
    kind of node (device, FIFO, socket, terminal), and an open descriptor (``/dev/stdout``: the
    file the shell opened, at its offset), is written through."""
    path = Path(path)
    if descriptor(path) is not None:
        return path, True
    try:
        mode = os.stat(path).st_mode  # follows symlinks
    except FileNotFoundError:
        return Path(os.path.realpath(path)), False
    if stat.S_ISREG(mode):
        return Path(os.path.realpath(path)), False
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "a directory, not a file", str(path))
    return path, True


class Output:
    """``with Output(path) as f:`` writes ``path`` as this module says: atomically (a claim,
    renamed over the name at the end; removed if the block raises) or through (a device, a FIFO).
    ``flag``: the command-line flag that named the path, for a busy writer's message.
    :meth:`commit` with ``keep`` ends early, keeping a part of what was written (``translate``
    keeps its finished lines when it is stopped); ``lines_on_interrupt``: a block that Ctrl-C
    ends keeps the whole lines it wrote (a log)."""

    def __init__(self, path: str | Path, binary: bool = False, flag: str | None = None,
                 lines_on_interrupt: bool = False):
        self.path, self.binary, self.flag = Path(path), binary, flag
        self.lines_on_interrupt = lines_on_interrupt
        self.file: IO | None = None
        self.partial: Path | None = None
        self.claim: int | None = None  # a descriptor of the temporary file: the claim is held while it is open
        self.target, self.through = output_target(self.path)

    def open(self) -> IO:
        mode = "wb" if self.binary else "w"
        text = {} if self.binary else {"encoding": "utf-8"}
        if self.through:  # (an open descriptor is written through a copy of it: at its offset, its appends kept)
            fd = descriptor(self.path)
            self.file = (open(self.target, mode, **text) if fd is None  # noqa: SIM115 - closed by commit/discard
                         else os.fdopen(os.dup(fd), mode, **text))
            return self.file
        try:
            self.partial, fd = claim(self.target)
        except WriterBusy as e:
            if self.flag:
                raise WriterBusy(f"{self.flag} {e}; wait for it to finish, or choose another {self.flag}") from None
            raise
        except OSError as e:
            raise FileWriteError(f"could not write {self.path}: {e.strerror or e}", e.errno) from None
        self.claim = os.dup(fd)  # (the file object may be closed before the rename; the lock stays with this)
        self.file = os.fdopen(fd, mode, **text)
        return self.file

    def commit(self, keep=None) -> Path | None:
        """Finish: what was written goes under the name. ``keep``, a function of the bytes
        written, says how many of them to keep (then a failed flush of the rest is no error), or
        None to keep none: the name is then left as it was (and None returned)."""
        f, self.file = self.file, None
        if self.through:
            f.close()
            return self.path
        try:
            if keep is None:
                f.close()
            else:
                self._close_quietly(f)
                n = keep(Path(self.partial).read_bytes())
                if n is None:
                    self.discard()
                    return None
                os.ftruncate(self.claim, n)  # in place: a full disk allows it
            os.fsync(self.claim)
            with contextlib.suppress(FileNotFoundError):
                os.chmod(self.partial, stat.S_IMODE(os.stat(self.target).st_mode))  # as `> NAME` keeps it
            os.replace(self.partial, self.target)
        except OSError as e:
            self.discard()
            raise FileWriteError(f"could not write {self.path}: {e.strerror or e}", e.errno) from e
        self._let_go()
        return self.path

    def discard(self) -> None:
        """Give up: the temporary file is removed, the name left as it was."""
        f, self.file = self.file, None
        if f is not None:
            self._close_quietly(f)
        if self.partial is not None and not self.through:
            self.partial.unlink(missing_ok=True)
        self._let_go()

    def _let_go(self) -> None:
        if self.claim is not None:
            os.close(self.claim)
            self.claim = None

    @staticmethod
    def _close_quietly(f) -> None:
        with contextlib.suppress(OSError):
            f.close()

    def __enter__(self) -> IO:
        return self.open()

    def __exit__(self, kind, error, tb) -> None:
        with signals_held():  # a Ctrl-C during the rename takes effect once the name holds the file
            if kind is None:
                self.commit()
            elif self.lines_on_interrupt and issubclass(kind, KeyboardInterrupt):
                with contextlib.suppress(FileWriteError):
                    self.commit(keep=whole_lines)
            else:
                self.discard()


def whole_lines(data: bytes) -> int | None:
    """How many bytes at the start of ``data`` hold whole lines (None: not one whole line)."""
    return data.rfind(b"\n") + 1 or None


def write_file(path: str | Path, data: str | bytes) -> Path:
    """Write ``data`` to ``path`` as :class:`Output` does. A failed write raises
    :class:`FileWriteError` naming ``path``; what was there before is unchanged."""
    try:
        with Output(path, binary=isinstance(data, bytes)) as f:
            f.write(data)
    except FileWriteError:
        raise
    except OSError as e:
        raise FileWriteError(f"could not write {path}: {e.strerror or e}", e.errno) from e
    return Path(path)


def write_new(folder: Path, stem: str, files_named) -> Path:
    """Write the files ``files_named(name)`` gives ({suffix: text}) under ``folder/name``, where
    ``name`` is ``stem``, or ``stem_2``, ``stem_3``, ...: the first for which no name
    ``name+suffix`` is taken; returns ``folder/name``. Each file is written whole first, then
    hard-linked to its name: a link fails when the name is taken (by another process too, at the
    same instant), so nothing is ever replaced."""
    n = 1
    while True:
        name = stem if n == 1 else f"{stem}_{n}"
        done: list[Path] = []
        try:
            for suffix, text in files_named(name).items():
                final = folder / f"{name}{suffix}"
                if final.exists():  # (taken: no need to write it to find out)
                    raise FileExistsError(final)
                try:
                    part, fd = claim(final)
                except WriterBusy:  # another writer is taking this name now
                    raise FileExistsError(final) from None
                try:  # (the claim is held by ``fd`` until the link is made: no one takes the file over before)
                    with os.fdopen(os.dup(fd), "w", encoding="utf-8") as f:
                        f.write(text)
                        f.flush()
                        os.fsync(f.fileno())
                    _link(part, final)
                finally:
                    part.unlink(missing_ok=True)
                    os.close(fd)
                done.append(final)
            return folder / name
        except FileExistsError:
            for taken in done:  # the name is someone else's: give back what this call took of it
                taken.unlink(missing_ok=True)
            n += 1
        except BaseException:
            for taken in done:
                taken.unlink(missing_ok=True)
            raise


def _link(source: Path, name: Path) -> None:
    """``name`` becomes another name of ``source``; FileExistsError when it is taken. Where the
    file system has no hard links, the file is copied to a name created with O_EXCL."""
    try:
        os.link(source, name)
    except FileExistsError:
        raise
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as f:
            f.write(source.read_bytes())


# ---------------------------------------------------------------------------- locks
LOCK_NAME = ".lock"


def _describe(holder: dict) -> str:
    return (f"process {holder.get('pid')} on {holder.get('host')} ({holder.get('command', '?')}, "
            f"since {holder.get('since', '?')})")


def _holder(text: str) -> dict | None:
    """What a lock file says of its holder, or None when it says nothing usable."""
    try:
        holder = json.loads(text)
    except ValueError:
        return None
    return holder if isinstance(holder, dict) and "pid" in holder and "host" in holder else None


def _read(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, 1 << 16).decode("utf-8", "replace")


def _open_lock(path: Path, flags: int) -> int:
    try:
        if path.is_dir():  # (opened for reading, a directory would not fail here, but at its first read)
            raise IsADirectoryError(path)
        return os.open(path, flags, 0o644)
    except IsADirectoryError:
        raise Busy(f"{path} is a directory, not a lock file: remove it (rmdir {path})") from None
    except (PermissionError, OSError) as e:
        if isinstance(e, (FileNotFoundError, FileExistsError)):
            raise
        raise LockUnwritable(f"{path.parent}: cannot take its lock file {path.name} ({e.strerror or e})") from None


class Lock:
    """``with Lock(folder, advice):`` holds ``folder``'s lock (``flock`` on ``folder/.lock``);
    raises :class:`Busy` if a live process holds it, its message naming the holder (from the
    file: process id, host, command) and ending with ``advice``. Released, the file removed,
    when the block ends, whatever ends it; the kernel releases it if the holder dies, and a
    lock file that no process holds is taken over, with a note, whatever it holds. A lock file
    that names another host is never taken over: ``flock`` may not reach across a network
    filesystem."""

    def __init__(self, folder: str | Path, advice: str, command: str | None = None):
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self.advice = advice
        self.command = command or " ".join(["python -m transformer", *sys.argv[1:]])[:200]
        self.fd: int | None = None

    @property
    def held(self) -> bool:
        return self.fd is not None

    def _busy(self, who: str) -> Busy:
        return Busy(f"{self.folder} is in use by {who}; {self.advice} (if that process is gone for sure, delete "
                    f"{self.path})")

    def acquire(self) -> None:
        me = {"pid": os.getpid(), "host": socket.gethostname(), "command": self.command,
              "since": time.strftime("%Y-%m-%d %H:%M:%S")}
        while True:
            try:  # created here, or there before (and then left by someone, unless its holder still runs)
                fd, existed = _open_lock(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL), False
            except FileExistsError:
                try:
                    fd, existed = _open_lock(self.path, os.O_RDWR), True
                except FileNotFoundError:  # released meanwhile
                    continue
            got = _lock_verified(fd, self.path)
            if got == TAKEN:
                break
            text = _read(fd)
            os.close(fd)
            if got == HELD:  # (MOVED: its holder removed it between our open and our lock: open afresh)
                holder = _holder(text)
                raise self._busy(_describe(holder) if holder else "another process (its lock file does not say which)")
        text = _read(fd)
        holder = _holder(text)
        if holder and holder.get("host") != me["host"]:
            os.close(fd)  # the file is theirs: left as it is
            raise Busy(f"{self.folder} is in use by {_describe(holder)}; a lock from another host cannot be checked "
                       f"from here; {self.advice} (if that process is gone for sure, delete {self.path})")
        try:
            if existed:
                left = (_describe(holder) if holder else "a process that left it unreadable" if text.strip()
                        else "a process that left it empty")
                print(f"note: {self.path} was left by {left}, which no longer holds it; taking it over", file=sys.stderr)
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, json.dumps(me).encode())
        except BaseException as e:  # a full disk, say: no empty or half-written lock file is left
            _remove_and_close(self.path, fd)
            if isinstance(e, OSError):
                raise LockUnwritable(f"{self.folder}: cannot write its lock file {self.path.name} "
                                     f"({e.strerror or e}); nothing was left behind") from None
            raise
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            _remove_and_close(self.path, self.fd)
            self.fd = None

    def __enter__(self) -> Lock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _remove_and_close(path: Path, fd: int) -> None:
    """Remove the lock file while still holding it (so no one can have locked it meanwhile), then let go."""
    with contextlib.suppress(FileNotFoundError):  # removed by hand
        os.unlink(path)
    os.close(fd)


def holder_of(folder: str | Path) -> str | None:
    """Who holds ``folder``'s :class:`Lock` (a description), or None when no live process does."""
    path = Path(folder) / LOCK_NAME
    try:
        fd = _open_lock(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        text = _read(fd)
        holder = _holder(text)
        if not _try_lock(fd, shared=True):
            return _describe(holder) if holder else "another process"
        if holder and holder.get("host") != socket.gethostname():
            return _describe(holder)
        return None
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------- hashes
STAMPS = ".sha256.json"
_known: dict[tuple, str] = {}  # (path, stat) -> SHA-256, in this process


def _stamp(st: os.stat_result) -> list:
    """What a write to a file changes: its size, modification and change times (the change time
    moves on any write or rename, and no user command sets it back), inode and device."""
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def sha256_of(path: str | Path, stamps: str | Path | None = None) -> str:
    """The SHA-256 of a file, read in 1 MiB pieces. With ``stamps`` (a JSON file, usually
    ``.sha256.json`` in the file's folder), a hash is remembered there beside :func:`_stamp`
    and taken from there while the stamp is unchanged. Only a file whose times are two seconds
    older than the reading is remembered (there, and in this process): a write in the same clock
    tick as the reading would otherwise leave the stamp as it was (git's "racy" files)."""
    path = Path(path)
    st = os.stat(path)
    key = (str(path.resolve()), *_stamp(st))
    if key in _known:
        return _known[key]
    remembered = _read_stamps(stamps).get(path.name) if stamps else None
    if isinstance(remembered, dict) and remembered.get("stamp") == _stamp(st) and isinstance(remembered.get("sha256"), str):
        _known[key] = remembered["sha256"]
        return remembered["sha256"]
    began = time.time_ns()
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    digest = h.hexdigest()
    settled = max(st.st_mtime_ns, st.st_ctime_ns) < began - 2 * 10**9
    if settled and _stamp(os.stat(path)) == _stamp(st):  # and unchanged while read
        _known[key] = digest
        if stamps:
            _remember(Path(stamps), path.name, {"stamp": _stamp(st), "sha256": digest})
    return digest


def _read_stamps(stamps: str | Path) -> dict:
    try:
        found = json.loads(Path(stamps).read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _remember(stamps: Path, name: str, record: dict) -> None:
    """Add a file's record to ``stamps``; a folder that cannot be written only costs a later re-read."""
    found = _read_stamps(stamps)
    found[name] = record
    with contextlib.suppress(OSError, WriterBusy):
        write_file(stamps, json.dumps(found, indent=1) + "\n")
