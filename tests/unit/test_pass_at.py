"""`orsgen eval`'s pass@k (the unbiased estimator, Chen et al. 2021), which episodes count, and which record of a
re-run episode is read. (The run's summary and threshold: the eval tests'.)"""

import itertools
import math

import pytest
from orsgen.evaluate.figures import counts, latest, pass_at


def by_enumeration(n: int, c: int, k: int) -> float:
    """The share of the k-subsets of n episodes (c passing) holding at least one pass."""
    episodes = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(episodes, k))
    return sum(any(s) for s in subsets) / len(subsets)


@pytest.mark.parametrize(("n", "c", "k"), [(5, 2, 2), (6, 1, 3), (4, 0, 2), (7, 3, 1), (8, 5, 4)])
def test_pass_at_k_is_the_chance_a_k_subset_holds_a_pass(n, c, k):
    assert pass_at(n, c, k) == pytest.approx(by_enumeration(n, c, k))


def test_pass_at_1_is_the_pass_rate():
    assert pass_at(8, 3, 1) == pytest.approx(3 / 8)


def test_fewer_episodes_than_k_measure_nothing_and_too_few_failures_to_fill_k_is_certain():
    assert pass_at(2, 2, 3) is None
    assert pass_at(4, 3, 2) == 1.0
    assert pass_at(100, 1, 100) == 1.0
    assert pass_at(100, 0, 100) == 0.0
    assert pass_at(60, 1, 30) == pytest.approx(1 - math.comb(59, 30) / math.comb(60, 30))


@pytest.mark.parametrize(("reason", "counted"), [(None, True), ("no_tool_scored", True), ("timed_out", True),
                                                 ("not_started", False), ("stale_prompt", False),
                                                 ("endpoint_error", False)])
def test_episodes_that_say_nothing_of_the_model_do_not_count(reason, counted):
    assert counts({"unscored_reason": reason}) is counted


def test_a_re_run_episode_is_read_from_its_last_record():
    first = {"environment": "e", "split": "test", "task_index": 0, "rollout": 0, "reward": None}
    other = {**first, "rollout": 1, "reward": 0.0}
    again = {**first, "reward": 1.0}
    assert latest([first, other, again]) == [again, other]
