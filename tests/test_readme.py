"""The README's code blocks run as written, and its quick start names the real commands."""
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_every_python_block_in_the_readme_runs():
    blocks = python_blocks()
    assert len(blocks) >= 2
    for code in blocks:
        exec(compile(code, "README.md", "exec"), {})


def test_quick_start_is_two_commands_install_and_run_then_install_and_test():
    text = README.read_text()
    quick = text.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0].strip().splitlines()
    assert quick == ['pip install -e . && python examples/copy_task.py', 'pip install -e ".[test]" && pytest']
    assert (README.parent / "examples" / "copy_task.py").exists()
    ci = (README.parent / ".ci" / "run").read_text()
    assert quick[1] in ci


def test_the_cpu_performance_table_is_the_rendering_of_the_newest_results_file():
    """The README's CPU table is generated (benchmarks/cpu_session.py), never typed: it equals
    the table rendered from the newest benchmarks/results/cpu_*.json."""
    import importlib.util
    import json

    root = README.parent
    results = sorted((root / "benchmarks" / "results").glob("cpu_*.json"))
    assert results, "no benchmarks/results/cpu_*.json"
    spec = importlib.util.spec_from_file_location("cpu_session", root / "benchmarks" / "cpu_session.py")
    session = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(session)
    block = README.read_text().split(session.BEGIN, 1)[1].split(session.END, 1)[0].strip()
    assert block == session.table(json.loads(results[-1].read_text()))
