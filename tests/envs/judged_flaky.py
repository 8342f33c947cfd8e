"""The judged environment (tests/envs/judged.py) whose setup raises for the 2nd, 3rd and 4th sessions opened on task 0:
the second reset on task 0 fails with its two retries (the runtime's `start_retries`) and never starts, and every
other start works (tests/test_group_scoring.py: a group scored in AsyncGRPOTrainer's worker without it). The setups
are counted in the file JUDGED_SETUPS names (the server may set environments up in processes of their own)."""

import fcntl
import os

from tests.envs.judged import Judged

FAILING = range(2, 5)  # the ordinals, among task 0's setups, of those that fail


class JudgedFlaky(Judged):
    def setup(self) -> None:
        if self.task_spec["n"] != 0:
            return
        with open(os.environ["JUDGED_SETUPS"], "a+", encoding="utf-8") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.write("setup\n")
            f.flush()
            f.seek(0)
            n = len(f.read().splitlines())
        if n in FAILING:
            raise ValueError("setup exploded")

    @classmethod
    def name(cls) -> str:
        return "JudgedFlaky"
