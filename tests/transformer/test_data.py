"""Reading parallel text: clear errors for bad input, filtering with counts, Multi30k and WMT sources."""
import gzip
import shutil

import pytest

from transformer import data
from transformer.data import DataError
from transformer.download import DownloadError

from ..helpers import MULTI30K, needs_multi30k


def write(path, text, gz=False):
    raw = text.encode("utf-8") if isinstance(text, str) else text
    if gz:
        with gzip.open(path, "wb") as f:
            f.write(raw)
    else:
        path.write_bytes(raw)
    return path


def test_read_lines_handles_gzip_and_strips_line_endings(tmp_path):
    p = write(tmp_path / "a.txt.gz", "Ein Hund.\r\nZwei Katzen.\n", gz=True)
    assert data.read_lines(p) == ["Ein Hund.", "Zwei Katzen."]


def test_invalid_utf8_names_the_file_and_line(tmp_path):
    p = write(tmp_path / "bad.de", b"gut\nauch gut\nschlecht \xff\n")
    with pytest.raises(DataError, match=r"bad.de:3: invalid UTF-8"):
        data.read_lines(p)


def test_line_count_mismatch_names_both_paths_and_counts(tmp_path):
    a = write(tmp_path / "x.en", "a\nb\nc\n")
    b = write(tmp_path / "x.de", "a\nb\n")
    with pytest.raises(DataError, match=r"x.en has 3 lines, .*x.de has 2 lines"):
        data.read_parallel(a, b)


def test_missing_file_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        data.read_lines(tmp_path / "nope.txt")


def test_filter_reports_each_rule():
    src = ["a b", "", "a", "one two three four five six seven", "x y z"]
    tgt = ["c d", "e", "", "eins", "u v w " * 30]
    kept_src, kept_tgt, report = data.filter_pairs(src, tgt, max_len=50, max_ratio=3.0)
    assert kept_src == ["a b"] and kept_tgt == ["c d"]
    assert (report.total, report.empty, report.too_long, report.bad_ratio, report.kept) == (5, 2, 1, 1, 1)
    assert report.kept_index == [0]
    assert "kept 1 of 5 pairs" in str(report)


def test_sgm_segments_are_extracted_and_unescaped(tmp_path):
    sgm = ('<srcset setid="newstest2014" srclang="any">\n<doc docid="x">\n'
           '<seg id="1">Gutach: Mehr Sicherheit &amp; Fu&szlig;g&auml;nger</seg>\n'
           '<seg id="2"> Zweiter Satz. </seg>\n</doc>\n</srcset>\n')
    p = write(tmp_path / "newstest2014.de.sgm", sgm)
    assert data.read_sgm(p) == ["Gutach: Mehr Sicherheit & Fußgänger", "Zweiter Satz."]
    plain = write(tmp_path / "newstest2014.en", "Gutach: more safety\nSecond sentence.\n")
    src, tgt = data.read_parallel(plain, p)
    assert len(src) == len(tgt) == 2
    with pytest.raises(DataError, match="no <seg>"):
        data.read_sgm(plain)


@needs_multi30k
def test_multi30k_from_a_local_directory_has_the_documented_sizes():
    for split, n in (("train", 29000), ("val", 1014), ("test_2016_flickr", 1000)):
        en, de = data.multi30k(split, root=MULTI30K)
        assert len(en) == len(de) == n
    assert en[0] and de[0]
    with pytest.raises(DataError, match="unknown Multi30k split"):
        data.multi30k("test2017", root=MULTI30K)


@needs_multi30k
def test_multi30k_download_verifies_checksums(tmp_path, monkeypatch):
    """The downloader fetches into the cache and checks sha256 (a file:// mirror stands in for the network)."""
    monkeypatch.setenv("MINITENSOR_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("MULTI30K_DIR", raising=False)
    mirror = "file://" + str(MULTI30K) + "/"
    folder = data.multi30k_files(url=mirror)
    assert sorted(p.name for p in folder.iterdir()) == sorted(data.MULTI30K_SHA256)
    # a corrupted mirror is rejected and leaves nothing half-written behind
    bad = tmp_path / "bad"
    shutil.copytree(MULTI30K, bad)
    write(bad / "val.de.gz", b"not the real file")
    (folder / "val.de.gz").unlink()
    with pytest.raises(DownloadError, match="val.de.gz"):
        data.multi30k_files(url="file://" + str(bad) + "/")
    assert not list(folder.glob("*.part")) and not (folder / "val.de.gz").exists()


@needs_multi30k
def test_multi30k_dir_is_read_without_a_root_and_never_downloads(tmp_path, monkeypatch):
    """$MULTI30K_DIR is where the command line and the lessons read Multi30k when no folder is
    given; the cache is not touched."""
    monkeypatch.setenv("MINITENSOR_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MULTI30K_DIR", str(MULTI30K))
    assert data.multi30k_files() == MULTI30K
    assert not (tmp_path / "cache").exists()
    monkeypatch.setenv("MULTI30K_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(DataError, match=r"^\$MULTI30K_DIR .*nowhere: no such folder \(a Multi30k directory holds "):
        data.multi30k_files()
    (tmp_path / "a-file").write_text("not a folder")
    monkeypatch.setenv("MULTI30K_DIR", str(tmp_path / "a-file"))
    with pytest.raises(DataError, match=r"^\$MULTI30K_DIR .*a-file: not a folder"):
        data.multi30k_files()
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("MULTI30K_DIR", str(tmp_path / "empty"))
    with pytest.raises(DataError, match="missing"):
        data.multi30k_files()


def test_without_network_or_data_one_line_says_what_to_set(tmp_path, monkeypatch):
    """No data and no way to download it (a refused connection on 127.0.0.1 stands in for no
    network): one DownloadError line naming the URL and MULTI30K_DIR (exit status 1 on the command
    line: a failure, not bad input), and no partial file left."""
    monkeypatch.setenv("MINITENSOR_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("MULTI30K_DIR", raising=False)
    with pytest.raises(DownloadError) as info:
        data.multi30k_files(url="http://127.0.0.1:9/")
    message = str(info.value)
    assert "http://127.0.0.1:9/" in message and "set MULTI30K_DIR" in message and "\n" not in message
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]


@needs_multi30k
def test_local_directory_with_a_wrong_file_is_rejected(tmp_path):
    bad = tmp_path / "m30k"
    shutil.copytree(MULTI30K, bad)
    write(bad / "train.en.gz", b"x")
    with pytest.raises(DataError, match="train.en.gz: SHA-256 .* not Multi30k's file; restore it") as info:
        data.multi30k_files(bad)
    assert "download" not in str(info.value)  # a folder of the user's own is not the download cache
