"""Echo environments whose sessions are slow to start (setup() sleeps), for tests/test_session_ownership.py: a
start that a Ctrl-C interrupts, a pool of one batch, look-ahead starts that finish during an evaluation pass.

`Sleepy` starts in 2 s. `Lagging` starts in 3 s on both splits, and its train starts number 9 and 10 (counted in
the server process, in the order setup() runs) fail after their sleep: with 8 rollouts a step and the next step's
sessions opened ahead, two of the look-ahead's starts."""

import threading
import time
from typing import ClassVar

from examples.echo import Echo


class Sleepy(Echo):
    seconds: ClassVar[float] = 2.0

    def setup(self) -> None:
        time.sleep(self.seconds)


class Lagging(Echo):
    FAILING: ClassVar[tuple[int, ...]] = (9, 10)
    train_starts: ClassVar[int] = 0
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def setup(self) -> None:
        number = 0
        if str(self.task_spec["id"]).startswith("train"):
            with Lagging._lock:
                Lagging.train_starts += 1
                number = Lagging.train_starts
        time.sleep(3.0)
        if number in self.FAILING:
            raise RuntimeError(f"train start {number} fails")
