"""Checkpoints: one ``.npz`` per save, loadable with ``allow_pickle=False``.

Contents: ``model/<name>`` arrays (a weight shared under several names is stored once, the
other names recorded as aliases), ``optim/<i>/<key>`` arrays (Adam moments), and ``meta``:
a JSON string with the kind, the step, optimizer scalars, RNG state, model config, vocabulary
hash and anything the caller adds.

A checkpoint says what it is: ``meta["kind"]`` is "training" (weights and optimizer state:
``--resume`` continues from it), "best" (the weights of the best validation so far),
"average" (an average of checkpoints) or "weights" (saved by a script). Its step and its run's
identity are inside it too, so a file's name is only a name: :func:`step_checkpoints` orders a
run's ``checkpoint_<step>.npz`` files by the step stored in them, and leaves out a file under
that name that is not a training checkpoint. Writes go to a temporary file in the same directory that is then
renamed over the target, so a crash never leaves a half-written checkpoint under a checkpoint's
name. A process killed mid-write (SIGKILL, power loss) can leave its temporary file behind;
:func:`transformer.files.remove_stale` deletes those, and resuming a run calls it. A failed write
(a full disk, a read-only folder) removes its temporary file and leaves the checkpoints
already there as they were.

``meta["sha256"]`` is a hash of every array (name, dtype, shape and bytes), checked on load:
a truncated, unreadable or altered file raises :class:`CheckpointError` naming the file and
what is wrong, and :func:`newest_loadable` skips such files, saying why. Checkpoints written
before the hash existed load without the check.
"""
from __future__ import annotations

import hashlib
import json
import re
import tokenize
import zipfile
import zlib
from pathlib import Path
from typing import Sequence

import numpy as np

from minitensor import backend

from .config import TransformerConfig
from .files import Output


class CheckpointError(ValueError):
    """A checkpoint file cannot be used: truncated, unreadable, or not what its hash says."""


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (a full disk, a read-only folder); nothing was replaced."""


def arrays_sha256(arrays: dict) -> str:
    """A hash of named arrays: each name, dtype, shape and the bytes, in name order."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.data if a.size else b"")
    return h.hexdigest()


KINDS = ("training", "best", "average", "weights")


def save_checkpoint(path: str | Path, model, optimizer=None, meta: dict | None = None, kind: str | None = None) -> Path:
    """Write model (and optimizer) state plus ``meta`` to ``path`` atomically
    (:class:`transformer.files.Output`). ``kind`` (one of :data:`KINDS`) defaults to "training"
    with an optimizer and "weights" without."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with Output(path, binary=True) as f:
            write_checkpoint(f, model, optimizer, meta, kind)
    except OSError as e:
        raise CheckpointWriteError(f"could not write the checkpoint {path}: {e.strerror or e}; the checkpoints "
                                   f"already in {path.parent} are unchanged") from e
    return path


def write_checkpoint(f, model, optimizer=None, meta: dict | None = None, kind: str | None = None) -> None:
    """The checkpoint of ``model`` (and ``optimizer``) and ``meta``, written to the open binary file ``f``."""
    kind = kind or ("training" if optimizer is not None else "weights")
    if kind not in KINDS:
        raise ValueError(f"save_checkpoint: kind must be one of {', '.join(KINDS)}, got {kind!r}")
    arrays, aliases, seen = {}, {}, {}
    for name, t in model.state_dict().items():
        key = id(t.data)
        if key in seen:
            aliases[name] = seen[key]
            continue
        seen[key] = name
        arrays["model/" + name] = backend.to_numpy(t.data)
    info = dict(meta or {})
    info["kind"] = kind
    info["aliases"] = aliases
    if optimizer is not None:
        sd = optimizer.state_dict()
        info["optimizer"] = {"steps": sd["steps"], "hyper": sd["hyper"], "n_params": len(sd["state"])}
        for i, state in enumerate(sd["state"]):
            for k, v in state.items():
                arrays[f"optim/{i}/{k}"] = v
    info["sha256"] = arrays_sha256(arrays)
    arrays["meta"] = np.array(json.dumps(info, allow_nan=False))
    np.savez(f, **arrays)


def _checkpoint_file(path: str | Path) -> Path:
    """``path``, if it can be a checkpoint: an existing file that starts as a .npz (zip) file
    does (a damaged checkpoint still does; a tokenizer model or a text file does not)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such checkpoint")
    if path.is_dir():
        raise CheckpointError(f"{path} is a directory, not a checkpoint (a .npz file written by train or average)")
    with open(path, "rb") as f:
        head = f.read(4)
    if head != b"PK\x03\x04" and path.stat().st_size >= 4:
        raise CheckpointError(f"{path} is not a checkpoint (a .npz file written by train or average)")
    return path


def _meta_of(z, path: Path) -> dict:
    """The metadata of an open .npz; a .npz without it is some other program's file, not a damaged checkpoint."""
    if "meta" not in z.files:
        raise CheckpointError(f"{path} is a .npz file but not a checkpoint of this tool (it has no metadata)")
    meta = json.loads(str(z["meta"]))
    if not isinstance(meta, dict):
        raise CheckpointError(f"{path} is a .npz file but not a checkpoint of this tool (its metadata is not a record)")
    return meta


# what NumPy raises on a damaged .npz or .npy (checkpoints, the id caches): a broken zip or
# stream, a missing member, an array header that no longer parses (a flipped byte: SyntaxError,
# TokenError), or one that claims more memory than there is
UNREADABLE = (zipfile.BadZipFile, zlib.error, EOFError, KeyError, ValueError, OSError, SyntaxError,
              tokenize.TokenError, MemoryError)


def read_meta(path: str | Path) -> dict:
    """A checkpoint's ``meta`` alone (kind, step, settings, config), without reading or checking
    its arrays; raises :class:`CheckpointError` when it cannot be read."""
    path = _checkpoint_file(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            return _meta_of(z, path)
    except UNREADABLE as e:
        if isinstance(e, CheckpointError):
            raise
        raise CheckpointError(f"{path} is damaged and cannot be read ({type(e).__name__}: {e})") from e


def model_config(meta: dict, path: str | Path) -> TransformerConfig:
    """The :class:`~transformer.config.TransformerConfig` a checkpoint's weights were built with;
    :class:`CheckpointError` naming ``path`` when its metadata does not hold one."""
    try:
        return TransformerConfig.from_dict(meta["config"])
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise CheckpointError(f"{path} is damaged: its metadata holds no model configuration ({type(e).__name__}: "
                              f"{e})") from None


def kind_of(meta: dict) -> str:
    """A checkpoint's kind (:data:`KINDS`); files written before kinds were recorded: "training"
    when they hold optimizer state, else "weights"."""
    return meta.get("kind") or ("training" if "optimizer" in meta else "weights")


def load_checkpoint(path: str | Path) -> dict:
    """{"model": {name: array} (aliases expanded), "optimizer": state_dict or None, "meta": dict}.

    Raises :class:`CheckpointError` naming ``path`` when the file is truncated, unreadable,
    or its arrays do not match the hash written with them.
    """
    path = _checkpoint_file(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = _meta_of(z, path)
            stored = {k: z[k] for k in z.files if k != "meta"}
    except UNREADABLE as e:
        if isinstance(e, CheckpointError):
            raise
        raise CheckpointError(f"{path} is damaged and cannot be read ({type(e).__name__}: {e}); "
                              "it may be truncated by an interrupted copy or write") from e
    meta["kind"] = kind_of(meta)
    expected = meta.pop("sha256", None)
    if expected is not None and arrays_sha256(stored) != expected:
        raise CheckpointError(f"{path} is damaged: its arrays do not match the hash written with them")
    try:
        return {**_unpack(stored, meta), "meta": meta}
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:  # the metadata was altered
        raise CheckpointError(f"{path} is damaged: its metadata does not describe its arrays "
                              f"({type(e).__name__}: {e})") from e


def _unpack(stored: dict, meta: dict) -> dict:
    """The model's weights (aliases expanded) and the optimizer's state from a checkpoint's arrays."""
    model = {k[len("model/"):]: v for k, v in stored.items() if k.startswith("model/")}
    optim_arrays = {k: v for k, v in stored.items() if k.startswith("optim/")}
    for alias, name in meta.pop("aliases", {}).items():
        model[alias] = model[name]
    optimizer = None
    if "optimizer" in meta:
        o = meta.pop("optimizer")
        state = [{} for _ in range(o["n_params"])]
        for k, v in optim_arrays.items():
            _, i, name = k.split("/", 2)
            state[int(i)][name] = v
        optimizer = {"steps": o["steps"], "hyper": o["hyper"], "state": state}
    return {"model": model, "optimizer": optimizer}


def newest_loadable(paths: Sequence[str | Path], warn=None, refuse=None) -> tuple[dict, Path]:
    """(checkpoint, path) of the newest of ``paths`` (oldest first) that loads.

    ``refuse``, when given, is a function of a loaded checkpoint that returns why it may not be
    used here (another vocabulary, say), or None. Each file passed over, damaged or refused,
    is reported through ``warn`` (a function of one string) with the reason, so that a caller
    can say which checkpoint it skipped and why; when none is left, :class:`CheckpointError`
    says so.
    """
    paths = [Path(p) for p in paths]
    for p in reversed(paths):
        try:
            ck = load_checkpoint(p)
            reason = refuse(ck) if refuse is not None else None
            if reason is None:
                return ck, p
        except CheckpointError as e:
            reason = str(e)
        if warn is not None:
            warn(f"skipping {p.name}: {reason}")
    raise CheckpointError(f"{paths[-1].parent if paths else '.'}: none of the {len(paths)} checkpoints "
                          "can be used (see above)")


def average_checkpoints(paths: Sequence[str | Path]) -> dict:
    """The element-wise mean of the model weights in ``paths`` (Section 6.1 averages the last 5 or 20).

    Returns a checkpoint dict like :func:`load_checkpoint` (meta from the last path, no
    optimizer). All checkpoints must hold the same names and shapes.
    """
    if not paths:
        raise ValueError("average_checkpoints: no checkpoints given")
    total, first_names, last = None, None, None
    for p in paths:
        ck = load_checkpoint(p)
        names = sorted(ck["model"])
        if total is None:
            total = {k: v.astype(np.float64) for k, v in ck["model"].items()}
            first_names = names
        else:
            if names != first_names:
                raise ValueError(f"average_checkpoints: {p} holds different weights from {paths[0]}")
            for k, v in ck["model"].items():
                if v.shape != total[k].shape:
                    raise ValueError(f"average_checkpoints: {k} has shape {v.shape} in {p}, {total[k].shape} before")
                total[k] += v
        last = ck
    dtypes = {k: v.dtype for k, v in last["model"].items()}
    model = {k: (v / len(paths)).astype(dtypes[k]) for k, v in total.items()}
    return {"model": model, "optimizer": None, "meta": last["meta"]}


_STEP = re.compile(r"^checkpoint_(\d+)\.npz$")


def step_checkpoints(folder: str | Path, warn=None) -> list[Path]:
    """The step checkpoints among the ``checkpoint_<step>.npz`` files of ``folder``, oldest first
    by the step stored inside each (a name is only a name).

    A file whose metadata cannot be read stays in the list at its name's step, so that loaders
    say why they skip it. An average or a best checkpoint saved under that name is left out.
    ``warn``, when given, hears of both that and a file whose name is not its step.
    """
    found = []
    for p in Path(folder).glob("checkpoint_*.npz") if Path(folder).is_dir() else []:
        if not (m := _STEP.match(p.name)):
            continue
        named = int(m.group(1))
        try:
            meta = read_meta(p)
        except (CheckpointError, FileNotFoundError):
            found.append((named, named, p))
            continue
        kind, step = kind_of(meta), meta.get("step")
        if kind in ("average", "best"):  # written by this tool under other names: not a step of the run
            if warn is not None:
                warn(f"note: {p} holds {'an average of checkpoints' if kind == 'average' else 'the best weights'}, not "
                     "a training checkpoint, though it is named like one: left out")
            continue
        if not isinstance(step, int) or isinstance(step, bool):
            step = named
        elif step != named and warn is not None:
            warn(f"note: {p.name} holds update {step} (its name says {named}): taken as update {step}")
        found.append((step, named, p))
    return [p for _, _, p in sorted(found)]


def prune_checkpoints(folder: str | Path, keep: int, ours=None) -> list[Path]:
    """Delete all but the newest ``keep`` of the run's training checkpoints (by their stored
    steps); returns the deleted paths. ``ours``, when given, is a function of a checkpoint's
    metadata that says whether it belongs to the run being pruned: another run's checkpoint, or
    one that cannot be read, is neither deleted nor counted among the ``keep``."""
    def deletable(p: Path) -> bool:
        try:
            return ours is None or ours(read_meta(p))
        except CheckpointError:
            return False

    own = [p for p in step_checkpoints(folder) if deletable(p)]
    old = own[:-keep] if keep > 0 else own
    for p in old:
        p.unlink()
    return old
