"""`orsgen eval`'s pool: what the process held before the episodes is out of the garbage collector's full collections
while they run (each walked some 600,000 objects, a pause on the runtime's loop), and given back after."""

import gc

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
