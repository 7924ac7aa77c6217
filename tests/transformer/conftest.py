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


@pytest.fixture(scope="session")
def other_run(tmp_path_factory):
    """A run of the same model with another vocabulary (300 pieces): its checkpoints are another
    run's to small_run (checkpoints at updates 2, 4, 6 and 8)."""
    run = tmp_path_factory.mktemp("other") / "run"
    small = [a if a != "250" else "300" for a in SMALL]
    status, _, err = cli("train", "--run-dir", run, *small, "--max-steps", "8", "--save-every", "2")
    assert status == 0, err
    return run


@pytest.fixture(scope="session")
def sibling_run(small_run, tmp_path_factory):
    """A second run of small_run's model on small_run's own vocabulary (its spm.model and id
    cache copied in) with another seed: its checkpoints look like small_run's in every stored
    setting but the seed and the run id (checkpoints at updates 2, 4, 6 and 8)."""
    import shutil  # noqa: PLC0415

    run = tmp_path_factory.mktemp("sibling") / "run"
    run.mkdir()
    shutil.copy(small_run / "spm.model", run / "spm.model")
    shutil.copytree(small_run / "cache", run / "cache")
    status, _, err = cli("train", "--run-dir", run, *SMALL, "--seed", "7", "--max-steps", "8", "--save-every", "2")
    assert status == 0, err
    return run
