"""A small trained run that the command-line tests share (trained once per test session)."""
import pytest

from ..helpers import SMALL, cli


@pytest.fixture(scope="session")
def small_run(tmp_path_factory):
    """A run directory of the SMALL model with checkpoints at updates 2, 4 and 6. Tests that
    change it work on a copy (shutil.copytree)."""
    run = tmp_path_factory.mktemp("cli") / "run"
    status, _, err = cli("train", "--run-dir", run, *SMALL, "--max-steps", "6", "--save-every", "2")
    assert status == 0, err
    return run
