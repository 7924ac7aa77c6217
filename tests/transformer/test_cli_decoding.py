"""translate and evaluate under hostile use: every flag bounded (one line, exit 2, before any
work), results never overwritten, lines longer than the model takes translated in parts or
truncated with a note naming them, ``translate --output`` written as it goes and kept on
Ctrl-C, and the smaller cases (invalid UTF-8 on stdin, a file that is no checkpoint, a bad
device).

Every case runs the real CLI (``python -m transformer``) in a subprocess."""
import json
import signal
import subprocess
import sys
import time

import pytest

from transformer import data as D

from ..helpers import MULTI30K, REPO, assert_clean, cli, copy_run, default_sigint, needs_multi30k

pytestmark = needs_multi30k


# ------------------------------------------------------------------ every flag bounded
@pytest.mark.parametrize("command, flags, message", [
    ("translate", ["--beam", "1000"], "error: --beam must be in [1, 64], got 1000 (--beam-max raises the upper bound)"),
    ("translate", ["--beam", "0"], "error: --beam must be a whole number in [1, 10000], got 0"),
    ("translate", ["--beam", "-2"], "error: --beam must be a whole number in [1, 10000], got -2"),
    ("translate", ["--beam", "8", "--beam-max", "0"], "error: --beam-max must be a whole number in [1, 10000], got 0"),
    ("translate", ["--alpha", "-1"], "error: --alpha must be a finite number in [0, 100], got -1"),
    ("translate", ["--alpha", "nan"], "error: --alpha must be a finite number in [0, 100], got nan"),
    ("evaluate", ["--alpha", "inf"], "error: --alpha must be a finite number in [0, 100], got inf"),
    ("translate", ["--average", "0"], "error: --average must be a whole number in [1, 1000000], got 0"),
    ("evaluate", ["--limit", "0"], "error: --limit must be a whole number in [1, 1000000000000], got 0"),
    ("evaluate", ["--limit", "-5"], "error: --limit must be a whole number in [1, 1000000000000], got -5"),
    ("translate", ["--max-pieces", "0"], "error: --max-pieces must be a whole number in [1, 1048576], got 0"),
    ("translate", ["--memory-gib", "0"], "error: --memory-gib must be a finite number in (0, 1048576], got 0"),
    ("translate", ["--long-lines", "drop"], "error: --long-lines must be one of split, truncate, error, got drop"),
    ("translate", ["--device", "tpu"], "error: --device: "),
    ("evaluate", ["--device", "cuda:x"], "error: --device: unknown device 'cuda:x'"),
    ("evaluate", ["--src", "x.en"], "error: --src and --ref go together"),
    ("evaluate", ["--ref", "x.de"], "error: --src and --ref go together"),
    ("evaluate", ["--src", "missing.en", "--ref", "missing.de"], "error: --src missing.en: no such file"),
    ("evaluate", ["--src", "README.md", "--ref", "missing.de"], "error: --ref missing.de: no such file"),
    ("average", ["--last", "0"], "error: --last must be a whole number in [1, 1000000], got 0"),
    ("average", ["--last", "-1"], "error: --last must be a whole number in [1, 1000000], got -1"),
])
def test_out_of_range_flags_are_refused_in_one_line_before_any_work(small_run, tmp_path, command, flags, message):
    run = copy_run(small_run, tmp_path)
    before = sorted(p.name for p in run.iterdir())
    status, out, err = cli(command, "--run-dir", run, *flags, stdin="A dog runs.\n")
    assert_clean(status, err, 2, message)
    assert out == "" and "translating" not in err
    assert sorted(p.name for p in run.iterdir()) == before  # no evaluations/, no average.npz


def test_train_bounds_its_beam_and_device_too(tmp_path):
    status, _, err = cli("train", "--run-dir", tmp_path / "run", "--data-dir", MULTI30K, "--beam-size", "65")
    assert_clean(status, err, 2, "error: --beam-size must be a whole number in [1, 64], got 65")
    status, _, err = cli("train", "--run-dir", tmp_path / "run", "--data-dir", MULTI30K, "--device", "tpu")
    assert_clean(status, err, 2, "error: --device: ")
    assert not (tmp_path / "run").exists()


def test_a_beam_over_the_default_bound_runs_when_beam_max_allows_it(small_run):
    status, out, err = cli("translate", "--run-dir", small_run, "--beam", "80", "--beam-max", "80",
                           stdin="A dog runs.\n")
    assert status == 0, err
    assert len(out.splitlines()) == 1 and out.strip()


def test_a_sentence_that_alone_needs_more_decoding_memory_than_allowed_is_refused(small_run):
    status, _, err = cli("translate", "--run-dir", small_run, "--memory-gib", "0.0001", stdin="A dog runs.\n")
    assert_clean(status, err, 2, "error: decoding one sentence of ")
    assert "more than the 0.0001 GiB allowed" in err


# ------------------------------------------------------------------ results kept
# evaluate as the command line runs it, on the first 4 sentences of each Multi30k split (the
# whole test set would take the tiny model a minute to decode)
FOUR_SENTENCES = """
import sys
from transformer import cli, data
real = data.multi30k
data.multi30k = lambda *a, **k: tuple(side[:4] for side in real(*a, **k))
sys.exit(cli.run(sys.argv[1:]))
"""


def evaluate(run, *flags):
    status, out, err = cli("evaluate", "--run-dir", run, "--data-dir", MULTI30K, "--beam", "1", *flags,
                           code=FOUR_SENTENCES)
    assert status == 0, err
    return out, err


def test_evaluate_keeps_every_result_with_what_it_scored(small_run, tmp_path):
    """Each evaluation's file, and its BLEU line, say what was scored: the set, how much of it,
    the weights and the beam."""
    run = copy_run(small_run, tmp_path)
    out, _ = evaluate(run)  # the default test set, whole: the run's headline result
    assert out.startswith("BLEU ") and " on Multi30k test_2016_flickr, 4 sentences, checkpoint_6, beam 1  (nrefs:1" in out
    headline = json.loads((run / "evaluation.json").read_text())
    assert headline["split"] == "test_2016_flickr" and headline["sentences"] == 4
    assert headline["checkpoint"] == "checkpoint_6" and headline["checkpoint_files"] == [str(run / "checkpoint_6.npz")]
    assert headline["source"] == "multi30k test_2016_flickr.en" and headline["reference"] == "multi30k test_2016_flickr.de"
    first = run / "evaluations" / "test_2016_flickr_checkpoint_6_beam1.json"
    assert json.loads(first.read_text()) == headline
    assert len(first.with_suffix(".txt").read_text().splitlines()) == 4
    kept = {p.name: p.read_bytes() for p in [run / "evaluation.json", run / "hypotheses.txt", first]}

    out, _ = evaluate(run, "--split", "val", "--limit", "2")
    assert " on Multi30k val, the first 2 sentences, checkpoint_6, beam 1  (" in out
    evaluate(run, "--split", "val", "--limit", "2")  # the same again: a second file, not a replacement
    out, _ = evaluate(run, "--average", "2")
    assert " on Multi30k test_2016_flickr, 4 sentences, average2-checkpoint_6, beam 1  (" in out
    src, ref = tmp_path / "mine.en", tmp_path / "mine.de"
    src.write_text("A dog runs.\nTwo men sit.\n")
    ref.write_text("Ein Hund rennt.\nZwei Männer sitzen.\n")
    out, _ = evaluate(run, "--src", src, "--ref", ref)
    assert f" on {src}, 2 sentences, checkpoint_6, beam 1  (" in out
    names = sorted(p.name for p in (run / "evaluations").glob("*.json"))
    assert names == ["mine_checkpoint_6_beam1.json", "test_2016_flickr_average2-checkpoint_6_beam1.json",
                     "test_2016_flickr_checkpoint_6_beam1.json", "val_checkpoint_6_beam1_first2.json",
                     "val_checkpoint_6_beam1_first2_2.json"]
    mine = json.loads((run / "evaluations" / "mine_checkpoint_6_beam1.json").read_text())
    assert mine["source"] == str(src) and mine["reference"] == str(ref) and mine["sentences"] == 2
    averaged = json.loads((run / "evaluations" / "test_2016_flickr_average2-checkpoint_6_beam1.json").read_text())
    assert averaged["checkpoint_files"] == [str(run / "checkpoint_4.npz"), str(run / "checkpoint_6.npz")]
    # the headline was written by the first, default evaluation only... until a default one runs again
    assert kept[first.name] == first.read_bytes()
    assert json.loads((run / "evaluation.json").read_text())["checkpoint"] == "average2-checkpoint_6"


def test_a_limited_evaluation_leaves_the_headline_result_alone(small_run, tmp_path):
    run = copy_run(small_run, tmp_path)
    (run / "evaluation.json").write_text('{"bleu": 36.5}')
    (run / "hypotheses.txt").write_text("the whole test set's hypotheses\n")
    evaluate(run, "--limit", "2")
    evaluate(run, "--split", "val")
    assert (run / "evaluation.json").read_text() == '{"bleu": 36.5}'
    assert (run / "hypotheses.txt").read_text() == "the whole test set's hypotheses\n"


# ------------------------------------------------------------------ long lines
def long_line(words: int) -> str:
    sentences = D.read_lines(MULTI30K / "val.en.gz")
    text = []
    for s in sentences:
        text += s.split()
        if len(text) >= words:
            return " ".join(text[:words])
    raise AssertionError("not enough text")


@pytest.mark.parametrize("extra", [[], ["--max-pieces", "100000"]])
def test_a_line_longer_than_the_model_takes_is_translated_in_parts_with_a_note(small_run, extra):
    # the SMALL model's positions hold 1024 pieces, and its training sources far fewer; this line
    # has over 2000 pieces (the tokenizer of 250 pieces cuts words small)
    lines = ["A dog runs.", long_line(600), "Two men sit."]
    status, out, err = cli("translate", "--run-dir", small_run, "--beam", "1", *extra, stdin="\n".join(lines) + "\n")
    assert status == 0, err
    got = out.splitlines()
    assert len(got) == 3 and all(got), out
    note = next(x for x in err.splitlines() if x.startswith("note: line 2: "))
    parts = int(note.split("translated in ")[1].split()[0])
    assert parts >= 2 and len(got[1].split()) >= parts  # every part gave at least one word
    assert not any(x.startswith("note: line 1") or x.startswith("note: line 3") for x in err.splitlines())


def test_a_word_longer_than_the_limit_is_cut_between_its_pieces_and_all_of_it_translated(small_run):
    status, out, err = cli("translate", "--run-dir", small_run, "--beam", "1", "--max-pieces", "50",
                           stdin="x" * 500 + "\n")
    assert status == 0 and len(out.splitlines()) == 1, err
    note = next(x for x in err.splitlines() if x.startswith("note: line 1: "))
    pieces, parts = int(note.split(": ")[2].split()[0]), int(note.split("translated in ")[1].split()[0])
    assert pieces > 50 and parts == -(-pieces // 50)  # every piece in a part of at most 50 (it kept only 50)
    assert "a word over the limit cut between its pieces" in note


def test_long_lines_truncate_says_so_and_error_stops_naming_the_line(small_run, tmp_path):
    lines = "A dog runs.\n" + long_line(600) + "\n"
    status, out, err = cli("translate", "--run-dir", small_run, "--beam", "1", "--long-lines", "truncate",
                           "--max-pieces", "40", stdin=lines)
    assert status == 0 and len(out.splitlines()) == 2, err
    assert "note: line 2: " in err and "only its first 40 pieces were translated" in err
    output = tmp_path / "out.txt"
    status, _, err = cli("translate", "--run-dir", small_run, "--beam", "1", "--long-lines", "error",
                         "--max-pieces", "40", "--output", output, stdin=lines)
    assert_clean(status, err, 2, "error: line 2: ")
    assert "more than the 40 translated whole" in err
    assert not output.exists() and not list(tmp_path.glob(".*partial"))


# ------------------------------------------------------------------ translate --output
def test_the_output_path_is_checked_before_any_work(small_run, tmp_path):
    for output, message in [(tmp_path / "nowhere" / "out.txt", "the folder"), (tmp_path, "a directory, not a file")]:
        status, _, err = cli("translate", "--run-dir", small_run, "--output", output, stdin="A dog runs.\n")
        assert_clean(status, err, 2, f"error: --output {output}: ")
        assert message in err and "translating" not in err


def test_ctrl_c_keeps_the_lines_translated_so_far_and_says_how_many(small_run, tmp_path):
    """Lines come on a pipe that stays open: the 300 that came are translated and written, and the
    command then waits for more input, so Ctrl-C always comes before the end (a file of lines
    could be translated whole before the signal arrived, on a busy machine)."""
    output = tmp_path / "out.txt"
    partials = lambda: list(tmp_path.glob(".out.txt.*.partial"))  # noqa: E731 (the writer's temporary file)
    cmd = [sys.executable, "-m", "transformer", "translate", "--run-dir", str(small_run), "--beam", "1",
           "--output", str(output)]
    proc = subprocess.Popen(cmd, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=default_sigint)
    proc.stdin.write("\n".join(D.read_lines(MULTI30K / "train.en.gz")[:300]) + "\n")
    proc.stdin.flush()
    deadline = time.time() + 240
    while sum(p.read_text().count("\n") for p in partials()) < 300:  # written as they come
        assert proc.poll() is None, proc.stderr.read()
        assert time.time() < deadline, "no lines written within 240 s"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=120)
    err = proc.stderr.read()
    proc.stdin.close()
    assert proc.returncode == 130, err
    last = err.strip().splitlines()[-1]
    kept = output.read_text().splitlines()
    assert last == f"interrupted: the {len(kept)} line(s) translated so far are in {output}", err
    assert len(kept) == 300 and not partials()


def test_a_progress_bar_goes_to_stderr_when_the_output_is_a_pipe(small_run):
    status, out, err = cli("translate", "--run-dir", small_run, "--beam", "1", stdin="A dog runs.\nA cat.\n")
    assert status == 0 and len(out.splitlines()) == 2
    assert "translating: 2line" in err  # stdout is a pipe here; stdin has no known length
    status, out, err = cli("translate", "--run-dir", small_run, "--beam", "1", "--no-progress", stdin="A dog.\n")
    assert status == 0 and "translating" not in err


# ------------------------------------------------------------------ the smaller cases
def test_invalid_utf8_on_stdin_names_the_line(small_run):
    status, out, err = cli("translate", "--run-dir", small_run, "--beam", "1", stdin=b"A dog runs.\n\xff\xfe x\n")
    assert_clean(status, err, 2, "error: stdin:2: invalid UTF-8")


def test_a_file_that_is_no_checkpoint_is_called_so(small_run, tmp_path):
    status, _, err = cli("translate", "--run-dir", small_run, "--checkpoint", small_run / "spm.model",
                         stdin="A dog.\n")
    assert_clean(status, err, 2, f"error: {small_run / 'spm.model'} is not a checkpoint")
    status, _, err = cli("translate", "--run-dir", small_run, "--checkpoint", tmp_path, stdin="A dog.\n")
    assert_clean(status, err, 2, f"error: {tmp_path} is a directory, not a checkpoint")
    assert "pickle" not in err and "damaged" not in err
