"""Write ``spec.json``, what the CuPy double may offer, read from the real CuPy.

    pip install -e ".[nvrtc]"        # cupy-cuda13x: it imports without a GPU
    python tests/cupy_double/make_spec.py --cupy-source /path/to/cupy.git [--tag v14.2.0]

From the installed package: every public name of the modules the project touches and what
kind of thing it is, each ufunc's loop table (``.types``), ``ndarray``'s attributes and the
keywords its methods take, ``RandomState``'s methods and the Python-level signatures. NCCL and
cuRAND (and cuBLAS) cannot be loaded without their libraries, so their names come from CuPy's source at ``--tag``
(``cupy_backends/cuda/libs/{nccl,curand,cublas}.{pyx,pxd}``, read with ``git show``).
"""
from __future__ import annotations

import argparse
import inspect
import json
import re
import subprocess
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODULES = ("cupy", "cupy.cuda", "cupy.cuda.runtime", "cupy.random", "cupyx", "cupyx.profiler",
           "cupy._core._routines_linalg", "cupy.linalg", "cupy.fft")


def kind_of(obj) -> str:
    import numpy as np  # noqa: PLC0415

    t = type(obj).__name__
    if t == "ufunc" and type(obj).__module__.startswith("cupy"):
        return "ufunc"
    if inspect.ismodule(obj):
        return "module"
    if isinstance(obj, type):
        if issubclass(obj, np.generic):
            return "scalar type"
        return "exception" if issubclass(obj, BaseException) else "class"
    if callable(obj):
        return "function"
    if isinstance(obj, (bool, int, float, str)) or obj is None:
        return "constant"
    return "object"


def signature(obj) -> str | None:
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return None


def method_keywords(cls) -> dict:
    """{method: the keyword arguments it takes} for a Cython class, read from the signature Cython
    embeds as the first line of each docstring (``inspect`` cannot read a Cython method's):
    ``_ndarray_base.max(self, axis=None, out=None, keepdims=False) -> _ndarray_base`` gives
    ``["axis", "out", "keepdims"]``. A typed parameter (``int axis=-1``) is named by its last
    word; ``*shape`` and a bare ``*`` take no keyword."""
    out = {}
    for n in dir(cls):
        first = (getattr(getattr(cls, n), "__doc__", None) or "").split("\n", 1)[0]
        m = None if n.startswith("_") else re.match(rf"\w+\.{n}\(self(?:, )?(.*)\)(?: ->.*)?$", first)
        if m:
            params = [p.split("=")[0].split()[-1] for p in m.group(1).split(",") if p.strip()]
            out[n] = [p for p in params if not p.startswith("*")]
    return out


def numpy_modules(name: str) -> list:
    import numpy as np  # noqa: PLC0415

    return [np] + ([np.linalg] if name == "cupy.linalg" else []) + ([np.fft] if name == "cupy.fft" else [])


def module_spec(name: str) -> dict:
    import importlib  # noqa: PLC0415

    mod = importlib.import_module(name)
    names = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                # numpy.bytes and friends warn when looked up
        for n in sorted(dir(mod)):
            entry = _entry(name, mod, n)
            if entry is not None:
                names[n] = entry
    return names


def _entry(name: str, mod, n: str) -> dict | None:
    """What the spec says of ``mod.n``, or None for a private name."""
    if n.startswith("__"):
        return None
    if n.startswith("_") and name != "cupy._core._routines_linalg":
        return None
    obj = getattr(mod, n)
    entry = {"kind": kind_of(obj)}
    if not inspect.ismodule(obj) and any(getattr(m, n, None) is obj for m in numpy_modules(name)):
        entry["is_numpy"] = True                 # NumPy's own object (cupy.finfo is numpy.finfo)
    if entry["kind"] == "constant":
        entry["value"] = obj
    if entry["kind"] == "scalar type":
        entry["numpy"] = obj.__name__
    if entry["kind"] in ("function", "class") and (sig := signature(obj)) is not None:
        entry["signature"] = sig
    if entry["kind"] == "ufunc":
        entry.update(nin=obj.nin, nout=obj.nout, types=list(obj.types))
    return entry


def from_source(git_dir: str, tag: str) -> dict:
    """nccl, curand and cublas: enum constants from the .pxd files, functions, classes and the
    communicator's methods and cuBLAS's functions (with their Cython argument types) from the .pyx
    files."""
    def show(path):
        return subprocess.run(["git", "-C", git_dir, "show", f"{tag}:{path}"], check=True,
                              capture_output=True, text=True).stdout

    out = {}
    for lib in ("nccl", "curand", "cublas"):
        names = {}
        pxd, pyx = show(f"cupy_backends/cuda/libs/{lib}.pxd"), show(f"cupy_backends/cuda/libs/{lib}.pyx")
        for block in re.findall(r"cpdef enum:\n((?:    .*\n|\n)+)", pxd):
            for n, v in re.findall(r"^    ([A-Z][A-Z0-9_]*) = (-?\d+)", block, re.M):
                names[n] = {"kind": "constant", "value": int(v)}
        for n in re.findall(r"^(?:cpdef (?:inline )?(?:\w+ )?|def )([a-zA-Z]\w*)\(", pyx, re.M):
            names[n] = {"kind": "function"}
        for n in re.findall(r"^(?:cdef )?class ([A-Za-z]\w*)", pyx, re.M):
            names[n] = {"kind": "exception" if n.endswith("Error") else "class"}
        if lib == "nccl":
            body = pyx[pyx.index("cdef class NcclCommunicator"):]
            end = re.search(r"^\S", body[body.index("\n"):], re.M)     # the class runs to the next top-level line
            body = body if end is None else body[:body.index("\n") + end.start()]
            methods = {}
            for m, args in re.findall(r"^    (?:cpdef|def) (\w+)\(([^)]*)\)", body, re.M):
                params = [a.strip() for a in args.replace("\n", " ").split(",") if a.strip()]
                methods[m] = [p.split("=")[0].strip() for p in params if p not in ("self",)]
            init = re.search(r"def __init__\(self, ([^)]*)\)", body)
            methods["__init__"] = [p.split("=")[0].strip() for p in init.group(1).split(",")]
            names["NcclCommunicator"]["methods"] = methods
            names["available"] = {"kind": "constant", "value": True}
        if lib == "cublas":                      # the typed parameters of each function, for the double's checks
            for n, args in re.findall(r"^cpdef (?:\w+ )?(\w+)\(([^)]*)\)", pyx, re.M):
                if n in names:
                    names[n]["params"] = [" ".join(a.split("=")[0].split()) for a in args.replace("\n", " ").split(",")
                                          if a.strip()]
        out["cupy_backends.cuda.libs.cublas" if lib == "cublas" else f"cupy.cuda.{lib}"] = names
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cupy-source", required=True, help="a git clone of cupy/cupy (for nccl and curand)")
    p.add_argument("--tag", default=None, help="the tag to read there (default: v + the installed version)")
    p.add_argument("--out", type=Path, default=HERE / "spec.json")
    args = p.parse_args(argv)
    warnings.simplefilter("ignore")
    import cupy  # noqa: PLC0415

    tag = args.tag or f"v{cupy.__version__}"
    spec = {"cupy_version": cupy.__version__, "source_tag": tag,
            "modules": {name: module_spec(name) for name in MODULES}}
    spec["modules"].update(from_source(args.cupy_source, tag))
    spec["ndarray"] = sorted(n for n in dir(cupy.ndarray) if not n.startswith("_") or n.startswith("__"))
    spec["ndarray_keywords"] = method_keywords(cupy.ndarray)
    spec["RandomState"] = sorted(n for n in dir(cupy.random.RandomState) if not n.startswith("_"))
    spec["Device"] = sorted(n for n in dir(cupy.cuda.Device) if not n.startswith("_"))
    args.out.write_text(json.dumps(spec, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.out}: CuPy {cupy.__version__}, "
          f"{sum(len(v) for v in spec['modules'].values())} names in {len(spec['modules'])} modules")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
