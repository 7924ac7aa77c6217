"""When training stops (transformer/signals.py, StopPolicy): asked between updates, a signal or a
closed stdout stops the loop after the update that ran last, the time budget after the update
that spent it; a signal that comes while the policy decides is held and named with the update
it lets go; several ranks agree, a signal to any one of them stopping all after the same update."""
import os
import signal

import pytest

from minitensor.distributed import SingleProcess
from transformer.signals import CLOSED_STDOUT, StopPolicy, handled


class TwoRanks(SingleProcess):
    """Rank ``rank`` of two, the other rank's values given: what sum_on_host adds to this one's."""

    world_size = 2

    def __init__(self, rank: int, other: list):
        self.rank, self.other = rank, other

    def sum_on_host(self, values) -> tuple:
        return tuple(float(a) + float(b) for a, b in zip(values, self.other))


def test_the_budget_stops_before_the_update_after_it_is_spent_and_progress_is_the_larger_fraction():
    said = []
    policy = StopPolicy(SingleProcess(), max_minutes=1.0, max_steps=100, step=10, seconds_before=15.0, say=said.append)
    stop, progress = policy.check(10)
    assert stop is None and 0.25 <= progress < 0.3              # 15 s of 60, against 10 of 100 updates
    policy = StopPolicy(SingleProcess(), max_minutes=1.0, max_steps=100, step=10, seconds_before=60.0)
    assert policy.check(10)[0] == "max_minutes"
    policy = StopPolicy(SingleProcess(), max_minutes=0.0, max_steps=100, seconds_before=1e9)   # 0: no budget
    assert policy.check(40) == (None, 0.4) and said == []


def test_a_signal_between_updates_stops_the_loop_after_the_update_that_ran_last_and_says_which():
    said = []
    policy = StopPolicy(SingleProcess(), max_minutes=0.0, max_steps=100, step=3, say=said.append)
    assert policy.check(3)[0] is None                           # update 4 is let go, and runs
    policy.request(signal.SIGTERM, None)                        # ... while it runs
    assert said == ["SIGTERM: stopping after update 4 and saving a checkpoint; send SIGTERM again to stop at once"]
    assert policy.check(4)[0] == "signal"
    with pytest.raises(KeyboardInterrupt):                      # a second one stops at once
        policy.request(signal.SIGTERM, None)


def test_a_signal_while_the_policy_decides_is_held_and_named_with_the_update_it_let_go(monkeypatch):
    said = []
    policy = StopPolicy(SingleProcess(), max_minutes=0.0, max_steps=100, step=7, say=said.append)
    real = policy.seconds

    def seconds_and_a_signal():                                # SIGINT comes in the middle of the decision
        os.kill(os.getpid(), signal.SIGINT)
        return real()

    monkeypatch.setattr(policy, "seconds", seconds_and_a_signal)
    with handled([signal.SIGINT], policy.request):
        assert policy.check(7)[0] is None                      # decided before it came: update 8 runs
    assert said == ["SIGINT: stopping after update 8 and saving a checkpoint; press Ctrl-C again to stop at once"]
    monkeypatch.setattr(policy, "seconds", real)
    assert policy.check(8)[0] == "signal"


def test_a_closed_stdout_is_a_stop_as_a_signal_is():
    said = []
    policy = StopPolicy(SingleProcess(), max_minutes=0.0, max_steps=100, step=2, say=said.append)
    policy.request.request(CLOSED_STDOUT)
    assert policy.check(2)[0] == "signal" and said[0].startswith("stdout closed: stopping after update 2")


@pytest.mark.parametrize("signalled", ["rank 0", "rank 1"])
def test_ranks_agree_a_signal_to_any_one_stops_all_and_rank_0_keeps_the_time(signalled):
    said = []
    other = [1.0 if signalled == "rank 1" else 0.0, 0.0, 0.0]  # rank 1's (signalled, out of time, progress)
    policy = StopPolicy(TwoRanks(0, other), max_minutes=0.0, max_steps=100, step=5, say=said.append)
    if signalled == "rank 0":
        policy.request(signal.SIGINT, None)
        assert said == ["SIGINT: stopping when the ranks next agree, before the next update, and saving a checkpoint; "
                        "press Ctrl-C again to stop at once"]
    stop, progress = policy.check(5)
    who = "SIGINT" if signalled == "rank 0" else "another rank was asked to stop"
    assert stop == "signal" and progress == 0.05 and said[-1] == f"{who}: stopping after update 5 and saving a checkpoint"
    rank1 = StopPolicy(TwoRanks(1, [0.0, 1.0, 0.5]), max_minutes=0.0, max_steps=100, step=5, say=said.append)
    assert rank1.check(5) == ("max_minutes", 0.5)               # rank 0's clock and progress, rank 1 silent
    assert len(said) == 1 + (signalled == "rank 0")
