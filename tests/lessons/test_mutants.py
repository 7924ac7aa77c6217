"""The mutation test of the grader (``lessonkit.mutants``): every mutant of a reference solution,
one small change in a piece the learner writes, fails the grader, or is listed as equivalent
with the reason. The default run grades a sample of each exercise's mutants; ``--all-mutants``
(``.ci/run``) grades every one. Every exercise is held at 100%."""
import pytest

from lessonkit import mutants, track
from lessonkit.exercises import EXERCISES

SAMPLE = 12     # mutants per exercise in the default run


@pytest.mark.parametrize("number", list(EXERCISES))
def test_every_non_equivalent_mutant_fails_the_grader(number, request):
    every = request.config.getoption("--all-mutants")
    result = mutants.score([number], sample=None if every else SAMPLE)[number]
    assert result["mutants"] > 0
    assert not result["survivors"], "mutants that pass the grader:\n" + "\n".join(map(str, result["survivors"]))


def test_each_equivalent_mutant_listed_is_one_the_mutator_makes():
    """A stale entry (a mutant no longer made, after the solution changed) would hide nothing,
    but the list is a reviewed record: it must name real mutants."""
    made = {m.key for n in EXERCISES for m in mutants.mutants(n)}
    stale = [k for k in mutants.EQUIVALENT if k not in made]
    assert not stale, stale


def test_the_mutator_changes_only_the_pieces_the_learner_writes():
    for number in ("01", "15"):
        source = track.path(track.SOLUTIONS, number).read_text()
        blocks = mutants._blocks(source)
        for m in mutants.mutants(number):
            assert any(a <= m.line <= b for _, a, b in blocks), m
            assert m.where in EXERCISES[number].functions, m


def test_a_planted_gap_is_reported_as_a_survivor(monkeypatch):
    """The test can fail: with exercise 16's cases cut to the first one, mutants survive."""
    ex = EXERCISES["16"]
    monkeypatch.setitem(mutants.grader._CASES, "16", ex.cases()[:1])
    import dataclasses
    monkeypatch.setitem(mutants.EXERCISES, "16", dataclasses.replace(ex, drawn=None))
    result = mutants.score(["16"])["16"]
    assert result["survivors"]
