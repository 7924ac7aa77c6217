"""``python -m transformer data wmt14``, offline: a local HTTP server on 127.0.0.1 serves small
archives with the real layouts (the real member names, other language pairs beside the
English-German ones, SGM test sets), and misbehaves on request: cuts a download off halfway,
serves damaged bytes, stops answering."""
import contextlib
import gzip
import hashlib
import http.server
import io
import json
import shutil
import resource
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest

from transformer import cli, wmt14
from transformer.download import download, part_path

from ..helpers import MULTI30K, needs_multi30k

pytestmark = needs_multi30k

ROOT = Path(__file__).resolve().parents[2]


def multi30k(split, lang):
    with gzip.open(MULTI30K / f"{split}.{lang}.gz", "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def sgm(lines, lang):
    segs = "\n".join(f'<seg id="{i}">{line.replace("&", "&amp;")}</seg>' for i, line in enumerate(lines, 1))
    return f'<refset setid="newstest2014" srclang="any" trglang="{lang}">\n<doc docid="d1">\n{segs}\n</doc>\n</refset>\n'


def tgz(members: dict) -> bytes:
    """A .tgz holding ``members`` ({name: bytes}), in that order."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def text(lines) -> bytes:
    return ("\n".join(lines) + "\n").encode("utf-8")


@pytest.fixture(scope="module")
def archives():
    return small_archives()


def small_archives() -> dict:
    """{name: bytes}: the four archives, small, with the real members and some others beside them."""
    en, de = multi30k("train", "en"), multi30k("train", "de")
    ven, vde = multi30k("val", "en"), multi30k("val", "de")
    ten, tde = multi30k("test_2016_flickr", "en"), multi30k("test_2016_flickr", "de")
    crawl_de = text(de[300:600]).replace(b"\n", b"\r\n", 1)[:-1] + b" \xff\n"  # CRLF, and one invalid byte
    return {
        "training-parallel-europarl-v7.tgz": tgz({
            "training/europarl-v7.fr-en.fr": text(["Un chat."] * 5),
            "training/europarl-v7.de-en.de": text(de[:300]), "training/europarl-v7.de-en.en": text(en[:300])}),
        "training-parallel-commoncrawl.tgz": tgz({
            "commoncrawl.de-en.annotation": text(["x"] * 300), "commoncrawl.de-en.de": crawl_de,
            "commoncrawl.de-en.en": text(en[300:600]), "commoncrawl.fr-en.en": text(["A cat."] * 5)}),
        "training-parallel-nc-v9.tgz": tgz({
            "training/news-commentary-v9.de-en.de": text(de[600:700]),
            "training/news-commentary-v9.de-en.en": text(en[600:700])}),
        "dev.tgz": tgz({
            "dev/newstest2012.de": text(vde[:10]),
            "dev/newstest2013.de": text(vde[:50]), "dev/newstest2013.en": text(ven[:50]),
            "dev/newstest2014-deen-ref.en.sgm": sgm(ten[:40], "en").encode(),
            "dev/newstest2014-deen-src.de.sgm": sgm(tde[:40], "de").encode()}),
    }


class Server:
    """Serves ``files`` over HTTP with Range support; ``mode[name]`` makes it misbehave:
    "cut" (the next response stops halfway and the connection closes), "corrupt" (other bytes),
    "hang" (accepts, then never answers), "endless" (the file, then more bytes, with no length
    given), "trickle" (a byte every 50 ms). ``requests`` logs (name, Range header)."""

    def __init__(self, files: dict):
        self.files, self.mode, self.requests = files, {}, []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                name = self.path.rsplit("/", 1)[1]
                server.requests.append((name, self.headers.get("Range")))
                mode = server.mode.get(name)
                if mode == "hang":
                    time.sleep(5)
                    return
                if name not in server.files:
                    self.send_error(404)
                    return
                body = server.files[name]
                if mode == "corrupt":
                    body = body[:100] + bytes(b ^ 0xFF for b in body[100:200]) + body[200:]
                start = int(self.headers["Range"][6:-1]) if self.headers.get("Range") else 0
                self.send_response(206 if start else 200)
                if mode == "endless":
                    self.end_headers()
                    with contextlib.suppress(OSError):  # until the client hangs up
                        self.wfile.write(body[start:])
                        for _ in range(10_000):
                            self.wfile.write(b"\0" * 65536)
                    return
                self.send_header("Content-Length", str(len(body) - start))
                self.end_headers()
                if mode == "trickle":
                    with contextlib.suppress(OSError):
                        for i in range(start, len(body)):
                            self.wfile.write(body[i:i + 1])
                            self.wfile.flush()
                            time.sleep(0.05)
                    return
                if mode == "cut":
                    server.mode.pop(name)
                    self.wfile.write(body[start:start + (len(body) - start) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body[start:])

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def table(self) -> dict:
        """The archive table for these files, served here."""
        return {name: wmt14.Archive(f"{self.url}/wmt/{name}", len(data), hashlib.sha256(data).hexdigest())
                for name, data in self.files.items()}


@pytest.fixture
def server(archives, monkeypatch):
    s = Server(dict(archives))
    monkeypatch.setattr(wmt14, "ARCHIVES", s.table())
    yield s
    s.httpd.shutdown()


def run_cli(argv, capsys):
    status = cli.run(argv)
    return status, capsys.readouterr().err


def test_a_full_preparation_writes_six_files_and_a_manifest_that_describes_them(server, tmp_path, capsys):
    out = tmp_path / "wmt14"
    status, err = run_cli(["data", "wmt14", "--out", str(out), "--no-progress"], capsys)
    assert status == 0, err
    manifest = json.loads((out / "manifest.json").read_text())
    lines = {name: (out / name).read_text(encoding="utf-8").split("\n")[:-1] for name in wmt14._output_names()}
    assert {n: len(v) for n, v in lines.items()} == {"train.en": 700, "train.de": 700, "valid.en": 50, "valid.de": 50,
                                                     "test.en": 40, "test.de": 40}
    for name, info in manifest["files"].items():
        assert info["lines"] == len(lines[name])
        assert info["sha256"] == hashlib.sha256((out / name).read_bytes()).hexdigest()
    # the corpora in order, each side from its own member, the other language pairs left out
    en, de = multi30k("train", "en"), multi30k("train", "de")
    assert lines["train.en"] == en[:700] and lines["train.de"][:300] == de[:300]
    assert lines["train.de"][300] == de[300] and lines["train.de"][599] == de[599] + " \ufffd"  # CRLF gone, byte replaced
    assert manifest["lines_with_invalid_utf8_replaced"] == 1
    assert [c["lines"] for c in manifest["corpora"].values()] == [300, 300, 100, 50, 40]
    assert lines["test.de"] == multi30k("test_2016_flickr", "de")[:40]  # SGM segments, entities unescaped
    assert sorted(p.name for p in (out / "archives").iterdir()) == sorted(server.files)
    assert not (out / ".partial").exists()
    # a second run finds the folder prepared and fetches nothing
    asked = len(server.requests)
    status, err = run_cli(["data", "wmt14", "--out", str(out), "--no-progress"], capsys)
    assert status == 0 and "already prepared" in err and len(server.requests) == asked


def test_a_download_cut_off_halfway_continues_from_its_byte(server, tmp_path):
    name = "dev.tgz"
    size = len(server.files[name])
    server.mode[name] = "cut"
    dest = tmp_path / name
    download(server.table()[name].url, dest, server.table()[name].sha256, size, progress=False, retries=2)
    asked = [r for n, r in server.requests if n == name]
    assert asked == [None, f"bytes={size // 2}-"]
    assert dest.read_bytes() == server.files[name] and not part_path(dest).exists()


def test_a_run_that_gave_up_is_resumed_by_the_next_run(server, tmp_path, capsys):
    out = tmp_path / "wmt14"
    name = "training-parallel-commoncrawl.tgz"
    server.mode[name] = "cut"
    status, err = run_cli(["data", "wmt14", "--out", str(out), "--no-progress", "--retries", "0"], capsys)
    half = len(server.files[name]) // 2
    assert status == 1 and f"{half:,} bytes are kept" in err and "next run continues" in err
    assert part_path(out / "archives" / name).stat().st_size == half
    assert not (out / "manifest.json").exists() and not (out / "train.en").exists()
    status, err = run_cli(["data", "wmt14", "--out", str(out), "--no-progress"], capsys)
    assert status == 0, err
    assert [r for n, r in server.requests if n == name] == [None, f"bytes={half}-"]
    # the two that had finished were not fetched again
    assert sum(n == "training-parallel-europarl-v7.tgz" for n, _ in server.requests) == 1


def test_a_corrupted_archive_is_named_deleted_and_the_error_says_what_to_do(server, tmp_path, capsys):
    out = tmp_path / "wmt14"
    name = "training-parallel-nc-v9.tgz"
    server.mode[name] = "corrupt"
    status, err = run_cli(["data", "wmt14", "--out", str(out), "--no-progress"], capsys)
    assert status == 1
    assert err.count("\n") == 1 and f"error: {name}: SHA-256" in err and "run again" in err
    assert not (out / "archives" / name).exists() and not part_path(out / "archives" / name).exists()
    assert not (out / "manifest.json").exists() and not list(out.glob("train.*"))


def test_archives_from_a_folder_need_no_network(archives, tmp_path, monkeypatch, capsys):
    folder = tmp_path / "have"
    folder.mkdir()
    for name, data in archives.items():
        (folder / name).write_bytes(data)
    table = {n: wmt14.Archive(f"http://127.0.0.1:9/{n}", len(d), hashlib.sha256(d).hexdigest())
             for n, d in archives.items()}  # nothing listens on port 9
    monkeypatch.setattr(wmt14, "ARCHIVES", table)
    out = tmp_path / "wmt14"
    status, err = run_cli(["data", "wmt14", "--out", str(out), "--from", str(folder), "--no-progress"], capsys)
    assert status == 0, err
    assert json.loads((out / "manifest.json").read_text())["files"]["train.en"]["lines"] == 700
    assert not (out / "archives").exists()  # used where they are, not copied
    # a damaged archive of the user's is named and left alone (exit 2: the input is at fault)
    shutil.rmtree(out)
    damaged = folder / "dev.tgz"
    damaged.write_bytes(archives["dev.tgz"][:-10])
    status, err = run_cli(["data", "wmt14", "--out", str(out), "--from", str(folder), "--no-progress"], capsys)
    assert status == 2 and f"{damaged}: SHA-256" in err and "download it again" in err and damaged.exists()
    # archives missing from the folder are all named at once, before any is checked
    damaged.unlink()
    (folder / "training-parallel-nc-v9.tgz").unlink()
    status, err = run_cli(["data", "wmt14", "--out", str(out), "--from", str(folder), "--no-progress"], capsys)
    assert status == 2 and "missing training-parallel-nc-v9.tgz, dev.tgz" in err, err
    assert "http://127.0.0.1:9/dev.tgz" in err


def test_a_server_that_stops_answering_times_out_with_a_clear_error(server, tmp_path, capsys):
    server.mode["training-parallel-europarl-v7.tgz"] = "hang"
    start = time.perf_counter()
    status, err = run_cli(["data", "wmt14", "--out", str(tmp_path / "w"), "--no-progress", "--timeout", "0.5",
                           "--retries", "1"], capsys)
    assert status == 1 and time.perf_counter() - start < 4.5  # two waits of 0.5 s and a pause of 1 s
    assert "stopped answering (timed out) (tried 2 times)" in err and err.count("\n") == 1


def test_a_server_that_sends_past_the_files_size_is_stopped_there(server, tmp_path, capsys):
    name = "training-parallel-europarl-v7.tgz"
    server.mode[name] = "endless"
    out = tmp_path / "w"
    status, err = run_cli(["data", "wmt14", "--out", str(out), "--no-progress"], capsys)
    size = len(server.files[name])
    assert status == 1 and err.count("\n") == 1
    assert f"the server sent more than the {size:,} bytes the file has, so it is not the file expected" in err
    assert "free some space" not in err and not list((out / "archives").glob(f"{name}*"))


def test_a_server_that_trickles_times_out_as_one_that_stops(server, tmp_path, capsys):
    server.mode["dev.tgz"] = "trickle"
    start = time.perf_counter()
    status, err = run_cli(["data", "wmt14", "--out", str(tmp_path / "w"), "--no-progress", "--timeout", "0.5",
                           "--retries", "0"], capsys)
    assert status == 1 and time.perf_counter() - start < 30
    assert "the server stopped answering (timed out: the server sent " in err and " bytes in 0.5 s)" in err, err
    assert "bytes are kept in" in err  # what came is kept for the next run


def test_no_network_is_one_line_naming_the_url_and_the_offline_way(server, tmp_path, capsys):
    status, err = run_cli(["data", "wmt14", "--out", str(tmp_path / "w"), "--no-progress",
                           "--url-base", "http://127.0.0.1:9/mirror"], capsys)
    assert status == 1 and err.count("\n") == 1
    assert "http://127.0.0.1:9/mirror/training-parallel-europarl-v7.tgz" in err and "--from" in err


def test_a_full_disk_leaves_no_file_under_a_final_name(archives, tmp_path):
    """A real write failure: the process may write files of at most 20 kB (RLIMIT_FSIZE), less
    than the training text; the write fails with EFBIG as a full disk fails with ENOSPC."""
    folder = tmp_path / "have"
    folder.mkdir()
    for name, data in archives.items():
        (folder / name).write_bytes(data)
    table = {n: (len(d), hashlib.sha256(d).hexdigest()) for n, d in archives.items()}
    script = f"""
import sys
from transformer import cli, wmt14
wmt14.ARCHIVES = {{n: wmt14.Archive("http://127.0.0.1:9/" + n, s, h) for n, (s, h) in {table!r}.items()}}
sys.exit(cli.run(["data", "wmt14", "--out", sys.argv[1], "--from", sys.argv[2], "--no-progress"]))
"""

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))

    out = tmp_path / "wmt14"
    done = subprocess.run([sys.executable, "-c", script, str(out), str(folder)], capture_output=True, text=True,
                          cwd=ROOT, preexec_fn=limit)
    assert done.returncode == 1, done.stderr
    assert "File too large" in done.stderr and "nothing was left under the final names" in done.stderr
    assert sorted(p.name for p in out.iterdir()) == []


def test_train_reads_a_prepared_folder_and_evaluate_scores_its_test_set(server, tmp_path, capsys):
    out, run = tmp_path / "wmt14", tmp_path / "run"
    assert run_cli(["data", "wmt14", "--out", str(out), "--no-progress"], capsys)[0] == 0
    small = ["--vocab-size", "300", "--d-model", "32", "--n-heads", "2", "--d-ff", "64", "--layers", "1",
             "--max-tokens", "800", "--update-freq", "1", "--warmup", "10"]
    status, err = run_cli(["train", "--preset", "wmt14-base", "--data-dir", str(out), "--run-dir", str(run),
                           "--device", "cpu", "--max-steps", "3", "--eval-every", "3", "--bleu-sentences", "5",
                           "--no-progress", *small], capsys)
    assert status == 0, err
    assert "kept 700 of 700 pairs" in err
    assert (run / "checkpoint_3.npz").exists()
    status = cli.run(["evaluate", "--run-dir", str(run), "--data-dir", str(out), "--beam", "1", "--limit", "5"])
    printed = capsys.readouterr()
    assert status == 0, printed.err
    assert f" on WMT14 test in {out}, the first 5 sentences, checkpoint_3, beam 1  (" in printed.out
    result = json.loads((run / "evaluations" / "test_checkpoint_3_beam1_first5.json").read_text())
    assert result["sentences"] == 5 and result["split"] == "test"
