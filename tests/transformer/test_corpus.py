"""The training corpus at any size: streamed text, the BPE sample, encoding in chunks, the cache left on disk, and the flat token ids the trainer reads."""
import gzip
from pathlib import Path

import numpy as np
import pytest

from transformer import corpus, data
from transformer.corpus import PairFilter, ParallelText, bpe_sample, encode_corpus
from transformer.settings import DataSettings
from transformer.tokenizer import IdFile, Tokenizer, TokenIds

from ..helpers import MULTI30K, needs_multi30k

pytestmark = needs_multi30k


def lines(split, lang, n):
    with gzip.open(MULTI30K / f"{split}.{lang}.gz", "rt", encoding="utf-8") as f:
        return [next(f).rstrip("\n") for _ in range(n)]


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    en, de = lines("train", "en", 2000), lines("train", "de", 2000)
    return Tokenizer.train(en + de, tmp_path_factory.mktemp("spm") / "spm", vocab_size=400)


@pytest.fixture
def files(tmp_path):
    """600 Multi30k pairs as plain text, with pairs the filter drops: an empty side, a long one, a bad ratio."""
    en, de = lines("train", "en", 600), lines("train", "de", 600)
    en[10], de[20] = "", ""
    en[30] = " ".join(["word"] * 40)
    de[40] = "ja"
    de[50] = "und"
    (tmp_path / "c.en").write_text("\n".join(en) + "\n", encoding="utf-8")
    (tmp_path / "c.de").write_text("\n".join(de) + "\n", encoding="utf-8")
    return ParallelText(files=((tmp_path / "c.en", tmp_path / "c.de"),)), en, de


def test_the_streamed_filter_keeps_and_counts_what_filter_pairs_does(files):
    text, en, de = files
    keep = PairFilter(max_words=30, max_ratio=3.0, limit=550)
    report = data.FilterReport()
    kept = list(keep.kept(text, report))
    want_src, want_tgt, want = data.filter_pairs(en[:550], de[:550], max_len=30, max_ratio=3.0)
    assert kept == list(zip(want_src, want_tgt))
    assert (report.total, report.empty, report.too_long, report.bad_ratio, report.kept) == \
           (want.total, want.empty, want.too_long, want.bad_ratio, want.kept)
    assert want.total == 550 and want.empty == 2 and want.too_long >= 1 and want.bad_ratio >= 2


def test_a_bpe_sample_of_a_small_corpus_is_all_of_it_in_order(files):
    text, en, de = files
    src, tgt, report = bpe_sample(text, PairFilter(), size=10_000)
    want_src, want_tgt, _ = data.filter_pairs(en, de)
    assert (src, tgt) == (want_src, want_tgt) and report.kept == len(src)


def test_a_bpe_sample_is_uniform_over_the_kept_pairs():
    """Each of 50 pairs lands in a sample of 10 with probability 1/5: over 2000 seeds, every
    count lies within 5 standard deviations (18) of 400."""
    text = ParallelText(lists=([f"s{i}" for i in range(50)], [f"t{i}" for i in range(50)]))
    counts = np.zeros(50, int)
    for seed in range(2000):
        src, tgt, _ = bpe_sample(text, PairFilter(), size=10, seed=seed)
        idx = [int(s[1:]) for s in src]
        assert idx == sorted(set(idx)) and len(idx) == 10 and tgt == [f"t{i}" for i in idx]
        counts[idx] += 1
    assert np.abs(counts - 400).max() < 90, counts


def test_ids_encoded_chunk_by_chunk_are_the_tokenizers_for_the_kept_pairs(files, tok, tmp_path, monkeypatch):
    text, en, de = files
    kept_src, kept_tgt, _ = data.filter_pairs(en, de, max_len=30)
    monkeypatch.setattr(corpus, "CHUNK", 64)  # ten chunks, the last one short
    src, tgt, report = encode_corpus(tok, text, PairFilter(max_words=30), tmp_path / "cache")
    assert [list(x) for x in src] == tok.encode(kept_src) and [list(y) for y in tgt] == tok.encode(kept_tgt)
    assert report.kept == len(kept_src) == len(src) == len(tgt)
    assert src.flat.dtype == np.int32 and src.offsets[-1] == len(src.flat)


def test_the_cache_is_memory_mapped_and_rebuilt_when_text_or_filter_change(files, tok, tmp_path):
    text, en, de = files
    cache = tmp_path / "cache"
    first = encode_corpus(tok, text, PairFilter(), cache)
    stamp = (cache / "key.json").stat().st_mtime_ns
    again = encode_corpus(tok, text, PairFilter(), cache)
    assert (cache / "key.json").stat().st_mtime_ns == stamp  # loaded, not rebuilt
    assert isinstance(again[0].flat, IdFile) and np.array_equal(np.asarray(again[0].flat), np.asarray(first[0].flat))
    assert again[2].kept == first[2].kept and again[2].total == 600
    fewer = encode_corpus(tok, text, PairFilter(limit=100), cache)
    assert len(fewer[0]) == len(data.filter_pairs(en[:100], de[:100])[0]) and (cache / "key.json").stat().st_mtime_ns != stamp
    en[0] = de[0]  # another first line (as long as its partner: the filter keeps it)
    Path(text.files[0][0]).write_text("\n".join(en) + "\n", encoding="utf-8")
    changed = encode_corpus(tok, text, PairFilter(limit=100), cache)
    assert list(changed[0][0]) == tok.encode(de[0]) != list(fewer[0][0])
    assert not cache.with_name("cache.partial").exists()


def test_a_cache_folder_without_its_key_is_not_trusted(files, tok, tmp_path):
    text, _, _ = files
    cache = tmp_path / "cache"
    encode_corpus(tok, text, PairFilter(), cache)
    (cache / "key.json").unlink()  # as after a crash between writing the ids and the key
    (cache / "src.ids").write_bytes(b"\0" * 8)
    src, _, _ = encode_corpus(tok, text, PairFilter(), cache)
    assert len(src.flat) > 2


def test_token_ids_read_like_a_list_of_arrays():
    ids = TokenIds.from_lists([[5, 6], [], [7, 8, 9]])
    assert len(ids) == 3 and list(ids.lengths) == [2, 0, 3]
    assert [list(x) for x in ids] == [[5, 6], [], [7, 8, 9]] and list(ids[-1]) == [7, 8, 9]
    assert [list(x) for x in ids[1:]] == [[], [7, 8, 9]]
    with pytest.raises(IndexError):
        ids[3]
    with pytest.raises(ValueError, match="offsets"):
        TokenIds(np.arange(4), np.array([0, 2, 3]))


def test_an_id_file_reads_slices_as_the_array_they_were_written_from(tmp_path):
    ids = np.random.default_rng(0).integers(0, 37000, 1000).astype("<i4")
    ids.tofile(tmp_path / "x.ids")
    f = IdFile(tmp_path / "x.ids")
    assert len(f) == 1000 and f.dtype == np.int32
    for a, b in ((0, 1000), (17, 18), (500, 500), (990, 2000), (-10, None)):
        assert np.array_equal(f[a:b], ids[a:b])
    assert np.array_equal(np.asarray(f), ids)
    with pytest.raises(TypeError, match="slices"):
        f[3]


def test_prepare_reads_what_its_data_settings_name_and_keeps_what_they_keep(files, tmp_path):
    """corpus.prepare takes a DataSettings: WMT-style files named by it (the valid side too), its
    filter (max_words, max_ratio) and limit, its vocabulary size; a dataset of files it lacks is refused."""
    c = tmp_path / "c"
    valid = (tmp_path / "v.en", tmp_path / "v.de")
    valid[0].write_text("a dog runs\na cat sits\n", encoding="utf-8")
    valid[1].write_text("ein hund rennt\neine katze sitzt\n", encoding="utf-8")
    s = DataSettings(dataset="wmt14", src_lang="en", tgt_lang="de", vocab_size=120, limit=500, max_words=30,
                     max_ratio=3.0, train_src=str(c) + ".en", train_tgt=str(c) + ".de", valid_src=str(valid[0]),
                     valid_tgt=str(valid[1]))
    run = tmp_path / "run"
    run.mkdir()
    tok, train, valid_data, test, sha = corpus.prepare(s, run, quiet=True, progress=False)
    text, en, de = files
    kept = list(PairFilter(max_words=30, max_ratio=3.0, limit=500).kept(text, data.FilterReport()))
    assert tok.vocab_size == 120 and len(train.src) == len(kept) < 500 and len(valid_data.src) == 2 and test is None
    assert sha == ParallelText(files=((str(c) + ".en", str(c) + ".de"),)).fingerprint()
    with pytest.raises(corpus.InputError, match="wmt14 needs --data-dir"):
        corpus.prepare(DataSettings(dataset="wmt14"), run, quiet=True, progress=False)
