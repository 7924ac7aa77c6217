"""The command line's flags: each parses with its kind (:mod:`minitensor.kinds`: ``Whole``,
``Real``, ``Boolean``, ``Choice``, ``Text``, one declaration of what each setting may hold),
an argparse parser that never abbreviates and reports a usage error in one line, and the
environment variables the command line reads (declared beside the engine's own in
:mod:`minitensor.environment`).
"""
from __future__ import annotations

import argparse
import re

from minitensor import environment
from minitensor.kinds import Boolean, Choice, FlagError, Kind, Real, Text, Whole  # noqa: F401 (the kinds of flags)


def help_text(kind: Kind, text: str = "") -> str:
    """``text`` with the kind appended, as --help shows a flag (a name's choices show in its metavar)."""
    if isinstance(kind, (Text, Choice)):
        return text
    return f"{text}; {kind.describe()}" if text else kind.describe()


class Parser(argparse.ArgumentParser):
    """argparse with no abbreviated flags (``--ov`` is not taken for ``--overwrite``) and each
    usage error as one line in the settings' words, ``error: --beam must be ...``, exit status 2."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.exit(2, f"error: {usage_error(message, self.prog)}\n")


def usage_error(message: str, prog: str) -> str:
    """argparse's complaint in the settings' words: "argument --beam: must be ..." becomes
    "--beam must be ...", followed by where to read more (``prog --help``)."""
    if m := re.match(r"argument (--[\w-]+)(?:/\S+)?: (must be .*)$", message, re.S):
        message = f"{m.group(1)} {m.group(2)}"
    return f"{message} (see {prog} --help)"


class InputError(Exception):
    """Bad usage or input, found before any work: ``error: <message>``, exit status 2."""


# the environment variables the command line reads, beside the engine's (minitensor.environment)
environment.declare("MINITENSOR_DEBUG", environment.SWITCH, "0", "1: every error with its traceback (as --debug)")
environment.declare("MULTI30K_DIR", Text("folder"), None,
                    "a folder holding Multi30k's six files, read instead of the download cache")
