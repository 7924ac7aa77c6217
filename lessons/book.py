"""Build the lessons into a static HTML book.

    python lessons/book.py --out book            # every lesson executed (full mode where its recorded run took < 2.5 min)
    python lessons/book.py --out book --smoke    # every lesson in smoke mode (about two minutes)
    python lessons/book.py --out book --check    # and open every page in Chromium: images, console, math

Each lesson (a py:percent script) is read as a notebook by jupytext, executed top to bottom
by nbclient in a Jupyter kernel (in ``lessons/``, as a notebook opened there would be), and
exported to HTML by nbconvert. A lesson shows its figures inline as it saves them, so they
are part of the cells' output. LaTeX in the prose (``$…$``, ``$$…$$``) is turned into MathML
when the book is built, so pages need no network (and no MathJax); a math font found on the
system is copied into the book so that brackets stretch. Cells tagged ``fold`` (plotting)
are folded under a "show the code" line. ``index.html`` lists the lessons in order with the
paper section each covers, what it teaches and its run time; every page links to the
previous and next lesson, to the lessons that teach what it uses, and to the package files
it imports (copied into the book as highlighted source).

Needs the ``lessons`` extra: ``pip install -e ".[lessons]"``; ``--check`` also needs a
Chromium (Debian: ``apt install chromium``; or set ``CHROMIUM``).
"""
from __future__ import annotations

import argparse
import html
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TEMPLATES = HERE / "book_template"
FULL_MODE_LIMIT_S = 150


# ---------------------------------------------------------------- the lessons
def lessons() -> list[Path]:
    return sorted(HERE.glob("[0-9][0-9]_*.py"))


def syllabus():
    sys.path.insert(0, str(HERE))   # lessonkit lives beside the lessons
    from lessonkit import syllabus as module  # noqa: PLC0415

    return module


def recorded_seconds(number: str) -> float | None:
    path = HERE / "results" / f"{number}.json"
    return json.loads(path.read_text())["seconds"] if path.exists() else None


def package_files(source: str) -> list[Path]:
    """The files of minitensor and transformer that a lesson imports from: the modules it
    names and, for a name imported from a package, the module that defines it."""
    import importlib  # noqa: PLC0415
    import importlib.util  # noqa: PLC0415

    files = set()
    for m in re.finditer(r"^\s*(?:from\s+((?:minitensor|transformer)[\w.]*)\s+import\s+([\w, ]+)|import\s+"
                         r"((?:minitensor|transformer)[\w.]*))", source, re.M):
        base = m.group(3) or m.group(1)
        module = importlib.import_module(base)
        found = [module]
        for name in filter(None, (n.strip() for n in (m.group(2) or "").split(","))):
            obj = getattr(module, name, None)
            if obj is None and hasattr(module, "__path__") and importlib.util.find_spec(f"{base}.{name}") is not None:
                obj = importlib.import_module(f"{base}.{name}")       # a submodule not imported yet
            defining = getattr(obj, "__module__", None) if not hasattr(obj, "__file__") else obj.__name__
            if defining and defining.split(".")[0] in ("minitensor", "transformer"):
                found.append(importlib.import_module(defining))
        files.update(Path(f.__file__) for f in found if getattr(f, "__file__", None))
    return sorted(p for p in files if p.is_relative_to(REPO))


# ---------------------------------------------------------------- math and figures
_MATH = re.compile(r"(`[^`]*`)|\$\$(.+?)\$\$|\$([^$\n]+?)\$", re.S)


def math_to_mathml(markdown: str) -> str:
    """$$…$$ (display) and $…$ (inline) LaTeX to MathML; code spans are left alone."""
    from latex2mathml.converter import convert  # noqa: PLC0415

    def repl(m):
        if m.group(1):
            return m.group(1)
        if m.group(2) is not None:
            return f'\n<div class="math-display">{convert(m.group(2).strip(), display="block")}</div>\n'
        return convert(m.group(3).strip())

    return _MATH.sub(repl, markdown)


# A range of numbers in the prose ("0.64–0.71", "2–3 blocks"), outside code spans. A browser may
# break a line after an en dash; a word joiner (U+2060) on each side of it forbids that.
_RANGE = re.compile(r"(`[^`]*`)|(?<=\d)–(?=\d)")
WORD_JOINER = "\u2060"


def unbreakable_ranges(markdown: str) -> str:
    """Every en dash between two digits glued to them with word joiners, so that no line of the
    book ends inside a range; code spans are left alone."""
    return _RANGE.sub(lambda m: m.group(1) or f"{WORD_JOINER}–{WORD_JOINER}", markdown)


def unprefixed_mathml(page: str) -> str:
    """MathML as browsers read it: nbconvert re-serialises headings (to give them anchors)
    through ElementTree, which writes ``<ns0:math xmlns:ns0="…">``; a prefixed element is not
    MathML to a browser, which then shows the bare letters."""
    page = re.sub(r"<(/?)ns\d+:", r"<\1", page)
    return re.sub(r"xmlns:ns\d+=", "xmlns=", page)


# Raw TeX in a page's visible prose (code excluded): math the build did not turn into MathML.
RAW_TEX = re.compile(r"\$|\\[a-zA-Z]+|[_^]\{")


# In a lesson's markdown, outside code and $…$: a subscript, a superscript or a TeX command
# written as plain text (d_k, W^O, x_{t-1}, \\frac), which would reach the reader raw.
SOURCE_RAW_MATH = re.compile(r"\w_\w|[_^]\{|\^|\\[a-zA-Z]+")


def raw_math_in_sources(files: list[Path] | None = None) -> list[str]:
    """Lines of lesson prose with math that is not inside $…$ (empty: all of it renders)."""
    found = []
    for path in files or lessons():
        for kind, source in syllabus()._cells(path.read_text()):
            if kind != "markdown":
                continue
            # $$…$$ blocks may span lines: blank them out, keeping the line count
            text = re.sub(r"\$\$.*?\$\$", lambda m: "\n" * m.group(0).count("\n"), source, flags=re.S)
            for line, original in zip(text.splitlines(), source.splitlines()):
                prose = re.sub(r"`[^`]*`", "", line)
                # inline math must open and close on one line
                if prose.count("$") % 2 or SOURCE_RAW_MATH.search(re.sub(r"\$[^$]*\$", "", prose)):
                    found.append(f"{path.name}: {original.strip()}")
    return found


def math_font() -> Path | None:
    """A font with an OpenType MATH table (stretchy brackets in MathML), if the system has one."""
    candidates = ["/usr/share/fonts/truetype/dejavu/DejaVuMathTeXGyre.ttf",
                  "/usr/share/texmf/fonts/opentype/public/lm-math/latinmodern-math.otf",
                  "/usr/share/fonts/opentype/stix/STIXMath-Regular.otf",
                  "/Library/Fonts/STIXTwoMath.otf", "C:/Windows/Fonts/cambria.ttc"]
    return next((Path(c) for c in candidates if Path(c).exists()), None)


def link_uses(markdown: str, teaches: dict, current: int, pages: dict) -> str:
    """In a lesson's **Uses:** line, link each concept to the page of the lesson that teaches it."""
    def link(m):
        items = []
        for item in m.group(2).split(","):
            name = item.strip().rstrip(".")
            where = teaches.get(name)
            items.append(item.replace(name, f"[{name}]({pages[where]})") if where and where != current and where in pages
                         else item)
        return m.group(1) + ",".join(items)
    return re.sub(r"(\*\*Uses:\*\*)([^*]*?)(?=\n\s*\n|\Z)", link, markdown, flags=re.S)


# ---------------------------------------------------------------- pages
def nav(items: list[dict], i: int) -> str:
    prev = f'<a href="{items[i - 1]["page"]}">← {html.escape(items[i - 1]["label"])}</a>' if i > 0 else ""
    nxt = f'<a href="{items[i + 1]["page"]}">{html.escape(items[i + 1]["label"])} →</a>' if i + 1 < len(items) else ""
    return f'<span class="prev">{prev}</span><a href="index.html">contents</a><span class="next">{nxt}</span>'


def source_page(path: Path, out: Path) -> str:
    """Write ``path`` as highlighted HTML under out/src/; return its link."""
    from pygments import highlight  # noqa: PLC0415
    from pygments.formatters import HtmlFormatter  # noqa: PLC0415
    from pygments.lexers import PythonLexer  # noqa: PLC0415

    rel = path.relative_to(REPO)
    target = out / "src" / rel.with_suffix(".py.html")
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        formatter = HtmlFormatter(linenos="table", full=True, title=str(rel))
        target.write_text(highlight(path.read_text(), PythonLexer(), formatter))
    return target.relative_to(out).as_posix()


BOOK_CSS = """
.book-nav { display: flex; justify-content: space-between; gap: 1em; padding: 0.6em 1.2em;
            font-family: sans-serif; font-size: 0.95em; border-bottom: 1px solid #ddd; }
.book-nav a { text-decoration: none; }
.book-uses { font-family: sans-serif; font-size: 0.9em; padding: 1em 1.2em; border-top: 1px solid #ddd; }
math { font-family: "Book Math", "DejaVu Math TeX Gyre", "Latin Modern Math", "STIX Two Math", "Cambria Math", math;
       font-size: 1.08em; }
.math-display { text-align: center; margin: 0.9em 0; }
.math-display math { font-size: 1.2em; }
.jp-OutputArea-output pre { word-break: normal !important; overflow-wrap: break-word !important; }
details.book-fold > summary { cursor: pointer; color: #555; font-family: sans-serif; font-size: 0.9em;
                              padding: 0.3em 0 0.3em 5.5em; }
"""


def execute(nb) -> None:
    """Run a notebook in a fresh kernel started in ``lessons/``. The kernel talks over Unix
    sockets in a temporary folder: over TCP, ipykernel prints a warning for every lesson."""
    import tempfile  # noqa: PLC0415

    from jupyter_client.manager import KernelManager  # noqa: PLC0415
    from nbclient import NotebookClient  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as sockets:
        km = KernelManager(kernel_name="python3", transport="ipc", ip=str(Path(sockets) / "kernel"))
        try:
            NotebookClient(nb, km=km, timeout=900, resources={"metadata": {"path": str(HERE)}}).execute()
        finally:
            if km.has_kernel:
                km.shutdown_kernel(now=True)


def build(out: Path, smoke_all: bool = False, only: list[str] | None = None) -> list[dict]:
    """Execute and render the lessons into ``out``; returns what index.html lists."""
    import jupytext  # noqa: PLC0415
    from nbclient.exceptions import CellExecutionError  # noqa: PLC0415
    from nbconvert import HTMLExporter  # noqa: PLC0415

    out.mkdir(parents=True, exist_ok=True)
    figures = (out / "figures").resolve()
    course = syllabus().course()
    pages = {lesson.number: f"{lesson.file.stem}.html" for lesson in course}
    teaches = {c: lesson.number for lesson in course for c in lesson.teaches_concepts}
    items = [{"number": f"{lesson.number:02d}", "lesson": lesson, "file": lesson.file, "page": pages[lesson.number],
              "title": lesson.title, "paper": lesson.paper, "label": f"{lesson.number}. {lesson.title}"}
             for lesson in course if not only or f"{lesson.number:02d}" in {n.zfill(2) for n in only}]
    css = BOOK_CSS
    font = math_font()
    if font is not None:
        (out / "fonts").mkdir(exist_ok=True)
        shutil.copy(font, out / "fonts" / font.name)
        css = f'@font-face {{ font-family: "Book Math"; src: url("fonts/{font.name}"); }}\n' + css
    exporter = HTMLExporter(template_name="book", extra_template_basedirs=[str(TEMPLATES)])
    env = dict(os.environ)
    try:
        for i, item in enumerate(items):
            number = item["number"]
            recorded = recorded_seconds(number)
            smoke = smoke_all or recorded is None or recorded >= FULL_MODE_LIMIT_S
            os.environ.update({"LESSON_OUT": str(figures)})
            os.environ.pop("LESSON_SMOKE", None)
            os.environ.pop("MPLBACKEND", None)
            if smoke:
                os.environ["LESSON_SMOKE"] = "1"
            nb = jupytext.read(item["file"])
            for j, cell in enumerate(nb.cells):
                if cell.cell_type == "markdown":
                    if j == 0:
                        cell.source = link_uses(cell.source, teaches, item["lesson"].number, pages)
                    cell.source = unbreakable_ranges(math_to_mathml(cell.source))
            t0 = time.perf_counter()
            try:
                execute(nb)
            except Exception as e:  # a cell's error, or the kernel lost (it died, or never answered)
                # the page still shows the lesson up to the error, and the later lessons are built
                text = str(e) if isinstance(e, CellExecutionError) else f"{type(e).__name__}: {e}"
                text = re.sub(r"\x1b\[[0-9;]*m", "", text)          # the kernel's traceback is coloured
                item["failed"] = [line for line in text.strip().splitlines() if line.strip()][-1]
                print(f"{item['file'].name} failed in the book's kernel: {item['failed']}", file=sys.stderr, flush=True)
            item["seconds"] = round(time.perf_counter() - t0, 1)
            item["mode"] = "smoke" if smoke else "full"
            outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
            item["figures"] = sum("image/png" in o.get("data", {}) for o in outputs)
            item["printed"] = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
            uses = [(p.relative_to(REPO).as_posix(), source_page(p, out)) for p in package_files(item["file"].read_text())]
            uses_html = ('<div class="book-uses">Package files this lesson uses: '
                         + ", ".join(f'<a href="{link}"><code>{name}</code></a>' for name, link in uses) + "</div>")
            nb.metadata["title"] = item["label"]
            body, _ = exporter.from_notebook_node(nb, resources={"book_nav": nav(items, i), "book_uses": uses_html,
                                                                 "book_css": css})
            (out / item["page"]).write_text(unprefixed_mathml(body))
            print(f"{item['page']}: {item['seconds']} s ({item['mode']}), {item['figures']} figures", flush=True)
    finally:
        os.environ.clear()
        os.environ.update(env)
    for arrays in figures.rglob("*.npz"):  # checkpoints and id caches: a lesson's working files, not the reader's
        arrays.unlink()
    write_index(out, items)
    return items


def write_index(out: Path, items: list[dict]) -> None:
    def teaches(it):
        lesson = it["lesson"]
        return ", ".join([f"<code>{html.escape(n)}</code>" for n in dict.fromkeys(lesson.teaches_names)][:6] +
                         [html.escape(c) for c in lesson.teaches_concepts])

    def failed(it):
        return (f'<div class="failed">failed in this build: {html.escape(it["failed"])}</div>'
                if it.get("failed") else "")

    rows = "\n".join(
        f'<li><a href="{it["page"]}">{html.escape(it["title"])}</a> <span class="time">{it["seconds"]} s '
        f'({it["mode"]} mode)</span><div class="teaches">{teaches(it)}</div>{failed(it)}</li>' for it in items)
    (out / "index.html").write_text(f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>minitensor + transformer: the lessons</title>
<style>body {{ font-family: sans-serif; max-width: 52em; margin: 2em auto; line-height: 1.5; }}
li {{ margin: 0.6em 0; }} .time {{ color: #666; font-size: 0.9em; margin-left: 0.6em; }}
.teaches {{ color: #444; font-size: 0.85em; }} .failed {{ color: #b00020; font-size: 0.9em; }}</style></head>
<body><h1>Attention Is All You Need, one idea at a time</h1>
<p>The lessons of minitensor + transformer, executed. Each page is a lesson run top to bottom: prose, code,
outputs and figures. Read them in order: no lesson uses what a later one teaches. Each title names the sections
of Vaswani et al. (2017) it covers, and under it what the lesson teaches; the times are this build's.</p>
<ol class="lessons">
{rows}
</ol></body></html>
""")


# ---------------------------------------------------------------- the browser check
def chromium() -> str | None:
    return os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


SCREENSHOTS = ("index.html", "08_", "09_", "23_")   # the index, the first equations, the GPU lesson


def check(out: Path, screenshots: Path | None = None) -> list[str]:
    """Open every page in headless Chromium: no broken image, no console error, no math left
    as raw TeX in the prose (``$``, ``_{``, ``^{``, ``\\frac``: code is not prose), no output
    line wider than its box, no line that breaks inside a range of numbers, and the index listing
    the lessons in order. Saves screenshots of the index and of lessons 8, 9 and 23. Returns the
    problems found (empty: all good)."""
    from playwright.sync_api import sync_playwright  # noqa: PLC0415

    screenshots = screenshots or out / "screenshots"
    screenshots.mkdir(parents=True, exist_ok=True)
    pages = ["index.html"] + sorted(p.name for p in out.glob("[0-9][0-9]_*.html"))
    problems = []
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"]
    prose = """() => { const b = document.body.cloneNode(true);
                       b.querySelectorAll('pre, code, .jp-CodeCell .jp-InputArea, .jp-OutputArea, math, script, style')
                        .forEach(e => e.remove());
                       return b.innerText; }"""
    overflowing = """() => Array.from(document.querySelectorAll('.jp-OutputArea-output pre'))
                        .filter(p => p.scrollWidth > p.clientWidth + 1).length"""
    # ranges of numbers in the prose that the page lays out on more than one line
    broken_ranges = r"""() => {
        const skip = 'pre, code, math, script, style, .jp-CodeCell .jp-InputArea, .jp-OutputArea', out = [];
        const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
        for (let n = walk.nextNode(); n; n = walk.nextNode()) {
            if (n.parentElement.closest(skip)) continue;
            for (const m of n.data.matchAll(/\d[\d.,]*\u2060?–\u2060?\d[\d.,]*/g)) {
                const r = document.createRange();
                r.setStart(n, m.index);
                r.setEnd(n, m.index + m[0].length);
                const lines = new Set(Array.from(r.getClientRects()).map(c => Math.round(c.bottom)));
                if (lines.size > 1) out.push(m[0].replaceAll('\u2060', ''));
            }
        }
        return out; }"""
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium(), args=args)
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        errors = []
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        for name in pages:
            errors.clear()
            page.goto((out / name).resolve().as_uri(), wait_until="load")
            broken = page.evaluate("Array.from(document.images).filter(i => !i.complete || i.naturalWidth === 0)"
                                   ".map(i => i.src.slice(0, 60))")
            if broken:
                problems.append(f"{name}: {len(broken)} broken images")
            if errors:
                problems.append(f"{name}: console errors: {errors[:3]}")
            text = page.evaluate(prose)
            raw = RAW_TEX.search(text)
            if raw:
                problems.append(f"{name}: raw TeX left in the prose: {text[max(0, raw.start() - 30):raw.end() + 30]!r}")
            wide = page.evaluate(overflowing)
            if wide:
                problems.append(f"{name}: {wide} output blocks wider than the page")
            split = page.evaluate(broken_ranges)
            if split:
                problems.append(f"{name}: a line breaks inside {len(split)} ranges of numbers: {split[:3]}")
            if name == "index.html":
                listed = page.evaluate("Array.from(document.querySelectorAll('ol.lessons a')).map(a => a.getAttribute('href'))")
                if listed != pages[1:]:
                    problems.append(f"index.html lists {listed}, expected {pages[1:]}")
            if name.startswith(SCREENSHOTS):
                shot = "index.png" if name == "index.html" else f"lesson{name[:2]}.png"
                page.screenshot(path=str(screenshots / shot), full_page=name == "index.html")
        browser.close()
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="the folder to write the book to")
    ap.add_argument("--smoke", action="store_true", help="every lesson in smoke mode")
    ap.add_argument("--only", nargs="+", metavar="NN", help="only these lessons")
    ap.add_argument("--check", action="store_true", help="open every page in headless Chromium and check it")
    args = ap.parse_args(argv)
    out = Path(args.out).resolve()
    t0 = time.perf_counter()
    items = build(out, args.smoke, args.only)
    print(f"built {out / 'index.html'} in {time.perf_counter() - t0:.0f} s")
    failed = [it for it in items if it.get("failed")]
    for it in failed:
        print(f"problem: lesson {it['number']} failed: {it['failed']}")
    if args.check:
        raw = raw_math_in_sources()
        for line in raw:
            print("problem: math outside $…$ in", line)
        if chromium() is None:
            raise SystemExit("--check needs Chromium: apt install chromium, or set CHROMIUM")
        problems = check(out)
        for p in problems:
            print("problem:", p)
        print("browser check:", "ok" if not problems else f"{len(problems)} problems",
              "| screenshots in", out / "screenshots")
        return 1 if problems or raw or failed else 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
