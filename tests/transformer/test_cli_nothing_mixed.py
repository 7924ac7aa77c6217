"""Nothing mixed: outputs that replace only what is theirs, files checked by their hashes, and
every shared name taken by one command at a time. Each case runs the commands as a user does
(``python -m transformer`` in subprocesses); where two race, one is paused with SIGSTOP at a
write of the shared name while the other runs, then let go."""
import hashlib
import json
import os
import pty
import select
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from transformer.checkpoint import read_meta

from ..helpers import PAUSING, REPO, SMALL, assert_clean, cli, copy_run, needs_multi30k, resume, start, stopped
from .test_wmt14_data import small_archives

pytestmark = needs_multi30k

def lines(n: int, word: str = "dog") -> str:
    return "".join(f"A {word} number {i} runs in the park.\n" for i in range(n))


def partials(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob(".*.partial"))


# ---------------------------------------------------------------------------- outputs that are not regular files
def test_translate_writes_through_a_symlink_to_a_device_and_leaves_the_link(small_run, tmp_path):
    null = tmp_path / "null"
    null.symlink_to(os.devnull)
    status, _, err = cli("translate", "--run-dir", small_run, "--output", null, "--beam", "1", stdin=lines(2))
    assert status == 0, err
    assert null.is_symlink() and os.readlink(null) == os.devnull and stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_translate_into_a_device_node_keeps_the_node(small_run, tmp_path):
    node = tmp_path / "mynull"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, OSError) as e:
        pytest.skip(f"cannot make a device node here ({e})")
    status, _, err = cli("translate", "--run-dir", small_run, "--output", node, "--beam", "1", stdin=lines(2))
    assert status == 0, err
    assert stat.S_ISCHR(node.lstat().st_mode)  # still the device, not a file of 70 bytes


def test_translate_into_a_fifo_feeds_its_reader_and_keeps_the_fifo(small_run, tmp_path):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    status, _, err = cli("translate", "--run-dir", small_run, "--output", fifo, "--beam", "1", stdin=lines(3))
    reader.join(timeout=60)
    assert status == 0, err
    assert len(got) == 1 and len(got[0].splitlines()) == 3 and stat.S_ISFIFO(fifo.lstat().st_mode)


def test_translate_into_a_symlink_to_its_own_stdout_writes_to_stdout(small_run, tmp_path):
    link = tmp_path / "stdout"
    link.symlink_to("/proc/self/fd/1")
    status, out, err = cli("translate", "--run-dir", small_run, "--output", link, "--beam", "1", stdin=lines(2))
    assert status == 0, err
    assert len(out.splitlines()) == 2 and link.is_symlink()


@pytest.mark.parametrize("name", ["/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"])
def test_dev_stdout_appended_to_a_file_writes_through_the_shells_descriptor(small_run, tmp_path, name):
    """``translate --output /dev/stdout >> app.txt``: the lines go after what app.txt held, through
    the descriptor the shell opened; the file is neither replaced nor cut. (The output is named
    through a symlink of the test's own to ``name``: code that renamed over what it was given
    would then replace that link, never the system's /dev/stdout.)"""
    app, link = tmp_path / "app.txt", tmp_path / "out"
    link.symlink_to(name)
    app.write_text("header\n")
    inode = app.stat().st_ino
    with open(app, "a") as out:
        p = subprocess.run([sys.executable, "-m", "transformer", "translate", "--run-dir", str(small_run), "--beam", "1",
                            "--output", str(link)], cwd=REPO, input=lines(2), stdout=out, stderr=subprocess.PIPE,
                           text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert app.stat().st_ino == inode and link.is_symlink()
    text = app.read_text().splitlines()
    assert text[0] == "header" and len(text) == 3


def test_translate_into_a_terminal_writes_through_it(small_run):
    controller, terminal = pty.openpty()
    try:
        status, _, err = cli("translate", "--run-dir", small_run, "--output", os.ttyname(terminal), "--beam", "1",
                             stdin=lines(2))
        assert status == 0, err
        got = b""
        while select.select([controller], [], [], 1)[0] and got.count(b"\n") < 2:
            got += os.read(controller, 1 << 16)
        assert got.count(b"\n") == 2 and stat.S_ISCHR(os.stat(os.ttyname(terminal)).st_mode)
    finally:
        os.close(controller)
        os.close(terminal)


def test_evaluates_headline_through_a_symlink_writes_the_file_it_points_to(small_run, tmp_path):
    run = copy_run(small_run, tmp_path)
    kept = tmp_path / "elsewhere.json"
    kept.write_text("{}")
    (run / "evaluation.json").symlink_to(kept)
    status, _, err = cli("evaluate", "--run-dir", run, "--beam", "1")
    assert status == 0, err
    assert (run / "evaluation.json").is_symlink() and json.loads(kept.read_text())["sentences"] == 1000


def test_a_symlink_to_a_regular_file_writes_that_file_and_stays_a_link(small_run, tmp_path):
    (tmp_path / "real").mkdir()
    target, link = tmp_path / "real" / "out.txt", tmp_path / "out.txt"
    target.write_text("old\n")
    link.symlink_to(target)
    status, _, err = cli("translate", "--run-dir", small_run, "--output", link, "--beam", "1", stdin=lines(2))
    assert status == 0, err
    assert link.is_symlink() and len(target.read_text().splitlines()) == 2
    avg = tmp_path / "avg.npz"
    avg.symlink_to(tmp_path / "real" / "avg.npz")
    status, _, err = cli("average", "--run-dir", small_run, "--last", "2", "--output", avg)
    assert status == 0 and avg.is_symlink() and read_meta(tmp_path / "real" / "avg.npz")["kind"] == "average", err


def test_a_symlink_to_a_checkpoint_is_a_runs_own_file(small_run, tmp_path):
    run = copy_run(small_run, tmp_path)
    link = tmp_path / "out.txt"
    link.symlink_to(run / "checkpoint_6.npz")
    before = (run / "checkpoint_6.npz").read_bytes()
    status, _, err = cli("translate", "--run-dir", run, "--output", link, "--beam", "1", stdin=lines(1))
    assert_clean(status, err, 2, f"error: --output {link} is a run's own file")
    assert (run / "checkpoint_6.npz").read_bytes() == before


def test_average_into_a_symlink_to_a_device_leaves_the_link(small_run, tmp_path):
    null = tmp_path / "null.npz"
    null.symlink_to(os.devnull)
    status, _, err = cli("average", "--run-dir", small_run, "--last", "2", "--output", null)
    assert status == 0 and null.is_symlink(), err


def test_the_copy_task_writes_through_a_symlink_to_a_device_among_its_files(tmp_path):
    run = tmp_path / "copy"
    run.mkdir()
    (run / "loss.png").symlink_to(os.devnull)
    elsewhere = tmp_path / "kept.json"
    elsewhere.write_text("{}")
    (run / "summary.json").symlink_to(elsewhere)
    p = subprocess.run([sys.executable, "examples/copy_task.py", "--run-dir", str(run), "--steps", "3", "--eval-every",
                        "3", "--test-size", "5", "--no-progress"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert (run / "loss.png").is_symlink() and (run / "summary.json").is_symlink()
    assert json.loads(elsewhere.read_text())["steps"] == 3


# ---------------------------------------------------------------------------- 1. the run's identity
@pytest.mark.parametrize("record", [None, b'{"run_id": 5}', b"{garbage"])
def test_without_a_readable_run_json_another_runs_checkpoint_is_refused_not_adopted(small_run, sibling_run, tmp_path,
                                                                                   record):
    run = copy_run(small_run, tmp_path)
    if record is None:
        (run / "run.json").unlink()
    else:
        (run / "run.json").write_bytes(record)
    shutil.copy(sibling_run / "checkpoint_8.npz", run / "checkpoint_8.npz")  # another run's, newer
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    state = "missing" if record is None else "unreadable"
    for argv in (["translate", "--run-dir", run, "--beam", "1"],
                 ["train", "--run-dir", run, *SMALL, "--resume", "--max-steps", "10"],
                 ["average", "--run-dir", run, "--last", "2", "--output", tmp_path / "avg.npz"]):
        status, out, err = cli(*argv, stdin=lines(1))
        assert_clean(status, err, 2, f"error: {run / 'run.json'} is {state}, and the checkpoints in {run} are not of "
                                     "one run")
        assert "checkpoint_2.npz, checkpoint_4.npz, checkpoint_6.npz: run " in err and "checkpoint_8.npz: run " in err
        assert out == ""
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before  # nothing rewritten


def test_without_run_json_the_runs_own_checkpoints_give_its_id_back(small_run, tmp_path):
    run = copy_run(small_run, tmp_path)
    own = json.loads((run / "run.json").read_text())["run_id"]
    (run / "run.json").unlink()
    status, out, err = cli("translate", "--run-dir", run, "--beam", "1", stdin=lines(1))
    assert status == 0 and len(out.splitlines()) == 1, err
    assert f"note: {run / 'run.json'} is missing: the run's id is taken from its 3 checkpoint(s), which agree" in err
    status, _, err = cli("train", "--run-dir", run, *SMALL, "--resume", "--max-steps", "8", "--save-every", "2")
    assert status == 0, err
    assert json.loads((run / "run.json").read_text())["run_id"] == own  # its own again, not a new one
    assert read_meta(run / "checkpoint_8.npz")["run_id"] == own


def test_another_runs_checkpoint_is_named_wherever_it_sits_and_never_counted_by_keep_last(small_run, sibling_run,
                                                                                        tmp_path):
    run = copy_run(small_run, tmp_path)
    foreign = run / "checkpoint_1000.npz"
    shutil.copy(sibling_run / "checkpoint_4.npz", foreign)  # holds update 4: older than the run's newest
    skipped = "skipping checkpoint_1000.npz: another run's checkpoint (its run id"
    status, out, err = cli("translate", "--run-dir", run, "--beam", "1", stdin=lines(1))
    assert status == 0 and skipped in err, err
    status, _, err = cli("train", "--run-dir", run, *SMALL, "--resume", "--max-steps", "10", "--save-every", "2",
                         "--keep-last", "2")
    assert status == 0, err
    names = sorted(p.name for p in run.glob("checkpoint_*.npz"))
    assert names == ["checkpoint_10.npz", "checkpoint_1000.npz", "checkpoint_8.npz"], names  # 2 of its own kept
    assert foreign.read_bytes() == (sibling_run / "checkpoint_4.npz").read_bytes()


def test_a_line_sent_alone_down_a_pipe_is_translated_before_the_next_comes(small_run):
    proc = subprocess.Popen([sys.executable, "-m", "transformer", "translate", "--run-dir", str(small_run), "--beam",
                             "1"], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        proc.stdin.write("A dog runs in the park.\n")
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        assert ready, "the line that came was not translated while the pipe stayed open"
        assert proc.stdout.readline().strip()
        proc.stdin.write("Two cats sleep.\n")
        proc.stdin.close()
        proc.stdin = None
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and len(out.splitlines()) == 1, err


# ---------------------------------------------------------------------------- 2. the id cache, by its hashes
def _reverse(data: bytes) -> bytes:
    ids = np.frombuffer(data, dtype=np.int32)
    return ids[::-1].tobytes()


def _shift(data: bytes) -> bytes:
    return (np.frombuffer(data, dtype=np.int32) + 1).astype(np.int32).tobytes()


def _out_of_range(data: bytes) -> bytes:
    ids = np.frombuffer(data, dtype=np.int32).copy()
    ids[len(ids) // 2] = 10**6
    return ids.tobytes()


@pytest.mark.parametrize("alter", [_reverse, _shift, _out_of_range], ids=["reversed", "shifted", "out of range"])
def test_token_ids_altered_in_place_are_named_and_encoded_again(small_run, tmp_path, alter):
    run = copy_run(small_run, tmp_path)
    ids = run / "cache" / "train" / "src.ids"
    original = ids.read_bytes()
    ids.write_bytes(alter(original))
    assert ids.stat().st_size == len(original)
    status, _, err = cli("train", "--run-dir", run, *SMALL, "--resume", "--max-steps", "8", "--save-every", "2")
    assert status == 0, err
    assert f"note: {ids} is not the file the cache recorded" in err and "encoded again" in err
    assert ids.read_bytes() == original  # trained on the text's own ids


def test_validation_ids_altered_in_place_are_encoded_again(small_run, tmp_path):
    run = copy_run(small_run, tmp_path)
    cache = run / "cache" / "valid.src.npz"
    with np.load(cache) as z:
        arrays = {k: z[k] for k in z.files}
    original = arrays["flat"].copy()
    arrays["flat"] = arrays["flat"][::-1].copy()
    with open(cache, "wb") as f:
        np.savez(f, **arrays)
    status, _, err = cli("train", "--run-dir", run, *SMALL, "--resume", "--max-steps", "8", "--save-every", "2")
    assert status == 0, err
    with np.load(cache) as z:
        assert np.array_equal(z["flat"], original)


# ---------------------------------------------------------------------------- 3. a data wmt14 folder, by its hashes
def _archives_env(archives: dict) -> dict:
    return {"ARCHIVES": json.dumps({n: [f"http://127.0.0.1:9/{n}", len(d), hashlib.sha256(d).hexdigest()]
                                    for n, d in archives.items()})}


@pytest.fixture(scope="module")
def wmt_archives(tmp_path_factory):
    folder = tmp_path_factory.mktemp("archives")
    archives = small_archives()
    for name, data in archives.items():
        (folder / name).write_bytes(data)
    return folder, _archives_env(archives)


def prepare_wmt(out: Path, wmt_archives) -> None:
    folder, env = wmt_archives
    status, _, err = cli("data", "wmt14", "--out", out, "--from", folder, "--no-progress", code=PAUSING, env=env)
    assert status == 0, err


def swap_two_lines(path: Path) -> None:
    text = path.read_bytes().split(b"\n")
    i = next(k for k in range(len(text) - 1) if len(text[k]) and text[k] != text[k + 1])
    text[i], text[i + 1] = text[i + 1], text[i]
    path.write_bytes(b"\n".join(text))


def alter_three_bytes(path: Path) -> None:
    data = bytearray(path.read_bytes())
    for k in (10, 20, 30):
        data[k] = ord("x") if data[k] != ord("x") else ord("y")
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("name, alter", [("test.en", swap_two_lines), ("test.de", alter_three_bytes),
                                         ("train.de", swap_two_lines)])
def test_a_wmt14_file_altered_at_the_same_size_is_named(small_run, tmp_path, wmt_archives, name, alter):
    run = copy_run(small_run, tmp_path)
    out = tmp_path / "wmt"
    prepare_wmt(out, wmt_archives)
    size = (out / name).stat().st_size
    alter(out / name)
    assert (out / name).stat().st_size == size
    said = f"error: {out / name}: changed since {out / 'manifest.json'} was written (its SHA-256 is "
    status, _, err = cli("evaluate", "--run-dir", run, "--data-dir", out, "--limit", "2", "--beam", "1")
    assert_clean(status, err, 2, said)
    status, _, err = cli("train", "--run-dir", tmp_path / "new", "--preset", "wmt14-base", "--data-dir", out, "--limit",
                         "300", "--vocab-size", "250", "--d-model", "32", "--n-heads", "2", "--d-ff", "64", "--layers",
                         "1", "--max-steps", "1", "--no-progress")
    assert_clean(status, err, 2, said)
    assert not (tmp_path / "new").exists()
    folder, env = wmt_archives  # and `data wmt14` prepares it again, reusing nothing it cannot trust
    status, _, err = cli("data", "wmt14", "--out", out, "--from", folder, "--no-progress", code=PAUSING, env=env)
    assert status == 0 and f"note: {out / name}: changed since" in err and err.count("preparing it again") == 1, err
    status, _, err = cli("evaluate", "--run-dir", run, "--data-dir", out, "--limit", "2", "--beam", "1")
    assert status == 0, err


# ---------------------------------------------------------------------------- 4.-6. two commands, one name
@pytest.mark.parametrize("nth", [2, 3], ids=["paused once it held its file", "paused before renaming it"])
def test_a_second_translate_into_the_same_output_refuses_while_the_first_writes(small_run, tmp_path, nth):
    """Two translations of other text into one --output: while the first is at a write of the
    name, the second refuses, naming it (it must not exit 0 and then have its translations
    replaced by the first's); the first's are then the file's, whole."""
    dog = cli("translate", "--run-dir", small_run, "--beam", "1", stdin=lines(3, "dog"))[1]
    output = tmp_path / "out.txt"
    first = start("translate", "--run-dir", small_run, "--output", output, "--beam", "1", "--no-progress",
                  pause_at=r"out\.txt", nth=nth, stdin=subprocess.PIPE)
    first.stdin.write(lines(3, "dog"))
    first.stdin.close()
    assert stopped(first), first.communicate()
    status, _, err = cli("translate", "--run-dir", small_run, "--output", output, "--beam", "1", stdin=lines(3, "cat"))
    status_first, _, err_first = resume(first)
    assert status_first == 0, err_first
    assert_clean(status, err, 2, f"error: --output {output} is being written by process {first.pid}")
    assert output.read_text() == dog and partials(tmp_path) == []


def test_two_evaluates_of_one_run_never_overwrite_each_other(small_run, tmp_path):
    run = copy_run(small_run, tmp_path)
    argv = ("evaluate", "--run-dir", run, "--limit", "3", "--beam", "1")
    first = start(*argv, pause_at=r"evaluations/test_2016_flickr_checkpoint_6_beam1_first3")
    assert stopped(first)
    status, _, err = cli(*argv)
    assert status == 0, err
    status, _, err = resume(first)
    assert status == 0, err
    records = sorted((run / "evaluations").glob("*.json"))
    assert [p.name for p in records] == ["test_2016_flickr_checkpoint_6_beam1_first3.json",
                                         "test_2016_flickr_checkpoint_6_beam1_first3_2.json"]
    for record in records:  # each names its own hypotheses, and both are there
        assert json.loads(record.read_text())["hypotheses"] == record.with_suffix(".txt").name
        assert record.with_suffix(".txt").exists()
    assert partials(run / "evaluations") == []


def test_an_evaluation_whose_name_holds_a_dot_keeps_its_whole_name(small_run, tmp_path):
    run = copy_run(small_run, tmp_path)
    for _ in range(2):
        status, _, err = cli("evaluate", "--run-dir", run, "--limit", "2", "--beam", "1", "--alpha", "0.7")
        assert status == 0, err
    stem = "test_2016_flickr_checkpoint_6_beam1_alpha0.7_first2"
    assert sorted(p.name for p in (run / "evaluations").iterdir()) == [f"{stem}.json", f"{stem}.txt", f"{stem}_2.json",
                                                                        f"{stem}_2.txt"]
    assert json.loads((run / "evaluations" / f"{stem}_2.json").read_text())["hypotheses"] == f"{stem}_2.txt"


def test_two_averages_of_different_runs_into_one_file_never_pass_one_for_the_other(small_run, sibling_run, tmp_path):
    output = tmp_path / "avg.npz"
    first = start("average", "--run-dir", small_run, "--last", "2", "--output", output, pause_at=r"avg\.npz$")
    assert stopped(first)  # about to rename its average into place
    status, _, err = cli("average", "--run-dir", sibling_run, "--last", "2", "--output", output)
    assert_clean(status, err, 2, f"error: --output {output} is being written by process {first.pid}")
    status, out, err = resume(first)
    assert status == 0, err
    assert read_meta(output)["run_id"] == read_meta(small_run / "checkpoint_6.npz")["run_id"]
    status, _, err = cli("average", "--run-dir", sibling_run, "--last", "2", "--output", output)  # and afterwards
    assert_clean(status, err, 2, f"error: --output {output} is an average of another run")


def test_a_killed_average_leaves_a_temporary_file_that_the_next_one_removes(small_run, tmp_path):
    output = tmp_path / "avg.npz"
    first = start("average", "--run-dir", small_run, "--last", "2", "--output", output, pause_at=r"avg\.npz$")
    assert stopped(first)
    first.kill()
    first.communicate()
    assert len(partials(tmp_path)) == 1  # what SIGKILL leaves
    status, _, err = cli("average", "--run-dir", small_run, "--last", "2", "--output", output)
    assert status == 0, err
    assert partials(tmp_path) == [] and read_meta(output)["kind"] == "average"


def test_a_checkpoint_pruned_while_average_reads_is_replaced_by_the_newest_with_a_note(small_run, tmp_path):
    run = copy_run(small_run, tmp_path)
    code = PAUSING.replace("from transformer.cli import run", """from transformer import checkpoint, rundir
real = rundir.average_checkpoints
def average(paths):  # stopped after choosing, as a training run prunes (then let go)
    if not os.environ.get("PAUSED"):
        os.environ["PAUSED"] = "1"
        os.kill(os.getpid(), signal.SIGSTOP)
    return real(paths)
rundir.average_checkpoints = average
from transformer.cli import run""")
    first = subprocess.Popen([sys.executable, "-c", code, "average", "--run-dir", str(run), "--last", "2", "--output",
                              str(tmp_path / "avg.npz")], cwd=REPO, text=True, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    assert stopped(first)
    (run / "checkpoint_4.npz").unlink()  # as `train --keep-last 1` would, meanwhile
    status, _, err = resume(first)
    assert status == 0, err
    assert "note: checkpoint_4.npz was deleted while it was read" in err
    assert read_meta(tmp_path / "avg.npz")["averaged"] == ["checkpoint_2.npz", "checkpoint_6.npz"]


# ---------------------------------------------------------------------------- 7.-8. folders that hold other things
def test_the_copy_task_refuses_a_translation_runs_directory(small_run, tmp_path):
    run = copy_run(small_run, tmp_path)
    before = {n: (run / n).read_bytes() for n in ("metrics.jsonl", "loss.png")}
    p = subprocess.run([sys.executable, "examples/copy_task.py", "--run-dir", str(run), "--steps", "2"], cwd=REPO,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.startswith(f"error: --run-dir {run} holds a translation run (python -m transformer train)")
    assert {n: (run / n).read_bytes() for n in before} == before


def test_train_refuses_a_copy_task_runs_directory_unless_told_to_archive_it(tmp_path):
    run = tmp_path / "copy"
    p = subprocess.run([sys.executable, "examples/copy_task.py", "--run-dir", str(run), "--steps", "2", "--eval-every",
                        "2", "--test-size", "5", "--no-progress"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    before = {q.name: q.read_bytes() for q in run.iterdir()}
    status, _, err = cli("train", "--run-dir", run, *SMALL, "--max-steps", "1")
    assert_clean(status, err, 2, f"error: {run}: a copy-task run (examples/copy_task.py), not a translation run")
    assert "train into another --run-dir, or add --overwrite" in err
    assert {q.name: q.read_bytes() for q in run.iterdir()} == before


def test_data_wmt14_never_replaces_files_it_did_not_write(tmp_path, wmt_archives):
    out = tmp_path / "wmt"
    out.mkdir()
    (out / "train.en").write_text("my own corpus\n")
    (out / "valid.de").write_text("meine eigenen Daten\n")
    folder, env = wmt_archives
    status, _, err = cli("data", "wmt14", "--out", out, "--from", folder, "--no-progress", code=PAUSING, env=env)
    assert_clean(status, err, 2, f"error: --out {out} holds train.en, valid.de, which `data wmt14` did not write")
    assert (out / "train.en").read_text() == "my own corpus\n" and (out / "valid.de").read_text() == "meine eigenen Daten\n"


def test_two_data_wmt14_into_one_folder_the_second_refuses_naming_the_first(tmp_path, wmt_archives):
    out = tmp_path / "wmt"
    folder, env = wmt_archives
    first = start("data", "wmt14", "--out", out, "--from", folder, "--no-progress", pause_at=r"/wmt/train\.en$",
                  env=env)
    assert stopped(first)  # putting train.en in place
    status, _, err = cli("data", "wmt14", "--out", out, "--from", folder, "--no-progress", code=PAUSING, env=env)
    assert_clean(status, err, 2, f"error: {out} is in use by process {first.pid}")
    status, _, err = resume(first)
    assert status == 0, err
    assert json.loads((out / "manifest.json").read_text())["files"]["train.en"]["lines"] == 700


# ---------------------------------------------------------------------------- defects
def test_training_into_a_closed_pipe_stops_at_a_checkpoint_with_status_141(tmp_path):
    """``train ... | head -1``: the closed stdout stops training as a signal does."""
    run = tmp_path / "run"
    cmd = (f"{sys.executable} -m transformer train --run-dir {run} {' '.join(map(str, SMALL))} --max-steps 100000 "
           "--save-every 100000 | head -1; exit ${PIPESTATUS[0]}")
    p = subprocess.run(["bash", "-c", cmd], cwd=REPO, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "MINITENSOR_DEBUG": "0"})
    assert p.returncode == 141 and "Traceback" not in p.stderr, p.stderr
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("stdout was closed (its reader went away): stopped at update "), p.stderr
    summary = json.loads((run / "train_summary.json").read_text())
    assert summary["resumes_from"] == summary["steps"] > 0  # a checkpoint at the stop
    assert (run / f"checkpoint_{summary['steps']}.npz").exists()


@pytest.mark.parametrize("variable, value", [
    ("MINITENSOR_THREADS", "0"), ("MINITENSOR_THREADS", "abc"), ("MINITENSOR_WGMMA", "2"),
    ("MINITENSOR_ONE_PASS_BACKWARD", "yes"), ("MINITENSOR_CUDA", "gpu"), ("MINITENSOR_ATTENTION", "bogus"),
    ("MINITENSOR_EMULATOR_CHECK", "bogus"), ("MINITENSOR_DIST_TIMEOUT", "-1"), ("MINITENSOR_DEBUG", "yes"),
])
def test_a_bad_environment_variable_is_one_line_naming_it_before_any_work(small_run, tmp_path, variable, value):
    run = tmp_path / "new"
    for argv in (["train", "--run-dir", run, *SMALL, "--max-steps", "1"],
                 ["translate", "--run-dir", small_run, "--beam", "1"]):
        status, out, err = cli(*argv, env={variable: value}, stdin=lines(1))
        assert_clean(status, err, 2, f"error: {variable} must be ")
        assert f", got {value}" in err and len(err.strip().splitlines()) == 1 and out == ""
    assert not run.exists()


def test_a_killed_vocabulary_training_leaves_nothing_in_the_temporary_folder(tmp_path):
    temp = tmp_path / "tmp"
    temp.mkdir()
    code = PAUSING.replace("from transformer.cli import run", """import sentencepiece as spm
real = spm.SentencePieceTrainer.train
def train(*a, **k):  # stopped while the vocabulary is trained (then killed)
    os.kill(os.getpid(), signal.SIGSTOP)
    return real(*a, **k)
spm.SentencePieceTrainer.train = train
from transformer.cli import run""")
    proc = subprocess.Popen([sys.executable, "-c", code, "train", "--run-dir", str(tmp_path / "run"), *SMALL,
                             "--max-steps", "1"], cwd=REPO, env={**os.environ, "TMPDIR": str(temp)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert stopped(proc)
    proc.kill()
    proc.communicate()
    assert list(temp.iterdir()) == []


def test_average_with_a_damaged_vocabulary_names_the_vocabulary(small_run, tmp_path):
    run = copy_run(small_run, tmp_path)
    (run / "spm.model").write_bytes(b"not a sentencepiece model")
    status, _, err = cli("average", "--run-dir", run, "--last", "2")
    assert_clean(status, err, 2, f"error: {run / 'spm.model'} is not a sentencepiece model that can be read")


def test_a_resumed_log_holds_each_update_once_whatever_the_log_held(small_run, tmp_path):
    run = copy_run(small_run, tmp_path)
    records = (run / "metrics.jsonl").read_text().splitlines()
    (run / "metrics.jsonl").write_text("\n".join(records[:3] + [records[1]] + records[3:]) + "\n")  # 1,2,3,2,4,5,6
    status, _, err = cli("train", "--run-dir", run, *SMALL, "--resume", "--max-steps", "8", "--save-every", "2")
    assert status == 0, err
    steps = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 9)), steps
    assert "held updates out of order or more than once: kept the last record of each" in err
