"""Decoding: cached == uncached, beam 1 == greedy, beam search finds the best-scoring hypothesis,
and no decoding returns nothing for a non-empty source."""
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitensor as mt
from transformer import TransformerConfig
from transformer.copytask import CopyTaskSettings, make_batch, train_copy_task
from transformer.decoding import beam_search, greedy_decode, hypotheses_to_array, length_penalty
from lessonkit.toy import TableModel


@pytest.fixture(scope="module")
def copy_model(tmp_path_factory):
    model = TransformerConfig(10, d_model=32, n_heads=2, d_ff=64, n_encoder_layers=1, n_decoder_layers=1, dropout=0.0)
    s = CopyTaskSettings(vocab=10, min_length=3, max_length=6, model=model, batch=64,
                         steps=300, warmup=50, eval_every=50, stop_at=1.0, run_dir=str(tmp_path_factory.mktemp("c")),
                         show_progress=False, test_size=20)
    _, model = train_copy_task(s, return_model=True)
    return model, s


def test_cached_and_uncached_decoding_give_identical_outputs(copy_model):
    model, s = copy_model
    src = make_batch(np.random.default_rng(5), 16, s)[0]
    a = greedy_decode(model, src, use_cache=True)
    b = greedy_decode(model, src, use_cache=False)
    np.testing.assert_array_equal(a, b)
    ra = beam_search(model, src, beam_size=3, use_cache=True)
    rb = beam_search(model, src, beam_size=3, use_cache=False)
    for x, y in zip(ra, rb):
        assert x[0].tokens == y[0].tokens
        assert x[0].score == pytest.approx(y[0].score, abs=1e-4)


def test_incremental_states_equal_full_recomputation():
    mt.manual_seed(0)
    from transformer import Transformer

    model = Transformer(TransformerConfig.tiny(15, dropout=0.0)).eval()
    src = np.array([[4, 5, 6, 0], [7, 8, 9, 10]])
    tgt = np.array([[1, 4, 5, 6, 2], [1, 7, 8, 9, 10]])
    memory = model.encode(src)
    mask = (mt.tensor(src) != 0).data[:, None, None, :]
    full = model.decode(tgt, memory, mt.Tensor._wrap(mask)).numpy()
    cache = model.new_cache()
    steps = [model.decode(tgt[:, t:t + 1], memory, mt.Tensor._wrap(mask), cache=cache).numpy() for t in range(5)]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-5)
    cache2 = model.new_cache()  # several new tokens at once use the causal triangle among them
    two = [model.decode(tgt[:, :3], memory, mt.Tensor._wrap(mask), cache=cache2).numpy(),
           model.decode(tgt[:, 3:], memory, mt.Tensor._wrap(mask), cache=cache2).numpy()]
    np.testing.assert_allclose(np.concatenate(two, axis=1), full, atol=1e-5)


def test_beam_size_one_equals_greedy(copy_model):
    model, s = copy_model
    src = make_batch(np.random.default_rng(6), 16, s)[0]
    greedy = greedy_decode(model, src)
    beam = hypotheses_to_array(beam_search(model, src, beam_size=1))
    for g, b in zip(greedy, beam):
        g = g[g != 0].tolist()
        b = b[b != 0].tolist()
        assert g == b


def test_trained_copy_model_beam_search_copies(copy_model):
    model, s = copy_model
    src = make_batch(np.random.default_rng(7), 20, s)[0]
    results = beam_search(model, src, beam_size=4, n_best=2)
    for row, hyps in zip(src, results):
        assert hyps[0].tokens == row[row != 0].tolist() + [2]
        assert len(hyps) == 2 and hyps[0].score >= hyps[1].score


def table_model():
    """vocab: 0 pad, 1 bos, 2 eos, 3 A, 4 B. Greedy takes A (0.6) and then wanders; the best
    whole sequence is B eos (0.4 x 0.9)."""
    table = {(): [0, 0, 0.0, 0.6, 0.4], (3,): [0, 0, 0.3, 0.35, 0.35], (4,): [0, 0, 0.9, 0.05, 0.05]}
    return TableModel(table, [0, 0, 0.98, 0.01, 0.01], vocab_size=5)


def exhaustive_best(model, max_len, alpha):
    """The best-scoring output of at least one token before eos, by enumeration."""
    best = None
    for n in range(2, max_len + 1):
        for body in itertools.product([3, 4], repeat=n - 1):
            seq = list(body) + [2]
            lp = sum(np.log(max(model.probs(seq[:i])[seq[i]], 1e-12)) for i in range(len(seq)))
            score = lp / length_penalty(len(seq), alpha)
            if best is None or score > best[0]:
                best = (score, seq)
    return best


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_search_returns_the_best_scoring_hypothesis(alpha):
    model = table_model()
    src = np.array([[3, 3]])
    greedy = greedy_decode(model, src, max_len=4, use_cache=False)[0].tolist()
    assert greedy[0] == 3  # greedy commits to A
    score, seq = exhaustive_best(model, 4, alpha)
    hyp = beam_search(model, src, beam_size=2, alpha=alpha, max_len=4, use_cache=False)[0][0]
    assert hyp.tokens == seq == [4, 2]
    assert hyp.score == pytest.approx(score)


def test_length_penalty_formula():
    assert length_penalty(1, 0.6) == pytest.approx(1.0)
    assert length_penalty(7, 0.6) == pytest.approx(2.0**0.6)
    assert length_penalty(10, 0.0) == 1.0


@pytest.mark.parametrize("seed", range(4))
def test_random_models_never_emit_pad_or_bos_and_cached_beams_equal_uncached(seed):
    # an untrained model with 6 pieces puts real mass on pad (0) and bos (1): decoding must not pick them
    mt.manual_seed(seed)
    from transformer import Transformer  # noqa: PLC0415

    cfg = TransformerConfig(vocab_size=6, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1, n_decoder_layers=2,
                            dropout=0.0)
    model = Transformer(cfg).eval()
    src = np.random.default_rng(seed).integers(3, 6, (5, 4))
    src[1, 2:] = cfg.pad_id
    out = greedy_decode(model, src, max_len=12)
    for row in out:
        produced = row[:list(row).index(cfg.eos_id) + 1] if cfg.eos_id in row else row
        assert not set(produced.tolist()) & {cfg.pad_id, cfg.bos_id}
    cached = beam_search(model, src, beam_size=3, max_len=12, use_cache=True, n_best=3)
    uncached = beam_search(model, src, beam_size=3, max_len=12, use_cache=False, n_best=3)
    for a, b in zip(cached, uncached):
        for x, y in zip(a, b):
            assert not set(x.tokens) & {cfg.pad_id, cfg.bos_id}
            assert x.tokens == y.tokens
            assert x.score == pytest.approx(y.score, abs=1e-6)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), beam=st.integers(1, 5), alpha=st.floats(0.0, 2.0), eos_bias=st.floats(0.0, 30.0))
def test_no_decoding_returns_nothing_for_a_non_empty_source_even_when_the_model_favours_eos(seed, beam, alpha,
                                                                                            eos_bias):
    # a random model whose eos logit is raised by eos_bias at every step: left to itself, greedy
    # would stop at once and beam search would rank the empty output first
    from transformer import Transformer  # noqa: PLC0415

    mt.manual_seed(seed)
    cfg = TransformerConfig(vocab_size=9, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1, n_decoder_layers=1,
                            dropout=0.0)
    model = Transformer(cfg).eval()
    generator = model.generator

    def favour_eos(h):
        out = generator(h)
        out.data[..., cfg.eos_id] += eos_bias
        return out

    model.generator = favour_eos
    src = np.random.default_rng(seed).integers(3, 9, (4, 5))
    outputs = ([h[0].tokens for h in beam_search(model, src, beam_size=beam, alpha=alpha, max_len=8)] if beam > 1
               else [row.tolist() for row in greedy_decode(model, src, max_len=8)])
    for tokens in outputs:
        assert tokens and tokens[0] not in (cfg.eos_id, cfg.pad_id), outputs


@pytest.mark.parametrize("V, d, layers, B, K, Ts, T", [
    (500, 16, 2, 5, 6, 12, 30), (3000, 32, 1, 3, 4, 20, 40), (200, 64, 3, 8, 2, 30, 60), (200, 64, 3, 8, 1, 30, 60),
    (100, 128, 4, 4, 4, 40, 80), (1000, 64, 2, 2, 16, 10, 60)])
def test_the_decoding_memory_estimate_bounds_the_measured_peak_without_wasting_it(V, d, layers, B, K, Ts, T):
    # tracemalloc sees every NumPy buffer: the peak of what one decoding allocated, against the
    # estimate translate() splits its batches by (beam 1 is greedy decoding)
    import tracemalloc  # noqa: PLC0415

    from transformer import Transformer  # noqa: PLC0415
    from transformer.decoding import memory_estimate  # noqa: PLC0415

    mt.manual_seed(0)
    cfg = TransformerConfig(vocab_size=V, d_model=d, n_heads=4, d_ff=4 * d, n_encoder_layers=layers,
                            n_decoder_layers=layers, dropout=0.0)
    model = Transformer(cfg).eval()
    src = np.random.default_rng(0).integers(3, V, (B, Ts))
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        if K == 1:
            greedy_decode(model, src, max_len=T)
        else:
            beam_search(model, src, beam_size=K, max_len=T)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    estimate = memory_estimate(cfg, B * K, Ts, T)
    assert peak <= estimate <= 2.5 * peak, (peak, estimate)
