"""Every module of the installed packages imports with only the core dependencies
(numpy, sentencepiece, sacrebleu, matplotlib, tqdm): the optional ones (CuPy, mpi4py,
ml_dtypes, the test and lesson tools) are hidden, as on a plain ``pip install``."""
import subprocess
import sys
import textwrap

OPTIONAL = ["cupy", "cupyx", "cupy_backends", "fastrlock", "mpi4py", "ml_dtypes", "hypothesis", "pytest", "torch",
            "jupytext", "jupyterlab", "ipykernel", "nbclient", "nbconvert", "latex2mathml", "playwright", "lessonkit",
            "tests", "cuda", "nvidia"]

SCRIPT = textwrap.dedent("""
    import importlib, importlib.abc, pkgutil, sys
    HIDDEN = set(sys.argv[1].split(","))

    class Hide(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] in HIDDEN:
                raise ModuleNotFoundError(f"No module named {name!r} (hidden: not a core dependency)", name=name)
            return None

    sys.meta_path.insert(0, Hide())
    names = []
    for package in ("minitensor", "transformer"):
        root = importlib.import_module(package)
        names += [package] + [m.name for m in pkgutil.walk_packages(root.__path__, package + ".")
                              if not m.name.endswith("__main__")]
    for name in names:
        importlib.import_module(name)
    try:  # the one module made for an optional package says which, when used
        importlib.import_module("minitensor.testing").shapes()
        raise SystemExit("minitensor.testing.shapes() ran without hypothesis")
    except ImportError as e:
        assert "pip install hypothesis" in str(e), e
    print(len(names))
""")


def test_every_module_imports_with_the_core_dependencies_only():
    out = subprocess.run([sys.executable, "-c", SCRIPT, ",".join(OPTIONAL)], capture_output=True, text=True,
                         cwd="/")
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.split()[-1]) > 40  # every module was walked, not just the two packages


def test_the_hiding_works_a_module_that_needs_an_optional_package_fails():
    """The same harness refuses a module that imports hypothesis at the top (as the lesson
    grader once did from inside the package), so the test above can fail."""
    probe = SCRIPT.replace('for package in ("minitensor", "transformer"):', 'import hypothesis\nfor package in ():')
    out = subprocess.run([sys.executable, "-c", probe, ",".join(OPTIONAL)], capture_output=True, text=True, cwd="/")
    assert out.returncode != 0 and "hidden: not a core dependency" in out.stderr
