"""What a setting may hold, declared once: the kinds that parse and check the command line's
flags (:mod:`transformer.flags`), the settings given in Python (``TrainSettings``,
``TransformerConfig``) and the environment variables (:mod:`minitensor.environment`).

A kind parses a setting's text (as argparse's ``type=``), checks a value given in Python,
describes itself for ``--help``, and is what the command-line fuzzer of the test suite draws
values from. Every message has one shape, ``--flag must be <description>, got <value>``::

    Whole(1)                      a whole number >= 1
    Whole(1, 64)                  a whole number in [1, 64]
    Real(0, 1, high_open=True)    a finite number in [0, 1)
    Real(0, low_open=True)        a finite number > 0
    Boolean()                     true or false, nothing else
    Choice(("fp32", "bf16"))      one of the names
    Text("folder")                a non-empty string; what it names is checked by the command

Floats are finite unless a kind says otherwise: ``nan`` and ``inf`` are refused where they are
parsed, not found later inside a computation.
"""
from __future__ import annotations

import argparse
import math
import re
from dataclasses import dataclass


_WHOLE = re.compile(r"[+-]?[0-9]+")
_REAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


class FlagError(ValueError):
    """A value outside its declared kind; the message names the setting (a flag, a variable), the
    kind and the value."""


@dataclass(frozen=True)
class Kind:
    """The common part of every kind: parse (for argparse), check (for Python values)."""

    def parse(self, text: str):  # pragma: no cover - interface
        raise NotImplementedError

    def ok(self, value) -> bool:  # pragma: no cover - interface
        raise NotImplementedError

    def describe(self) -> str:  # pragma: no cover - interface
        raise NotImplementedError

    def check(self, flag: str, value) -> None:
        """Raise :class:`FlagError` unless ``value`` is of this kind."""
        if not self.ok(value):
            raise FlagError(f"{flag} must be {self.describe()}, got {_shown(value)}")

    def __call__(self, text: str):
        """argparse's ``type=``: the value, or an error argparse reports with the flag's name."""
        try:
            value = self.parse(text)
        except (ValueError, OverflowError):
            value = None
        if value is None or not self.ok(value):
            shown = text if text and text == text.strip() else repr(text)
            raise argparse.ArgumentTypeError(f"must be {self.describe()}, got {shown}")
        return value


def _shown(value) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def _bound(x) -> str:
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e16:
        return str(int(x))
    return f"{x:g}" if isinstance(x, float) else str(x)


@dataclass(frozen=True)
class Whole(Kind):
    """A whole number in [low, high] (no upper bound when ``high`` is None)."""

    low: int = 1
    high: int | None = None

    def parse(self, text: str) -> int:
        if not _WHOLE.fullmatch(text):  # int() would also take "1_000" and " 12 "
            raise ValueError(text)
        return int(text)

    def ok(self, value) -> bool:
        return (isinstance(value, int) and not isinstance(value, bool) and value >= self.low
                and (self.high is None or value <= self.high))

    def describe(self) -> str:
        if self.high is None:
            return f"a whole number >= {self.low}"
        return f"a whole number in [{self.low}, {self.high}]"


@dataclass(frozen=True)
class Real(Kind):
    """A number between ``low`` and ``high`` (each end open or closed), finite unless
    ``finite=False``; a missing end is unbounded."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    finite: bool = True

    def parse(self, text: str) -> float:
        if not (_REAL.fullmatch(text) or text.lower().lstrip("+-") in ("nan", "inf", "infinity")):
            raise ValueError(text)  # float() would also take "1_0" and " 1 "
        return float(text)

    def ok(self, value) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if math.isnan(value) or (self.finite and math.isinf(value)):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def describe(self) -> str:
        what = "a finite number" if self.finite else "a number"
        if self.low is not None and self.high is not None:
            return (f"{what} in {'(' if self.low_open else '['}{_bound(self.low)}, {_bound(self.high)}"
                    f"{')' if self.high_open else ']'}")
        if self.low is not None:
            return f"{what} {'>' if self.low_open else '>='} {_bound(self.low)}"
        if self.high is not None:
            return f"{what} {'<' if self.high_open else '<='} {_bound(self.high)}"
        return what


@dataclass(frozen=True)
class Boolean(Kind):
    """``true`` or ``false``, as written; ``yes``, ``1``, ``True`` or ``2`` are refused, not guessed at."""

    def parse(self, text: str) -> bool | None:
        return {"true": True, "false": False}.get(text)

    def ok(self, value) -> bool:
        return isinstance(value, bool)

    def describe(self) -> str:
        return "true or false"


@dataclass(frozen=True)
class Choice(Kind):
    """One of a fixed set of names."""

    names: tuple = ()

    def parse(self, text: str) -> str:
        return text

    def ok(self, value) -> bool:
        return value in self.names

    def describe(self) -> str:
        return "one of " + ", ".join(map(str, self.names))


@dataclass(frozen=True)
class Text(Kind):
    """A non-empty string: a file, folder or name, which the command itself checks (it knows
    whether the file must exist). ``role`` says what it names: "file", "new file", "folder",
    "run", "name"."""

    role: str = "name"

    def parse(self, text: str) -> str:
        return text

    def ok(self, value) -> bool:
        return isinstance(value, str) and value.strip() != "" and "\0" not in value

    def describe(self) -> str:
        return f"a {self.role} (a non-empty string)"
