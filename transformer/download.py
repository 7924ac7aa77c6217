"""Fetching files over HTTP(S): resumable, checksummed, never left half-written under the final name.

The bytes go to ``<name>.part`` beside the destination. A download that is cut off (a reset
connection, a server that stops answering or trickles, Ctrl-C) keeps its part; the next
attempt, in the same call or in a later run, asks the server for the rest with an HTTP
``Range`` header and continues from the part's last byte. Only a complete part whose SHA-256
matches is renamed to the final name; a part that does not match is deleted, so the next run
starts afresh. A server that sends more than the file's published size is stopped at that
size: what it sends is not the file.

``timeout`` bounds every wait for the server, and also how long a download may go on receiving
almost nothing: less than :data:`STALL_BYTES` in ``timeout`` seconds counts as stopped (a
server trickling a byte a second would otherwise never time out, each read being quick).
"""
from __future__ import annotations

import errno
import http.client
import os
import time
import urllib.error
import urllib.request
from pathlib import Path

from tqdm import tqdm

from .files import sha256_of

CHUNK = 1 << 16
STALL_BYTES = 1 << 10  # fewer bytes than this in ``timeout`` seconds: the transfer has stalled


class DownloadError(OSError):
    """A file could not be fetched, or what came was not the file expected."""


def part_path(dest: str | Path) -> Path:
    """Where the bytes of ``dest`` collect until it is complete and verified."""
    dest = Path(dest)
    return dest.with_name(dest.name + ".part")


def download(url: str, dest: str | Path, sha256: str | None = None, size: int | None = None, *,
             progress: bool = True, timeout: float = 60.0, retries: int = 3, offline_hint: str = "") -> Path:
    """Fetch ``url`` to ``dest`` and return ``dest``.

    ``sha256`` and ``size``: what the file must be (a mismatch deletes the part and raises);
    ``timeout``: seconds any one wait for the server may last; ``retries``: how many times a
    transfer that broke off is resumed within this call; ``offline_hint``: what to do without a
    network, added to the error when the server cannot be reached at all.
    """
    dest = Path(dest)
    part = part_path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    failures = 0
    while True:
        try:
            _fetch(url, part, size, progress, timeout)
            break
        except urllib.error.HTTPError as e:
            raise DownloadError(f"could not download {url}: HTTP {e.code} {e.reason}") from None
        except DownloadError:
            raise
        except OSError as e:
            if e.errno == errno.EFBIG:
                raise DownloadError(f"could not write {part}: {e.strerror} (a file-size limit, ulimit -f, below the "
                                    "file's size); lift the limit and run again (the download continues from byte "
                                    f"{_size(part):,})") from None
            if _disk_full(e):
                raise DownloadError(f"could not write {part}: {e.strerror}; free some space and run again "
                                    f"(the download continues from byte {_size(part):,})") from None
            reached = _size(part) > 0
            if not reached and _unreachable(e):
                hint = f"; {offline_hint}" if offline_hint else ""
                raise DownloadError(f"could not download {url} ({_reason(e)}){hint}") from None
            failures += 1
            if failures > retries:
                kept = f"; {_size(part):,} bytes are kept in {part} and the next run continues from there" if reached else ""
                raise DownloadError(f"could not download {url}: {_reason(e)} (tried {failures} times){kept}") from None
            time.sleep(min(2.0 ** (failures - 1), 10.0))
    if size is not None and _size(part) != size:
        got = _size(part)
        part.unlink()
        raise DownloadError(f"{url}: got {got:,} bytes, expected {size:,}; the partial file was deleted, "
                            "run again to download it afresh")
    if sha256 is not None:
        got = sha256_of(part)
        if got != sha256:
            part.unlink()
            raise DownloadError(f"{dest.name}: SHA-256 {got} does not match the expected {sha256}; the download "
                                f"from {url} was deleted: run again to download it afresh, or fetch it from "
                                "another mirror")
    os.replace(part, dest)
    return dest


def _fetch(url: str, part: Path, size: int | None, progress: bool, timeout: float) -> None:
    """Append the rest of ``url`` to ``part`` (all of it when the part is empty or absent)."""
    have = _size(part)
    if size is not None and have > size:  # not a prefix of this file
        part.unlink()
        have = 0
    if size is not None and have == size:
        return
    request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as e:
        if e.code != 416 or not have:  # 416: nothing past the part's end; the part may be complete
            raise
        return
    with response:
        if have and response.status != 206:  # the server sent the whole file: start over
            have = 0
        length = response.headers.get("Content-Length")
        total = have + int(length) if length is not None else size
        with open(part, "ab" if have else "wb") as out, \
                tqdm(total=total, initial=have, unit="B", unit_scale=True, desc=part.name[:-5], disable=not progress,
                     leave=False) as bar:
            window_start, window_bytes = time.monotonic(), 0
            while True:
                try:
                    chunk = response.read1(CHUNK)  # what has come, not a full CHUNK: a trickle is seen as one
                except http.client.HTTPException as e:  # e.g. IncompleteRead: the connection closed early
                    raise ConnectionError(f"the connection broke off ({type(e).__name__})") from None
                if not chunk:
                    break
                have += len(chunk)
                if size is not None and have > size:
                    out.close()
                    part.unlink()
                    raise DownloadError(f"{url}: the server sent more than the {size:,} bytes the file has, so it is "
                                        "not the file expected; the partial file was deleted (check --url-base, or "
                                        "try another mirror)")
                out.write(chunk)
                bar.update(len(chunk))
                window_bytes += len(chunk)
                if time.monotonic() - window_start >= timeout:
                    if window_bytes < STALL_BYTES:
                        raise TimeoutError(f"the server sent {window_bytes} bytes in {timeout:g} s")
                    window_start, window_bytes = time.monotonic(), 0
        if total is not None and _size(part) < total:
            raise ConnectionError("the connection closed before the end of the file")


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _disk_full(e: OSError) -> bool:
    return e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _unreachable(e: OSError) -> bool:
    """No connection could be made (no network, no such host, nothing listening), as opposed to
    a server that was reached and then stopped answering."""
    return isinstance(e, urllib.error.URLError) and not isinstance(e.reason, TimeoutError)


def _reason(e: OSError) -> str:
    reason = getattr(e, "reason", None) or e
    if isinstance(reason, TimeoutError):
        detail = str(reason)
        return f"the server stopped answering (timed out{': ' + detail if ' sent ' in detail else ''})"
    return str(reason) or type(reason).__name__
