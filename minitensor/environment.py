"""The environment variables the project reads, each declared once: its name, its kind
(:mod:`minitensor.kinds`), its default and what it means.

The engine declares its own below; the command line adds its own (:mod:`transformer.flags`).
:func:`value` reads one, parsed by its kind: unset or empty, it is the default; set to what its
kind refuses, it raises :class:`VariableError` naming the variable, its kind and the value
(``MINITENSOR_THREADS must be a whole number in [1, 4096], got '0'``). Nothing reads a variable
at import, so a bad value never stops ``import minitensor``: the command line checks every
declared variable before any work (:func:`check`), and the engine's settings are read where
they are first used.
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from .kinds import Choice, Kind, Real, Text, Whole

SWITCH = Choice(("0", "1"))


class VariableError(ValueError):
    """An environment variable set to a value its kind refuses."""


@dataclass(frozen=True)
class Variable:
    name: str
    kind: Kind
    default: object  # the value when unset or empty (None: nothing is set)
    meaning: str


VARIABLES: dict[str, Variable] = {}


def declare(name: str, kind: Kind, default, meaning: str) -> Variable:
    """Add a variable to :data:`VARIABLES` (once: a second declaration of a name is a mistake)."""
    if name in VARIABLES:
        raise ValueError(f"{name} is declared twice")
    VARIABLES[name] = Variable(name, kind, default, meaning)
    return VARIABLES[name]


def value(name: str):
    """The value of the declared variable ``name``: parsed by its kind, or its default when unset
    or empty; :class:`VariableError` when its kind refuses what it is set to."""
    variable = VARIABLES[name]
    text = os.environ.get(name, "")
    if not text.strip():
        return variable.default
    try:
        return variable.kind(text.strip())
    except argparse.ArgumentTypeError as e:
        shown = text if text == text.strip() and text.isprintable() else repr(text)
        raise VariableError(f"{name} {str(e).rsplit(', got ', 1)[0]}, got {shown}") from None


def check() -> None:
    """Read every declared variable: the first set to a value its kind refuses raises
    :class:`VariableError`. The command line calls it before any work."""
    for name in VARIABLES:
        value(name)


def switch(name: str) -> bool:
    """A declared 0-or-1 variable as a bool."""
    return value(name) == "1"


declare("MINITENSOR_THREADS", Whole(1, 4096), None,
        "threads for the engine's parallel loops and the BLAS (default: one per usable core)")
declare("MINITENSOR_ROUTES", Choice(("on", "off")), "on",
        "off: every op runs its reference code, none of the speed layer's faster routes (minitensor.routes)")
declare("MINITENSOR_KERNELS", SWITCH, "1", "0: the reference ops on CuPy arrays, not the hand-written CUDA kernels")
declare("MINITENSOR_ATTENTION", Choice(("auto", "flash", "fused")), "auto",
        "attention's path on a GPU: the flash kernels, cuBLAS products around the fused softmax, or chosen by length")
declare("MINITENSOR_WGMMA", SWITCH, "0", "1: the 16-bit attention kernels' products as Hopper's warpgroup products")
declare("MINITENSOR_ONE_PASS_BACKWARD", SWITCH, "0", "1: attention's deterministic backward in one pass")
declare("MINITENSOR_CUDA", Choice(("emulate",)), None,
        "emulate: the ops' kernel routes on NumPy arrays, through the CPU emulator of CUDA")
declare("MINITENSOR_EMULATOR_CHECK", Choice(("race", "memory")), None,
        "the emulator's strict checks: a race tracker, or AddressSanitizer (a subprocess per launch)")
declare("MINITENSOR_CACHE", Text("folder"), None,
        "the project's cache: downloads (multi30k/) and compiled kernels (emulator/); default: "
        "$XDG_CACHE_HOME/minitensor, else ~/.cache/minitensor (%LOCALAPPDATA%\\minitensor on Windows)")
declare("MINITENSOR_EMULATOR_CACHE", Text("folder"), None,
        "where the emulator keeps compiled kernels (default: the cache's emulator/, see MINITENSOR_CACHE)")
declare("MINITENSOR_KEEP_FREED_MEMORY", SWITCH, "1",
        "0: the programs that train leave glibc's malloc thresholds as they are (1: they raise them at their "
        "start, so freed arrays are reused, not unmapped)")
declare("MINITENSOR_DIST_TIMEOUT", Real(0, low_open=True), 600.0,
        "seconds a distributed run waits for its other ranks before it gives up")


def cache_folder() -> Path:
    """Where the project keeps what it can fetch or build again (downloads, compiled kernels),
    one rule for all of it: ``$MINITENSOR_CACHE``; else ``$XDG_CACHE_HOME/minitensor`` (the XDG
    rule); else ``%LOCALAPPDATA%\\minitensor`` on Windows and ``~/.cache/minitensor`` elsewhere."""
    if (folder := value("MINITENSOR_CACHE")) is not None:
        return Path(folder)
    if base := os.environ.get("XDG_CACHE_HOME", "").strip():
        return Path(base) / "minitensor"
    if os.name == "nt" and (local := os.environ.get("LOCALAPPDATA", "").strip()):
        return Path(local) / "minitensor"
    return Path.home() / ".cache" / "minitensor"

