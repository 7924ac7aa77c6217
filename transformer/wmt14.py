"""WMT 2014 English-German, prepared from its official archives: ``python -m transformer data wmt14``.

The paper trained on "the standard WMT 2014 English-German dataset consisting of about 4.5
million sentence pairs" (Section 5.1), validated on newstest2013 and reported BLEU on
newstest2014 (Section 6.1). The standard training data are three corpora of WMT 2014's
translation task, each in its own archive on statmt.org; newstest2013 and newstest2014 (the
full 3003-sentence release) are in the WMT 2019 development archive, as TensorFlow Datasets
takes them.

``data wmt14`` (:func:`prepare`) fetches the four archives (or takes them from a folder,
``--from``), checks each against its published SHA-256, unpacks the English-German members
and writes into one folder::

    train.en  train.de     Europarl v7 + Common Crawl + News Commentary v9, in that order
    valid.en  valid.de     newstest2013
    test.en   test.de      newstest2014 (from SGM: one segment per line)
    manifest.json          files, line counts, SHA-256s, and where every line came from
    archives/              the downloaded archives (delete them once the folder is prepared)

``python -m transformer train --preset wmt14-base --data-dir FOLDER`` then needs nothing else.
Everything is written under temporary names and renamed at the end, the manifest last, so an
interrupted or failed run (a full disk, say) leaves no partial file under a final name. One
``data wmt14`` at a time prepares a folder (a second refuses, naming the first), files under
its names that it did not write are refused rather than replaced, and a prepared folder's files
are checked against the manifest's SHA-256s whenever the folder is read (a changed one is named).
"""
from __future__ import annotations

import datetime
import json
import os
import shutil
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from .data import DataError, read_sgm
from .download import DownloadError, download
from .files import STAMPS, Lock, sha256_of

# SHA-256 and sizes as published by TensorFlow Datasets (tensorflow_datasets/url_checksums/
# wmt14_translate.txt, github.com/tensorflow/datasets), which fetches the same four archives.
CHECKSUM_SOURCE = "TensorFlow Datasets, tensorflow_datasets/url_checksums/wmt14_translate.txt"


@dataclass(frozen=True)
class Archive:
    url: str
    size: int
    sha256: str

    @property
    def name(self) -> str:
        return self.url.rsplit("/", 1)[1]


ARCHIVES = {a.name: a for a in (
    Archive("http://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz", 657_632_379,
            "0224c7c710c8a063dfd893b0cc0830202d61f4c75c17eb8e31836103d27d96e7"),
    Archive("http://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz", 918_311_367,
            "c7a74e2ea01ac6c920123108627e35278d4ccb5701e15428ffa34de86fa3a9e5"),
    Archive("http://www.statmt.org/wmt14/training-parallel-nc-v9.tgz", 80_418_416,
            "cb8953f292298e6877ae433c98912b927cb0766b303f4540512ddd286c748485"),
    Archive("http://data.statmt.org/wmt19/translation-task/dev.tgz", 38_654_961,
            "7a7deccf82ebb05ba508dba5eb21356492224e8f630ec4f992132b029b4b25e7"),
)}


@dataclass(frozen=True)
class Corpus:
    """One parallel corpus inside an archive: its English and German members."""

    name: str
    split: str
    archive: str
    en: str
    de: str


CORPORA = (
    Corpus("europarl-v7", "train", "training-parallel-europarl-v7.tgz",
           "training/europarl-v7.de-en.en", "training/europarl-v7.de-en.de"),
    Corpus("commoncrawl", "train", "training-parallel-commoncrawl.tgz", "commoncrawl.de-en.en", "commoncrawl.de-en.de"),
    Corpus("news-commentary-v9", "train", "training-parallel-nc-v9.tgz",
           "training/news-commentary-v9.de-en.en", "training/news-commentary-v9.de-en.de"),
    Corpus("newstest2013", "valid", "dev.tgz", "dev/newstest2013.en", "dev/newstest2013.de"),
    Corpus("newstest2014", "test", "dev.tgz", "dev/newstest2014-deen-ref.en.sgm", "dev/newstest2014-deen-src.de.sgm"),
)
SPLITS = ("train", "valid", "test")
LANGUAGES = ("en", "de")
MANIFEST = "manifest.json"
OFFLINE_HINT = "without a network, download the archives elsewhere and pass their folder with --from"


class PreparationError(OSError):
    """The archives were fine but the folder could not be written (a full disk, say)."""


# ---------------------------------------------------------------------------- reading a prepared folder
def read_manifest(folder: str | Path) -> dict:
    """The manifest of a folder :func:`prepare` wrote, its files checked against it: there, of
    their size and of their SHA-256 (remembered in the folder's ``.sha256.json`` beside each
    file's size and times, so that an unchanged folder is not read again at every start)."""
    folder = Path(folder)
    path = folder / MANIFEST
    if not path.exists():
        raise DataError(f"{folder}: no {MANIFEST}; prepare the folder with: python -m transformer data wmt14 "
                        f"--out {folder}")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        files = {name: (int(info["bytes"]), str(info["sha256"])) for name, info in manifest["files"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise DataError(f"{path} is not a manifest that `data wmt14` wrote ({type(e).__name__}: {e}); prepare the folder "
                        f"again: python -m transformer data wmt14 --out {folder}") from None
    again = f"prepare it again: python -m transformer data wmt14 --out {folder} (the archives are reused)"
    for name, (size, sha256) in files.items():
        f = folder / name
        if not f.is_file() or f.stat().st_size != size:
            raise DataError(f"{f}: missing or changed since {path} was written; {again}")
        if (got := sha256_of(f, stamps=folder / STAMPS)) != sha256:
            raise DataError(f"{f}: changed since {path} was written (its SHA-256 is {got[:12]}..., the manifest's "
                            f"{sha256[:12]}...); {again}")
    return manifest


def split_files(folder: str | Path, split: str, src_lang: str = "en", tgt_lang: str = "de") -> tuple[Path, Path]:
    """(source file, target file) of one split of a prepared folder."""
    if split not in SPLITS:
        raise DataError(f"unknown WMT14 split {split!r}; choose from {SPLITS}")
    for lang in (src_lang, tgt_lang):
        if lang not in LANGUAGES:
            raise DataError(f"WMT14 here is English-German: no language {lang!r}")
    read_manifest(folder)
    folder = Path(folder)
    return folder / f"{split}.{src_lang}", folder / f"{split}.{tgt_lang}"


def is_prepared(folder: str | Path) -> bool:
    return (Path(folder) / MANIFEST).exists()


# ---------------------------------------------------------------------------- preparing one
def prepare(out: str | Path, from_dir: str | Path | None = None, url_base: str | None = None, *,
            progress: bool = True, timeout: float = 60.0, retries: int = 3, archives: dict | None = None,
            corpora: tuple = CORPORA, log=None) -> dict:
    """Fetch (or take ``from_dir``'s) archives, check them, and write the folder; returns the manifest.

    ``url_base``: a mirror holding the archives under their own names (``URL_BASE/dev.tgz``).
    ``archives``, ``corpora``: what to fetch and unpack (the tests give small stand-ins).
    A folder already prepared is left as it is.
    """
    archives = ARCHIVES if archives is None else archives
    log = log or (lambda msg: print(msg, file=sys.stderr))
    say = log if progress else (lambda msg: None)  # what is under way: only beside the progress bars
    out = Path(out)
    if (manifest := _prepared(out, log)) is not None:
        return manifest
    changed = is_prepared(out)  # (prepared, and its files changed since: said above, prepared again below)
    if from_dir is not None:
        missing = [name for name in archives if not (Path(from_dir) / name).is_file()]
        if missing:  # all of them at once, before hours of checking the others
            raise DataError(f"--from {from_dir}: missing {', '.join(missing)} (download "
                            + ", ".join(archives[name].url for name in missing) + ")")
    out.mkdir(parents=True, exist_ok=True)
    with Lock(out, "wait for it to finish, or prepare another --out"):  # one `data wmt14` at a time in a folder
        if not changed and (manifest := _prepared(out, log)) is not None:  # by the one that held the lock before
            return manifest
        if theirs := _not_ours(out):
            raise DataError(f"--out {out} holds {', '.join(theirs)}, which `data wmt14` did not write (there is no "
                            f"{MANIFEST} that lists them): move them away, or prepare another --out")
        paths = {name: _archive(out, name, a, from_dir, url_base, progress, timeout, retries, log, say)
                 for name, a in archives.items()}
        manifest = _write(out, paths, archives, corpora, progress, say)
    train = manifest["files"]["train.en"]["lines"]
    log(f"prepared {out}: {train:,} training pairs, {manifest['files']['valid.en']['lines']:,} valid, "
        f"{manifest['files']['test.en']['lines']:,} test")
    return manifest


def _prepared(out: Path, log) -> dict | None:
    """The manifest of ``out`` when it is prepared and its files are as the manifest says (a note
    says so); None when it is not prepared, or its files have changed since (a note says they
    are prepared again)."""
    if not is_prepared(out):
        return None
    try:
        manifest = read_manifest(out)
    except DataError as e:
        log(f"note: {str(e).split('; ')[0]}: preparing it again")
        return None
    pairs = manifest["files"].get("train.en", {}).get("lines")
    log(f"{out} is already prepared ({f'{pairs:,}' if isinstance(pairs, int) else 'its'} training pairs); "
        f"delete {out / MANIFEST} to prepare it again")
    return manifest


def _not_ours(out: Path) -> list[str]:
    """The files under the names ``data wmt14`` writes in ``out`` that it did not write: those
    that no manifest lists (the folder's own, whose files may have changed; or the one an
    interrupted run left in ``.partial``, by content)."""
    listed, leftover = _listed(out / MANIFEST), _listed(out / ".partial" / MANIFEST)
    theirs = []
    for name in _output_names():
        path = out / name
        if not (path.exists() or path.is_symlink()) or name in listed:
            continue
        if not (name in leftover and path.is_file() and not path.is_symlink()
                and sha256_of(path) == leftover[name].get("sha256")):
            theirs.append(name)
    return theirs


def _listed(manifest: Path) -> dict:
    try:
        files = json.loads(manifest.read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return {k: v for k, v in files.items() if isinstance(v, dict)} if isinstance(files, dict) else {}


def _write(out: Path, paths: dict, archives: dict, corpora: tuple, progress: bool, say) -> dict:
    """Unpack into ``out/.partial``, then rename into place: the manifest is written first (it
    names what the renames put in place, for a run interrupted among them) and renamed last."""
    partial = out / ".partial"
    try:
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        manifest = _build(partial, paths, archives, corpora, progress, say)
        (partial / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        for name in manifest["files"]:
            os.replace(partial / name, out / name)
        os.replace(partial / MANIFEST, out / MANIFEST)
    except OSError as e:
        for name in _output_names():
            if not (out / MANIFEST).exists():
                (out / name).unlink(missing_ok=True)
        raise PreparationError(f"could not write {e.filename or out}: {e.strerror or e}; nothing was left under the "
                               f"final names in {out} (the archives are kept); free some space and run again") from None
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return manifest


def _output_names() -> list:
    return [f"{split}.{lang}" for split in SPLITS for lang in LANGUAGES]


def _archive(out: Path, name: str, a: Archive, from_dir, url_base, progress, timeout, retries, log, say) -> Path:
    """The archive's path, checked: from ``from_dir``, or already downloaded, or downloaded now."""
    if from_dir is not None:
        path = Path(from_dir) / name
        if not path.is_file():
            raise DataError(f"--from {from_dir}: no {name} there (download it from {a.url})")
        say(f"checking {path}")
        got = sha256_of(path)
        if got != a.sha256:
            raise DataError(f"{path}: SHA-256 {got} does not match the published {a.sha256} ({CHECKSUM_SOURCE}); "
                            f"the file is damaged or another version: download it again from {a.url}")
        return path
    dest = out / "archives" / name
    if dest.exists():
        if sha256_of(dest) == a.sha256:
            return dest
        log(f"{dest} does not match its SHA-256: deleted, downloading it again")
        dest.unlink()
    url = f"{url_base.rstrip('/')}/{name}" if url_base else a.url
    say(f"downloading {url} ({a.size / 2**20:,.0f} MiB)")
    try:
        return download(url, dest, a.sha256, a.size, progress=progress, timeout=timeout, retries=retries,
                        offline_hint=OFFLINE_HINT)
    except DownloadError as e:
        raise DownloadError(f"{e} (checksums: {CHECKSUM_SOURCE})" if "SHA-256" in str(e) else str(e)) from None


def _unpack(path: Path, members: set, into: Path, progress: bool) -> dict:
    """Stream ``path`` (a .tgz) once and copy the wanted members to files in ``into``: {member: file}."""
    found = {}
    with tarfile.open(path, "r|gz") as tar, tqdm(desc=f"unpacking {path.name}", unit="B", unit_scale=True,
                                                 disable=not progress, leave=False) as bar:
        for info in tar:
            if info.name not in members or not info.isfile():
                continue
            target = into / info.name.replace("/", "__")
            source = tar.extractfile(info)
            with open(target, "wb") as f:
                for chunk in iter(lambda: source.read(1 << 20), b""):
                    f.write(chunk)
                    bar.update(len(chunk))
            found[info.name] = target
    missing = sorted(members - set(found))
    if missing:
        raise DataError(f"{path}: no member {', '.join(missing)}; is this the right archive?")
    return found


def _lines(path: Path, repaired: list):
    """The lines of a text file as str, without line endings; invalid UTF-8 is replaced (and counted)."""
    with open(path, "rb") as f:
        for raw in f:
            raw = raw.rstrip(b"\r\n")
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError:
                repaired[0] += 1
                yield raw.decode("utf-8", errors="replace")


def _build(partial: Path, paths: dict, archives: dict, corpora: tuple, progress: bool, say) -> dict:
    """Unpack the corpora and write the six files into ``partial``; the manifest (not yet written)."""
    members_dir = partial / "members"
    members_dir.mkdir()
    files = {}
    for name in archives:
        wanted = {getattr(c, lang) for c in corpora if c.archive == name for lang in LANGUAGES}
        if wanted:
            say(f"unpacking {name}")
            files.update(_unpack(paths[name], wanted, members_dir, progress))
    repaired = [0]
    outputs = {f"{split}.{lang}": open(partial / f"{split}.{lang}", "w", encoding="utf-8", newline="\n")
               for split in SPLITS for lang in LANGUAGES}
    counts = {}
    try:
        for c in corpora:
            sides = {}
            for lang in LANGUAGES:
                member = files[getattr(c, lang)]  # an SGM test set is small: read whole; text is streamed
                lines = read_sgm(member) if member.name.lower().endswith(".sgm") else _lines(member, repaired)
                out = outputs[f"{c.split}.{lang}"]
                n = 0
                for n, line in enumerate(lines, start=1):
                    out.write(line + "\n")
                sides[lang] = n
            if sides["en"] != sides["de"]:
                raise DataError(f"{c.name}: {c.en} has {sides['en']:,} lines but {c.de} has {sides['de']:,}")
            counts[c.name] = {"split": c.split, "archive": c.archive, "members": [c.en, c.de], "lines": sides["en"]}
            (files[c.en]).unlink()
            (files[c.de]).unlink()
    finally:
        for f in outputs.values():
            f.close()
    shutil.rmtree(members_dir)
    manifest = {"dataset": "wmt14", "languages": list(LANGUAGES),
                "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "files": {}, "corpora": counts, "lines_with_invalid_utf8_replaced": repaired[0],
                "archives": {n: {"url": a.url, "bytes": a.size, "sha256": a.sha256} for n, a in archives.items()},
                "checksums_from": CHECKSUM_SOURCE}
    for name in outputs:
        path = partial / name
        manifest["files"][name] = {"lines": sum(c["lines"] for c in counts.values() if c["split"] == name.split(".")[0]),
                                   "bytes": path.stat().st_size, "sha256": sha256_of(path)}
    return manifest
