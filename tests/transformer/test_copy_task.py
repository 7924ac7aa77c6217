"""The copy task end to end: a reduced run converges, writes its files, and greedy decoding copies."""
import signal
import subprocess
import sys
import time
from dataclasses import replace

import numpy as np
import pytest

from minitensor import routes
from transformer import TransformerConfig
from transformer.copytask import OUTPUTS, CopyTaskSettings, make_batch, score, train_copy_task

from ..helpers import REPO, strict_json


def small_model(d_model: int, d_ff: int) -> TransformerConfig:
    """A 1+1-layer, 2-head model (its vocabulary and positions are the task's)."""
    return TransformerConfig(10, d_model=d_model, n_heads=2, d_ff=d_ff, n_encoder_layers=1, n_decoder_layers=1,
                             dropout=0.0)


def test_batches_are_source_bos_shifted_target_and_eos_terminated():
    s = CopyTaskSettings(vocab=9, min_length=2, max_length=5)
    src, tgt_in, tgt_out = make_batch(np.random.default_rng(0), 8, s)
    for i in range(8):
        x = src[i][src[i] != 0]
        assert 2 <= len(x) <= 5 and np.all(x >= 3)
        assert tgt_in[i, 0] == 1 and np.array_equal(tgt_in[i, 1:len(x) + 1], x)
        assert np.array_equal(tgt_out[i, :len(x)], x) and tgt_out[i, len(x)] == 2


def test_score_counts_exact_and_token_matches():
    target = np.array([[5, 6, 2], [7, 2, 0]])
    pred = np.array([[5, 6, 2], [7, 5, 0]])
    exact, tok = score(pred, target)
    assert exact == 0.5 and tok == 4 / 5


def test_reduced_copy_task_converges_and_saves_outputs(tmp_path, capsys):
    s = CopyTaskSettings(vocab=10, min_length=4, max_length=6, model=small_model(32, 64),
                         batch=64, steps=800, warmup=50, lr_factor=1.0, eval_every=50, eval_size=100,
                         stop_at=1.0, test_size=100, run_dir=str(tmp_path), show_progress=False)
    summary = train_copy_task(s)
    assert summary["exact_match"] >= 0.95, summary
    assert summary["token_accuracy"] >= 0.98
    saved = strict_json((tmp_path / "summary.json").read_text())
    assert {"exact_match", "token_accuracy", "train_seconds", "steps"} <= set(saved)
    for name in ("loss.png", "attention.png", "metrics.jsonl", "examples.txt"):
        assert (tmp_path / name).stat().st_size > 0
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == summary["steps"]
    first, last = strict_json(lines[0]), strict_json(lines[-1])
    for line in lines:
        strict_json(line)
    assert last["loss"] < first["loss"] / 10
    # it stopped at its target, and says so in one line rather than leaving a bar at 13%
    if summary["steps"] < s.steps:
        assert saved["stopped_by"] == "target"
        assert f"stopped at update {summary['steps']} of {s.steps}: 100.0% exact match on validation" \
            in capsys.readouterr().err


def test_the_reference_engine_alone_trains_the_copy_task(tmp_path, monkeypatch):
    """The model as the paper writes it (not fused), the speed layer's routes off: every op of the
    run and the optimizer's update are their reference code, and the copy task still learns to copy."""
    chosen = []
    choose = routes.choose

    def spy(op, xp, arrays, params):
        chosen.append(choose(op, xp, arrays, params))
        return chosen[-1]

    monkeypatch.setattr(routes, "choose", spy)
    s = CopyTaskSettings(vocab=10, min_length=4, max_length=6, model=small_model(32, 64),
                         batch=64, steps=800, warmup=50, lr_factor=1.0, eval_every=50, eval_size=100,
                         stop_at=1.0, test_size=100, run_dir=str(tmp_path), show_progress=False, fused=False)
    with routes.off():
        summary = train_copy_task(s)
    assert summary["exact_match"] >= 0.95, summary
    assert chosen and all(fn.__module__.startswith("minitensor.ops.") or fn.__module__ == "minitensor.optim"
                          for fn in chosen)
    assert "Adam" in {fn.__name__ for fn in chosen}
    assert {"Softmax", "LayerNorm", "CrossEntropy"} <= {fn.__name__ for fn in chosen} or \
        {"ScaledDotProductAttention", "LayerNorm", "CrossEntropy"} <= {fn.__name__ for fn in chosen}


def test_a_copy_task_that_runs_every_update_says_so_and_names_the_missed_target(tmp_path, capsys):
    """When the updates run out before the target, the closing line says all ran and the target was missed."""
    s = CopyTaskSettings(vocab=10, min_length=4, max_length=6, model=small_model(16, 16), batch=8,
                         steps=3, eval_every=3, eval_size=10, stop_at=1.0, test_size=10, run_dir=str(tmp_path),
                         show_progress=False)
    summary = train_copy_task(s)
    assert summary["stopped_by"] == "steps" and summary["steps"] == 3
    err = capsys.readouterr().err
    assert "ran all 3 updates:" in err and "(short of the target 100%)" in err


def test_the_copy_tasks_profile_times_n_updates_after_the_first_and_saves_the_table(tmp_path, capsys):
    """--profile 2: updates 2 and 3 are profiled (not the first, which allocates), the table goes to
    stderr and the same rows to profile.json; the run itself is unchanged."""
    s = CopyTaskSettings(vocab=10, min_length=4, max_length=6, model=small_model(16, 16), batch=8,
                         steps=4, eval_every=4, eval_size=10, stop_at=None, test_size=10, run_dir=str(tmp_path),
                         show_progress=False, profile=2)
    summary = train_copy_task(s)
    saved = strict_json((tmp_path / "profile.json").read_text())
    assert saved["opened"] == 2 and summary["steps"] == 4
    rows = {r["op"]: r for r in saved["rows"]}
    # per update, 1+1 layers: the encoder's Q, K, V in one product (Linears), its attention output and
    # 2 feed-forward products; the decoder's Q, K, V in one and the memory's K, V in one, the
    # cross-attention's Q, 2 attention outputs, 2 feed-forward; 1 output layer
    assert rows["Linear"]["calls"] == 2 * 9 and rows["Linears"]["calls"] == 2 * 3
    assert rows["Adam.step"]["calls"] == 2
    err = capsys.readouterr().err
    assert "profile of updates 2-3" in err and "Linear" in err
    unprofiled = train_copy_task(replace(s, profile=0, run_dir=str(tmp_path / "plain")))
    assert unprofiled["final_loss"] == summary["final_loss"]


def test_a_second_run_into_the_same_folder_says_it_replaces_the_first(tmp_path, capsys):
    s = CopyTaskSettings(vocab=10, min_length=4, max_length=6, model=small_model(16, 16), batch=8, steps=2,
                         eval_every=2, eval_size=10, test_size=10, run_dir=str(tmp_path), show_progress=False)
    train_copy_task(s)
    assert "note:" not in capsys.readouterr().err
    train_copy_task(s)
    assert (f"note: {tmp_path} holds an earlier copy-task run (summary.json, loss.png, attention.png, examples.txt, "
            "metrics.jsonl): its files are replaced") in capsys.readouterr().err


def _copy_task_until(tmp_path, updates: int) -> subprocess.Popen:
    """The quick start's command, with no target and no validation, once ``updates`` are logged (to
    the log's temporary file: it replaces an earlier run's metrics.jsonl once it is whole)."""
    run = tmp_path / "run"

    def logged() -> int:
        return sum(len(p.read_text().splitlines()) for p in run.glob(".metrics.jsonl.*.partial"))
    proc = subprocess.Popen([sys.executable, str(REPO / "examples" / "copy_task.py"), "--run-dir", str(run),
                             "--steps", "100000", "--stop-at", "none", "--eval-every", "100000", "--test-size", "20",
                             "--no-progress"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    try:
        while logged() < updates:
            assert proc.poll() is None, proc.communicate()
            assert time.time() < deadline, f"no {updates} updates within 120 s"
            time.sleep(0.05)
    except BaseException:
        proc.kill()  # (a run of 100000 updates is not left behind)
        proc.communicate()
        raise
    return proc


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_copy_task_stops_after_the_update_tests_saves_everything_and_exits_130(tmp_path, sig):
    proc = _copy_task_until(tmp_path, 3)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in err, err
    run = tmp_path / "run"
    steps = [strict_json(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, len(steps) + 1))
    again = "press Ctrl-C again" if sig == signal.SIGINT else "send SIGTERM again"
    assert f"{sig.name}: stopping after this update, then testing and saving; {again} to stop at once" in err
    assert f"interrupted ({sig.name}) after update {len(steps)} of 100000: not validated yet" in err
    summary = strict_json((run / "summary.json").read_text())
    assert summary["stopped_by"] == "interrupted" and summary["steps"] == len(steps)
    assert "fresh sequences, never seen in training:" in out
    for name in OUTPUTS:
        assert (run / name).stat().st_size > 0, name


def test_a_second_ctrl_c_stops_the_copy_task_at_once_with_its_log_whole(tmp_path):
    proc = _copy_task_until(tmp_path, 3)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in err, err
    # the second signal came during the update in flight ("interrupted"), or after training
    # stopped, during the test or the plots (then the run said why it stopped first)
    assert err.strip().splitlines()[-1] == "interrupted" or "interrupted (SIGINT) after update" in err, err
    for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines():
        strict_json(line)
