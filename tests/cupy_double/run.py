"""Run a module or script with the CuPy double in place of CuPy, from the repository root.

    python -m tests.cupy_double.run -m transformer train ... --device cuda
    python -m tests.cupy_double.run lessons/23_gpu_backend.py
    mpiexec -n 2 python -m tests.cupy_double.run --devices 2 -m transformer train ... --distributed --device cuda

``--devices N`` sets how many devices the double shows (default: the ranks of an MPI launch,
else 1); with MPI, rank r selects device r as a GPU run would.
"""
from __future__ import annotations

import os
import runpy
import sys


def main(argv: list[str]) -> None:
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return
    devices = None
    if argv[:1] == ["--devices"]:
        devices, argv = int(argv[1]), argv[2:]
    if devices is None:
        devices = int(os.environ.get("OMPI_COMM_WORLD_SIZE") or os.environ.get("PMI_SIZE") or 1)
    from tests.cupy_double import install  # noqa: PLC0415

    install(devices=devices)
    if argv[:1] == ["-m"]:
        sys.argv = [argv[1]] + argv[2:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    elif argv and os.path.isfile(argv[0]):
        sys.argv = argv
        sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
        runpy.run_path(argv[0], run_name="__main__")
    else:
        raise SystemExit(f"no script {argv[0]!r}: give a script's path or -m and a module\n\n{__doc__}" if argv
                         else __doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
