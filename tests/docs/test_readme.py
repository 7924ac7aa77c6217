"""The README's code blocks run as written, and its quick start names the real commands."""
import re
from pathlib import Path

from tests.helpers import torch_or_skip

README = Path(__file__).resolve().parents[2] / "README.md"


def python_blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_every_python_block_in_the_readme_runs(tmp_path, monkeypatch):
    """Every block; the one that hands a model to PyTorch needs PyTorch, a test tool of CI's
    (tests.helpers.torch_or_skip), and is the only one allowed to skip without it."""
    monkeypatch.chdir(tmp_path)  # what a block writes (profile.json) lands here, not in the checkout
    blocks = python_blocks()
    assert len(blocks) >= 4
    needs_torch = [code for code in blocks if re.search(r"^import .*\btorch\b", code, flags=re.M)]
    for code in [b for b in blocks if b not in needs_torch]:
        exec(compile(code, "README.md", "exec"), {})
    assert (tmp_path / "profile.json").exists()
    assert len(needs_torch) == 1
    torch_or_skip()
    exec(compile(needs_torch[0], "README.md", "exec"), {})
    assert (tmp_path / "m30k.safetensors").exists()


def test_quick_start_is_two_commands_install_and_run_then_install_and_test():
    text = README.read_text()
    quick = text.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0].strip().splitlines()
    assert quick == ['pip install -e . && python examples/copy_task.py', 'pip install -e ".[test]" && pytest']
    assert (README.parent / "examples" / "copy_task.py").exists()
    ci = (README.parent / ".ci" / "run").read_text()
    assert quick[1] in ci


def test_the_cpu_figures_are_the_rendering_of_the_newest_results_file():
    """The CPU figures are generated (benchmarks/cpu_session.py), never typed: the table of
    docs/performance.md and the README's summary equal what the newest
    benchmarks/results/cpu_<date>.json renders to (a cpu_compare_ file is a sitting of several
    trees, cited by hand)."""
    import importlib.util
    import json

    root = README.parent
    spec = importlib.util.spec_from_file_location("cpu_session", root / "benchmarks" / "cpu_session.py")
    session = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(session)
    newest_file = session.newest_session_file(root / "benchmarks" / "results")
    assert newest_file is not None, "no benchmarks/results/cpu_<date>.json"
    newest = json.loads(newest_file.read_text())

    def block(path):
        return path.read_text().split(session.BEGIN, 1)[1].split(session.END, 1)[0].strip()

    assert block(root / "docs" / "performance.md") == session.table(newest)
    assert block(README) == session.summary(newest)


def test_every_result_file_is_indexed_and_cited_and_every_cited_file_exists():
    """benchmarks/results/ keeps what the docs cite: each JSON file has a row in its README
    and is named in docs/performance.md or its dated log (docs/performance/), and every results
    file the docs name is there."""
    import re

    root = README.parent
    folder = root / "benchmarks" / "results"
    files = {p.name for p in folder.glob("*.json")}
    index = (folder / "README.md").read_text()
    performance = "".join(p.read_text() for p in [root / "docs" / "performance.md",
                                                  *sorted((root / "docs" / "performance").glob("*.md"))])
    assert files, "no results"
    for name in files:
        assert f"`{name}`" in index, f"{name} is not in benchmarks/results/README.md"
        assert name in performance, f"{name} is cited nowhere in docs/performance.md or its dated log"
    cited = set(re.findall(r"[\w.-]+_20\d\d-\d\d-\d\d[\w.-]*\.json", index + performance + README.read_text()))
    assert cited <= files, f"cited but missing: {sorted(cited - files)}"


def test_the_multi30k_score_in_the_readme_is_the_newest_runs_test2016_score():
    """The README's Multi30k figure is measured, not typed: its "sacreBLEU X cased" and the
    signature beside it are the last run's test2016 result in the newest
    benchmarks/results/m30k_cpu_bleu_<date>.json (as ``m30k_recipe.py final`` writes it)."""
    import json
    import re

    folder = README.parent / "benchmarks" / "results"
    newest = max(folder.glob("m30k_cpu_bleu_*.json"), key=lambda p: p.name)
    test2016 = json.loads(newest.read_text())["runs"][-1]["test2016"]
    text = README.read_text()
    claimed = re.search(r"scores \*\*sacreBLEU (\d+\.\d) cased\*\* on test2016", text.replace("\n", " "))
    assert claimed, "the README states no test2016 score for multi30k-cpu"
    assert float(claimed.group(1)) == round(test2016["bleu"], 1), (claimed.group(1), test2016["bleu"], newest.name)
    assert test2016["signature"] in text


def test_the_user_guide_names_no_issue_commit_or_machine_anecdote():
    """The README is a user's guide: dated results and their history live in docs/performance.md."""
    import re

    text = README.read_text()
    assert not re.search(r"\bissue \d+|\bcommit [0-9a-f]{7}\b|\b[0-9a-f]{7}\b(?= against| →)", text)
    assert "CI machine" not in text and "sitting" not in text


def test_the_layout_block_names_every_top_level_folder_and_example():
    import subprocess

    root = README.parent
    layout = README.read_text().split("## Layout", 1)[1].split("```", 2)[1]
    tracked = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True).stdout.split()
    if not tracked:  # not a git checkout: the folders on disk
        tracked = [str(p.relative_to(root)) for p in root.rglob("*") if ".git" not in p.parts]
    folders = {t.split("/")[0] for t in tracked if "/" in t}
    for folder in folders:
        assert f"{folder}/" in layout or folder in layout, f"{folder} is missing from the README's Layout"
    for example in (root / "examples").glob("*.py"):
        assert example.name in layout, f"examples/{example.name} is missing from the README's Layout"


def test_the_table_of_environment_variables_lists_each_declared_one_with_its_values():
    """The README's table names every variable the project reads (minitensor.environment), and
    each row's values are its declared kind's (its choices, or its range)."""
    import transformer  # noqa: F401, PLC0415 (declares the command line's variables)
    from minitensor import environment  # noqa: PLC0415
    from minitensor.kinds import Choice, Real, Whole  # noqa: PLC0415

    rows = dict(re.findall(r"^\| `([A-Z0-9_]+)` \| ([^|]+) \|", README.read_text(), flags=re.M))
    assert set(rows) == set(environment.VARIABLES)
    for name, variable in environment.VARIABLES.items():
        kind, shown = variable.kind, rows[name]
        if isinstance(kind, Choice):
            assert re.findall(r"\w+", shown.split("(")[0]) == [*kind.names[:-1], "or", kind.names[-1]] \
                or shown.split("(")[0].strip() == kind.names[0], (name, shown)
            default = "unset" if variable.default is None else variable.default
            assert f"({default})" in shown, (name, shown)
        elif isinstance(kind, Whole):
            assert f"{kind.low} to {kind.high}" in shown, (name, shown)
        elif isinstance(kind, Real):
            assert f"({variable.default:g})" in shown, (name, shown)
