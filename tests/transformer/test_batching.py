"""Token-bucketed batching: the token budget holds, every example appears once, seeds reproduce."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from transformer.batching import UpdateBatches, collate, token_batches


@given(lengths=st.lists(st.tuples(st.integers(1, 30), st.integers(1, 30)), min_size=1, max_size=200),
       max_tokens=st.integers(31, 300), pool=st.integers(1, 64), seed=st.integers(0, 5))
def test_every_example_once_and_padded_size_within_budget(lengths, max_tokens, pool, seed):
    src = [a for a, _ in lengths]
    tgt = [b for _, b in lengths]
    batches = token_batches(src, tgt, max_tokens, pool_size=pool, seed=seed)
    seen = np.sort(np.concatenate(batches))
    np.testing.assert_array_equal(seen, np.arange(len(lengths)))
    for b in batches:
        width = max(max(src[i], tgt[i]) + 1 for i in b)
        assert width * len(b) <= max_tokens


def greedy_batches(src, tgt, max_tokens, pool_size, seed):
    """The batching rule one example at a time: within a pool sorted by length, add examples to
    the batch until one more would take its padded size past the budget."""
    longest = np.maximum(src, tgt) + 1
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(src))
    batches = []
    for start in range(0, len(src), pool_size):
        pool = order[start:start + pool_size]
        current = []
        for i in pool[np.argsort(longest[pool], kind="stable")]:
            if current and longest[i] * (len(current) + 1) > max_tokens:
                batches.append(np.array(current))
                current = []
            current.append(i)
        batches.append(np.array(current))
    rng.shuffle(batches)
    return batches


@given(lengths=st.lists(st.tuples(st.integers(1, 30), st.integers(1, 30)), min_size=1, max_size=300),
       max_tokens=st.integers(31, 300), pool=st.integers(1, 100), seed=st.integers(0, 5))
def test_the_batches_are_those_of_the_greedy_rule_example_by_example(lengths, max_tokens, pool, seed):
    src, tgt = np.array(lengths).T
    got = token_batches(src, tgt, max_tokens, pool_size=pool, seed=seed)
    want = greedy_batches(src, tgt, max_tokens, pool, seed)
    assert len(got) == len(want) and all(np.array_equal(g, w) for g, w in zip(got, want))


def test_same_seed_same_batches_and_sorting_reduces_padding():
    rng = np.random.default_rng(0)
    src = rng.integers(1, 50, 2000)
    tgt = src + rng.integers(-3, 4, 2000).clip(-src + 1)
    a = token_batches(src, tgt, 800, seed=3)
    b = token_batches(src, tgt, 800, seed=3)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    c = token_batches(src, tgt, 800, seed=4)
    assert not all(len(x) == len(y) and np.array_equal(x, y) for x, y in zip(a, c))

    def padding(batches):
        return sum(len(bt) * max(src[i] + 1 for i in bt) - sum(src[i] + 1 for i in bt) for bt in batches)

    unsorted = [np.arange(i, min(i + 16, 2000)) for i in range(0, 2000, 16)]
    assert padding(a) < padding(unsorted) / 5


def test_an_example_longer_than_the_budget_is_a_clear_error():
    with pytest.raises(ValueError, match="example 1 needs 41 tokens"):
        token_batches([3, 40], [3, 5], max_tokens=30)


def test_collate_adds_eos_bos_and_pads():
    src = [[5, 6, 7], [8]]
    tgt = [[9], [10, 11]]
    b = collate(src, tgt, np.array([0, 1]))
    np.testing.assert_array_equal(b.src, [[5, 6, 7, 2], [8, 2, 0, 0]])
    np.testing.assert_array_equal(b.tgt_in, [[1, 9, 0], [1, 10, 11]])
    np.testing.assert_array_equal(b.tgt_out, [[9, 2, 0], [10, 11, 2]])
    assert b.target_tokens == 5 and len(b) == 2


@pytest.mark.parametrize("world_size,group", [(1, 1), (1, 3), (2, 2), (3, 6)])
def test_update_batches_hand_each_batch_of_an_epoch_once_each_rank_its_share_and_ahead_is_next(world_size, group):
    """Over two epochs, the updates' groups cover every batch of each epoch once, in the epoch's
    order; rank r's share is every world_size-th batch of the group from r; a share collated
    ahead is the one next() hands over, and the epochs end where the batches do."""
    rng = np.random.default_rng(world_size * 10 + group)
    src = [list(range(3, 3 + n)) for n in rng.integers(1, 9, 40)]
    tgt = [list(range(3, 3 + n)) for n in rng.integers(1, 9, 40)]
    ranks = [UpdateBatches(src, tgt, 24, seed=5, group=group, rank=r, world_size=world_size) for r in range(world_size)]
    for epoch in (0, 1):
        order = ranks[0].of_epoch(epoch)
        seen = []
        while ranks[0].roll() == epoch:
            shares = []
            for r, b in enumerate(ranks):
                assert b.roll() == epoch
                if r == 0 and b.done % 2:
                    b.ahead(max_epochs=9)                        # collated one update early on odd places
                shares.append(b.next())
            group_ = order[len(seen):len(seen) + group]
            for r, share in enumerate(shares):
                want = [collate(src, tgt, idx) for idx in group_[r::world_size]]
                assert [s.src.tolist() for s in share] == [w.src.tolist() for w in want]
            seen += group_
        assert [i.tolist() for i in seen] == [i.tolist() for i in order]
        assert sorted(int(i) for idx in seen for i in idx) == list(range(40))
    assert ranks[0].epoch == 2 and ranks[0].epochs_ended() == 2
    assert not np.array_equal(np.concatenate(ranks[0].of_epoch(1)), np.concatenate(ranks[0].of_epoch(2)))
