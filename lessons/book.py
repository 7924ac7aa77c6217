"""Build the lessons into a static HTML book.

    python lessons/book.py --out book            # every lesson executed (full mode where it takes < 2 min)
    python lessons/book.py --out book --smoke    # every lesson in smoke mode (about a minute)
    python lessons/book.py --out book --check    # and open every page in Chromium: images, console, math

Each lesson (a py:percent script) is read as a notebook by jupytext, executed top to bottom
by nbclient in a Jupyter kernel, and exported to HTML by nbconvert. The lessons save their
figures to files; the book puts every figure a cell saved right under that cell. LaTeX in the
prose is turned into MathML when the book is built, so pages need no network (and no
MathJax). ``index.html`` lists the lessons in order with the paper section each covers and
its run time; every page links to the previous and next lesson and to the package files it
uses (copied into the book as highlighted source).

Needs the ``lessons`` extra: ``pip install -e ".[lessons]"``; ``--check`` also needs a
Chromium (Debian: ``apt install chromium``; or set ``CHROMIUM``).
"""
from __future__ import annotations

import argparse
import base64
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
FULL_MODE_LIMIT_S = 120


# ---------------------------------------------------------------- the lessons
def lessons() -> list[Path]:
    return sorted(HERE.glob("[0-9][0-9]_*.py"))


def catalogue() -> dict[str, dict]:
    """{number: {title, paper}} from the table in lessons/README.md."""
    out = {}
    for line in (HERE / "README.md").read_text().split("<!-- begin generated")[0].splitlines():
        m = re.match(r"\| (\d\d) \| ([^|]+) \| ([^|]*) \|", line)
        if m and m.group(1) not in out:  # the lessons' table comes first; later tables (exercises) do not count
            out[m.group(1)] = {"title": m.group(2).strip(), "paper": m.group(3).strip() or "—"}
    return out


def recorded_seconds(number: str) -> float | None:
    path = HERE / "results" / f"{number}.json"
    return json.loads(path.read_text())["seconds"] if path.exists() else None


def package_files(source: str) -> list[Path]:
    """The files of minitensor and transformer that a lesson imports from."""
    modules = set()
    for m in re.finditer(r"^\s*(?:from\s+((?:minitensor|transformer)[\w.]*)\s+import\s+([\w, ]+)|import\s+"
                         r"((?:minitensor|transformer)[\w.]*))", source, re.M):
        if m.group(3):
            modules.add(m.group(3))
        else:
            base = m.group(1)
            modules.add(base)
            modules.update(f"{base}.{name.strip()}" for name in m.group(2).split(","))  # submodules
    files = set()
    for mod in modules:
        parts = mod.split(".")
        for candidate in (REPO.joinpath(*parts).with_suffix(".py"), REPO.joinpath(*parts, "__init__.py")):
            if candidate.exists():
                files.add(candidate)
    return sorted(files)


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


def saved_figures(text: str, figures: Path) -> list[Path]:
    """The PNG files a cell's output says it saved (a file, or every PNG of a folder)."""
    found = []
    for token in re.findall(r"(\S+)", text):
        token = token.strip("'\",;:()")
        p = Path(token)
        if not p.is_absolute() or figures not in p.parents and p != figures:
            continue
        if p.suffix == ".png" and p.exists():
            found.append(p)
        elif p.is_dir():
            found += sorted(p.glob("*.png"))
    return list(dict.fromkeys(found))


def attach_figures(nb, figures: Path) -> int:
    """Put each figure a code cell saved right after that cell's text output."""
    import nbformat  # noqa: PLC0415

    count = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        text = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")
        for png in saved_figures(text, figures):
            cell.outputs.append(nbformat.v4.new_output(
                "display_data", data={"image/png": base64.b64encode(png.read_bytes()).decode(),
                                      "text/plain": png.name}))
            count += 1
    return count


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
.math-display { text-align: center; margin: 0.8em 0; }
"""


def build(out: Path, smoke_all: bool = False, only: list[str] | None = None) -> list[dict]:
    """Execute and render the lessons into ``out``; returns what index.html lists."""
    import jupytext  # noqa: PLC0415
    from nbclient import NotebookClient  # noqa: PLC0415
    from nbconvert import HTMLExporter  # noqa: PLC0415

    out.mkdir(parents=True, exist_ok=True)
    figures = (out / "figures").resolve()
    info = catalogue()
    chosen = [p for p in lessons() if not only or p.name[:2] in only]
    items = [{"number": p.name[:2], "file": p, "page": f"{p.stem}.html",
              "title": info.get(p.name[:2], {}).get("title", p.stem),
              "label": f"{int(p.name[:2])}. {info.get(p.name[:2], {}).get('title', p.stem)}"} for p in chosen]
    exporter = HTMLExporter(template_name="book", extra_template_basedirs=[str(TEMPLATES)])
    env = dict(os.environ)
    try:
        for i, item in enumerate(items):
            number = item["number"]
            recorded = recorded_seconds(number)
            smoke = smoke_all or recorded is None or recorded >= FULL_MODE_LIMIT_S
            os.environ.update({"LESSON_OUT": str(figures), "MPLBACKEND": "Agg"})
            os.environ.pop("LESSON_SMOKE", None)
            if smoke:
                os.environ["LESSON_SMOKE"] = "1"
            nb = jupytext.read(item["file"])
            for cell in nb.cells:
                if cell.cell_type == "markdown":
                    cell.source = math_to_mathml(cell.source)
            t0 = time.perf_counter()
            NotebookClient(nb, timeout=900, kernel_name="python3",
                           resources={"metadata": {"path": str(REPO)}}).execute()
            item["seconds"] = round(time.perf_counter() - t0, 1)
            item["mode"] = "smoke" if smoke else "full"
            item["figures"] = attach_figures(nb, figures)
            uses = [(p.relative_to(REPO).as_posix(), source_page(p, out)) for p in package_files(item["file"].read_text())]
            uses_html = ('<div class="book-uses">Package files this lesson uses: '
                         + ", ".join(f'<a href="{link}"><code>{name}</code></a>' for name, link in uses) + "</div>")
            nb.metadata["title"] = item["label"]
            body, _ = exporter.from_notebook_node(nb, resources={"book_nav": nav(items, i), "book_uses": uses_html,
                                                                 "book_css": BOOK_CSS})
            (out / item["page"]).write_text(body)
            print(f"{item['page']}: {item['seconds']} s ({item['mode']}), {item['figures']} figures", flush=True)
    finally:
        os.environ.clear()
        os.environ.update(env)
    write_index(out, items, info)
    return items


def write_index(out: Path, items: list[dict], info: dict) -> None:
    rows = "\n".join(
        f'<li><a href="{it["page"]}">{html.escape(it["title"])}</a> <span class="paper">paper: '
        f'{html.escape(info.get(it["number"], {}).get("paper", "—"))}</span> <span class="time">{it["seconds"]} s '
        f'({it["mode"]} mode)</span></li>' for it in items)
    (out / "index.html").write_text(f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>minitensor + transformer: the lessons</title>
<style>body {{ font-family: sans-serif; max-width: 52em; margin: 2em auto; line-height: 1.5; }}
li {{ margin: 0.4em 0; }} .paper, .time {{ color: #666; font-size: 0.9em; margin-left: 0.6em; }}</style></head>
<body><h1>Attention Is All You Need, one idea at a time</h1>
<p>The lessons of minitensor + transformer, executed. Each page is a lesson run top to bottom: prose, code,
outputs and figures. The paper sections are those of Vaswani et al. (2017); the times are this build's.</p>
<ol class="lessons">
{rows}
</ol></body></html>
""")


# ---------------------------------------------------------------- the browser check
def chromium() -> str | None:
    return os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def check(out: Path, screenshots: Path | None = None) -> list[str]:
    """Open every page in headless Chromium: no broken image, no console error, no raw $…$
    left, the index listing the lessons in order. Saves screenshots of the index and of
    lesson 7. Returns the problems found (empty: all good)."""
    from playwright.sync_api import sync_playwright  # noqa: PLC0415

    screenshots = screenshots or out / "screenshots"
    screenshots.mkdir(parents=True, exist_ok=True)
    pages = ["index.html"] + sorted(p.name for p in out.glob("[0-9][0-9]_*.html"))
    problems = []
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"]
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
            text = page.evaluate("document.body.innerText")
            if broken:
                problems.append(f"{name}: {len(broken)} broken images")
            if errors:
                problems.append(f"{name}: console errors: {errors[:3]}")
            if re.search(r"\$\$|\$[^$\s][^$\n]*\$", text):
                problems.append(f"{name}: raw $…$ math left: {re.search(r'.{0,30}[$].{0,30}', text).group(0)!r}")
            if name == "index.html":
                listed = page.evaluate("Array.from(document.querySelectorAll('ol.lessons a')).map(a => a.getAttribute('href'))")
                if listed != pages[1:]:
                    problems.append(f"index.html lists {listed}, expected {pages[1:]}")
                page.screenshot(path=str(screenshots / "index.png"), full_page=True)
            if name.startswith("07_"):
                page.screenshot(path=str(screenshots / "lesson07.png"), full_page=False)
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
    build(out, args.smoke, args.only)
    print(f"built {out / 'index.html'} in {time.perf_counter() - t0:.0f} s")
    if args.check:
        if chromium() is None:
            raise SystemExit("--check needs Chromium: apt install chromium, or set CHROMIUM")
        problems = check(out)
        for p in problems:
            print("problem:", p)
        print("browser check:", "ok" if not problems else f"{len(problems)} problems",
              "| screenshots in", out / "screenshots")
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
