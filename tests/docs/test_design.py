"""docs/design.md names real files: every path it gives for a concept, a change or a test exists."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_path_the_design_names_exists():
    text = (ROOT / "docs" / "design.md").read_text()
    paths = set(re.findall(r"`((?:minitensor|transformer|tests|lessons|benchmarks|examples|docs)/[\w./*<>-]*)`", text))
    assert len(paths) > 20, paths
    missing = []
    for path in paths:
        pattern = re.sub(r"<[^>]+>", "*", path.rstrip("/"))
        if not any(ROOT.glob(pattern)):
            missing.append(path)
    assert not missing, f"docs/design.md names paths that do not exist: {sorted(missing)}"


def test_the_code_cites_the_design_by_section_titles_it_has():
    """A "why" in the code that points to docs/design.md names a section that is there."""
    titles = set(re.findall(r"^### (.+?)(?: \(|$)", (ROOT / "docs" / "design.md").read_text(), flags=re.M))
    cited = {}
    for file in [*ROOT.glob("minitensor/**/*.py"), *ROOT.glob("transformer/*.py")]:
        for title in re.findall(r'docs/design\.md, "([^"]+)"', file.read_text()):
            cited.setdefault(title, file.relative_to(ROOT))
    assert cited, "no citation found: the pattern is stale"
    assert not {t: f for t, f in cited.items() if t not in titles}, {t: f for t, f in cited.items() if t not in titles}
