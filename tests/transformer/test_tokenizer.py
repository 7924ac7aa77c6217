"""The joint BPE tokenizer: special ids agree with the model, text round-trips, ids are cached."""

import numpy as np
import pytest

from transformer import data
from transformer.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer, encode_cached

from ..helpers import MULTI30K, needs_multi30k

pytestmark = needs_multi30k


@pytest.fixture(scope="module")
def corpus():
    en, de = data.multi30k("val", root=MULTI30K)
    return en, de


@pytest.fixture(scope="module")
def tok(tmp_path_factory, corpus):
    en, de = corpus
    return Tokenizer.train(en + de, tmp_path_factory.mktemp("spm") / "joint", vocab_size=400)


def test_special_ids_match_the_model_defaults(tok):
    from transformer import TransformerConfig

    cfg = TransformerConfig(vocab_size=tok.vocab_size)
    assert (cfg.pad_id, cfg.bos_id, cfg.eos_id) == (PAD_ID, BOS_ID, EOS_ID) == (0, 1, 2)
    assert tok.vocab_size == 400


def test_text_round_trips_through_ids_in_both_languages(tok, corpus):
    en, de = corpus
    for line in en[:50] + de[:50]:
        ids = tok.encode(line)
        assert all(i > 3 or i == 3 for i in ids)  # no pad/bos/eos inside a sentence
        assert tok.decode(ids) == " ".join(line.split())


def test_decode_drops_specials_and_stops_at_eos(tok):
    ids = tok.encode("A dog runs.")
    assert tok.decode([BOS_ID] + ids + [EOS_ID, 17, 18, PAD_ID]) == "A dog runs."
    assert tok.decode([[BOS_ID] + ids, ids + [EOS_ID]]) == ["A dog runs.", "A dog runs."]


def test_encoded_ids_are_cached_and_rebuilt_when_the_text_changes(tok, corpus, tmp_path):
    en, _ = corpus
    cache = tmp_path / "ids.npz"
    first = encode_cached(tok, en[:100], cache)
    assert cache.exists()
    mtime = cache.stat().st_mtime_ns
    again = encode_cached(tok, en[:100], cache)
    assert cache.stat().st_mtime_ns == mtime  # loaded, not rewritten
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert [list(a) for a in first] == tok.encode(en[:100])
    other = encode_cached(tok, en[100:150], cache)
    assert len(other) == 50 and [list(a) for a in other] == tok.encode(en[100:150])


def test_a_missing_model_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no sentencepiece model"):
        Tokenizer(tmp_path / "none.model")
