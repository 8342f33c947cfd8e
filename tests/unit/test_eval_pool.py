"""`orsgen eval`'s pool: what the process held before the episodes is out of the garbage collector's full collections
while they run (each walked some 600,000 objects, a pause on the runtime's loop), and given back after; the sessions
budget the episodes run with."""

import gc

import pytest
from orsgen.errors import OrsgenError
from orsgen.evaluate import pool


class Held:
    """An object the collector tracks (a class instance with a __dict__)."""


def test_what_was_held_before_is_frozen_while_the_episodes_run_and_given_back_after():
    before = Held()
    assert gc.get_freeze_count() == 0
    with pool.frozen_heap():
        made = Held()
        assert gc.get_freeze_count() > 0
        gc.collect()  # a full collection walks what is not frozen: `made`, never `before`
        oldest = gc.get_objects(generation=2)
        assert any(o is made for o in oldest)
        assert not any(o is before for o in oldest)
    assert gc.get_freeze_count() == 0
    assert any(o is before for o in gc.get_objects(generation=2))


def test_it_is_given_back_when_the_run_ends_on_an_error():
    try:
        with pool.frozen_heap():
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass
    assert gc.get_freeze_count() == 0


def test_the_sessions_budget_is_the_users_at_most_the_concurrency(monkeypatch):
    """An episode's thread does not wait for its session's close: the budget, never above --concurrency, makes the
    next start wait for the place instead, so the server never holds more than --concurrency at once."""
    monkeypatch.delenv("ORSGEN_MAX_SESSIONS", raising=False)
    assert pool.sessions_budget(None, 16) == 16
    assert pool.sessions_budget(3, 16) == 3
    assert pool.sessions_budget(64, 16) == 16
    monkeypatch.setenv("ORSGEN_MAX_SESSIONS", "5")  # --max-sessions's default
    assert pool.sessions_budget(None, 16) == 5
    assert pool.sessions_budget(8, 16) == 8


def test_a_sessions_budget_no_start_could_take_is_refused_in_one_line(monkeypatch):
    monkeypatch.setenv("ORSGEN_MAX_SESSIONS", "0")
    with pytest.raises(OrsgenError, match="ORSGEN_MAX_SESSIONS='0'"):
        pool.sessions_budget(None, 16)
