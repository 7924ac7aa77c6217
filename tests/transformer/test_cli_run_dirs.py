"""One run per directory: ``train`` holds a lock on its run directory, a second writer refuses
naming the holder, a stale lock is taken over, a fresh ``train`` never adds its checkpoints
beside an old run's, and ``--resume`` with other settings names each difference before it
writes anything.

Every case runs the real CLI (``python -m transformer``) in a subprocess."""
import json
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from transformer.checkpoint import step_checkpoints

from ..helpers import MULTI30K, REPO, SMALL, assert_clean, cli, copy_run, needs_multi30k

pytestmark = needs_multi30k


def snapshot(run):
    """Every file of a run directory with its bytes: what a refused command must leave as it was."""
    return {p.relative_to(run): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def widths(run):
    """d_model of each step checkpoint in ``run``."""
    out = []
    for path in step_checkpoints(run):
        with np.load(path) as z:
            out.append(json.loads(str(z["meta"]))["config"]["d_model"])
    return out


def test_a_second_writer_into_a_run_dir_in_use_refuses_naming_the_holder(small_run, tmp_path):
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "transformer", "train", "--run-dir", str(run), *SMALL, "--max-steps", "100000",
           "--save-every", "5"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while not step_checkpoints(run) if run.exists() else True:
            assert proc.poll() is None, proc.stderr.read()
            assert time.time() < deadline, "no checkpoint within 120 s"
            time.sleep(0.05)
        holder = f"error: {run} is in use by process {proc.pid} on {socket.gethostname()}"
        # a second training (another width: the case where checkpoints used to mix), a resume of
        # the same run, and an average written into it are all refused, naming the holder
        status, _, err = cli("train", "--run-dir", run, *SMALL, "--d-model", "48", "--max-steps", "20")
        assert_clean(status, err, 2, holder)
        status, _, err = cli("train", "--run-dir", run, *SMALL, "--resume", "--max-steps", "20")
        assert_clean(status, err, 2, holder)
        status, _, err = cli("average", "--run-dir", small_run, "--last", "2", "--output", run / "average.npz")
        assert_clean(status, err, 2, holder)
        assert not (run / "average.npz").exists()
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert not (run / ".lock").exists()  # released on the way out
    assert set(widths(run)) == {32}
    assert [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()] == \
        list(range(1, len((run / "metrics.jsonl").read_text().splitlines()) + 1))  # one run's log, not two


def test_a_lock_left_by_a_dead_process_is_taken_over_and_one_from_another_host_is_not(small_run, tmp_path):
    run = copy_run(small_run, tmp_path)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (run / ".lock").write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname(), "command": "train"}))
    status, _, err = cli("train", "--run-dir", run, *SMALL, "--resume", "--max-steps", "8", "--save-every", "2")
    assert status == 0, err
    assert f"was left by process {dead.pid} on {socket.gethostname()}" in err and "taking it over" in err
    assert not (run / ".lock").exists()
    (run / ".lock").write_text(json.dumps({"pid": 1, "host": "another-host.example", "command": "train"}))
    status, _, err = cli("train", "--run-dir", run, *SMALL, "--resume", "--max-steps", "10")
    assert_clean(status, err, 2, f"error: {run} is in use by process 1 on another-host.example")


def test_train_without_resume_into_an_old_run_refuses_and_overwrite_archives_it_first(small_run, tmp_path):
    run = copy_run(small_run, tmp_path)
    before = snapshot(run)
    status, _, err = cli("train", "--run-dir", run, *SMALL, "--d-model", "48", "--max-steps", "2")
    assert_clean(status, err, 2, f"error: {run} already holds a run")
    assert "--resume" in err and "--overwrite" in err
    assert snapshot(run) == before
    status, _, err = cli("train", "--run-dir", run, *SMALL, "--resume", "--overwrite", "--max-steps", "2")
    assert_clean(status, err, 2, "error: --resume continues the run in --run-dir and --overwrite archives it")
    assert snapshot(run) == before

    status, _, err = cli("train", "--run-dir", run, *SMALL, "--d-model", "48", "--max-steps", "2", "--overwrite")
    assert status == 0, err
    archived = [p for p in tmp_path.iterdir() if p.name.startswith("run.archived-")]
    assert len(archived) == 1 and f"the old run in {run} moved to {archived[0]}" in err
    assert {k: v for k, v in snapshot(archived[0]).items()} == before  # the old run, whole and unchanged
    assert widths(run) == [48] and [p.name for p in step_checkpoints(run)] == ["checkpoint_2.npz"]
    assert [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2]


def test_a_prepared_vocabulary_of_another_size_is_refused_before_training(small_run, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(small_run / "spm.model", run / "spm.model")  # data prepared, nothing trained yet
    status, _, err = cli("train", "--run-dir", run, *[a if a != "250" else "300" for a in SMALL], "--max-steps", "2")
    assert_clean(status, err, 2, f"error: {run / 'spm.model'} has 250 pieces and --vocab-size asks for 300")


def test_resume_with_other_settings_names_each_difference_and_writes_nothing(small_run, tmp_path):
    run = copy_run(small_run, tmp_path)
    before = snapshot(run)
    status, _, err = cli("train", "--run-dir", run, *SMALL, "--resume", "--d-model", "48", "--dropout", "0.3",
                         "--max-steps", "8")
    assert_clean(status, err, 2, f"error: --resume: 2 setting(s) differ from the run in {run}")
    assert "--d-model: 32 in the run, 48 now" in err and "--dropout: 0.1 in the run, 0.3 now" in err
    assert snapshot(run) == before  # settings.json, metrics and checkpoints untouched
    # the budget may change: the run goes on with its own settings
    status, _, err = cli("train", "--run-dir", run, *SMALL, "--resume", "--max-steps", "8", "--save-every", "2")
    assert status == 0 and "starting at update 6" in err, err
    assert widths(run)[-1] == 32 and json.loads((run / "settings.json").read_text())["max_steps"] == 8


@pytest.mark.parametrize("command", ["train", "translate", "evaluate", "average"])
def test_a_file_as_run_dir_is_bad_usage(tmp_path, command):
    path = tmp_path / "a-file"
    path.write_text("not a directory\n")
    extra = SMALL if command == "train" else []
    status, _, err = cli(command, "--run-dir", path, *extra)
    assert_clean(status, err, 2, f"error: --run-dir {path}: a file, not a directory")


@pytest.mark.parametrize("command", ["translate", "evaluate"])
def test_a_folder_train_did_not_write_is_named_and_a_missing_one_said_missing(tmp_path, command):
    empty = tmp_path / "empty"
    empty.mkdir()
    status, _, err = cli(command, "--run-dir", empty)
    assert_clean(status, err, 2, f"error: {empty}: not a run directory of this tool (no spm.model in it)")
    assert list(empty.iterdir()) == []
    status, _, err = cli(command, "--run-dir", tmp_path / "nope")
    assert_clean(status, err, 2, f"error: --run-dir {tmp_path / 'nope'}: no such directory; check --run-dir, or train "
                                 "first")
    assert not (tmp_path / "nope").exists()


@pytest.mark.parametrize("command", [["translate"], ["evaluate"], ["average"], ["train", *SMALL, "--resume"]],
                         ids=" ".join)
def test_a_copy_task_run_is_told_apart_by_every_command_that_reads_a_run(tmp_path, command):
    copy = tmp_path / "copy"
    made = subprocess.run([sys.executable, "examples/copy_task.py", "--steps", "2", "--eval-every", "100",
                           "--eval-size", "2", "--test-size", "2", "--run-dir", str(copy), "--no-progress"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr[-2000:]
    files = sorted(p.name for p in copy.iterdir())
    status, _, err = cli(command[0], "--run-dir", copy, *command[1:])
    assert_clean(status, err, 2, f"error: {copy}: a copy-task run (examples/copy_task.py), not a translation run")
    assert sorted(p.name for p in copy.iterdir()) == files   # nothing written


def test_settings_json_records_the_model_as_built_with_the_tokenizers_vocabulary(small_run):
    settings = json.loads((small_run / "settings.json").read_text())
    with np.load(step_checkpoints(small_run)[-1]) as z:
        meta = json.loads(str(z["meta"]))
    assert settings["model"]["vocab_size"] == meta["config"]["vocab_size"] == 250   # --vocab-size 250, not the preset's
    assert meta["settings"]["model"] == meta["config"]


def test_resume_and_evaluate_find_the_data_the_run_was_trained_from(small_run, tmp_path):
    run = copy_run(small_run, tmp_path)
    without_data_dir = [a for i, a in enumerate(SMALL) if a != "--data-dir" and SMALL[i - 1] != "--data-dir"]
    nowhere = {"MULTI30K_DIR": str(tmp_path / "no-such-folder")}  # only the run's own record can lead to the data
    status, _, err = cli("train", "--run-dir", run, *without_data_dir, "--resume", "--max-steps", "8", env=nowhere)
    assert status == 0 and f"note: --data-dir {MULTI30K.resolve()}, the run's own" in err, err
    status, _, err = cli("evaluate", "--run-dir", run, "--limit", "3", "--beam", "1", env=nowhere)
    assert status == 0, err
    [result] = (run / "evaluations").glob("*.json")
    assert json.loads(result.read_text())["data_dir"] == str(MULTI30K.resolve())


def test_a_resume_with_nothing_left_to_do_and_an_average_of_fewer_checkpoints_say_so(small_run, tmp_path):
    run = copy_run(small_run, tmp_path)
    status, _, err = cli("train", "--run-dir", run, *SMALL, "--resume", "--max-steps", "4")
    assert status == 0 and "note: the run is at update 6 already, not below --max-steps 4: no update to make" in err, err
    status, out, err = cli("average", "--run-dir", run, "--last", "100")
    assert status == 0 and "note: --last 100, but" in err and "holds 3 checkpoint(s) of its run: averaging those" in err, err
    assert "checkpoint_2.npz, checkpoint_4.npz, checkpoint_6.npz" in out


def test_a_run_dir_that_cannot_be_created_is_bad_usage_naming_the_flag(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("in the way\n")
    status, _, err = cli("train", "--run-dir", blocker / "run", *SMALL, "--max-steps", "2")
    assert_clean(status, err, 2, f"error: --run-dir {blocker / 'run'}: cannot create it (Not a directory)")
