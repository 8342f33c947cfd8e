"""Starts that fail: task 0 is normal, task 1's setup always raises, task 2's setup fails its first 2 starts.

`score` gives reward 1.0. The start attempts per task are counted on the server side (class-level dict), so the
client-side retries of one reset are what gets task 2 to start.
"""

from typing import ClassVar

from openreward.environments import Environment, TextBlock, ToolOutput, tool

NORMAL, BROKEN, FLAKY = 0, 1, 2
FLAKY_FAILURES = 2


class Flaky(Environment):
    """Task 1 never starts; task 2 starts on its third attempt."""

    attempts: ClassVar[dict[int, int]] = {}  # task -> setup() calls so far, in this server process

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{"n": NORMAL}, {"n": BROKEN}, {"n": FLAKY}]

    def setup(self) -> None:
        n = self.task_spec["n"]
        Flaky.attempts[n] = Flaky.attempts.get(n, 0) + 1
        if n == BROKEN:
            # a reason of two lines: what the runtime reports of it must stay on one
            raise RuntimeError("the broken task's setup always fails\n    second line of the reason")
        if n == FLAKY and Flaky.attempts[n] <= FLAKY_FAILURES:
            raise RuntimeError(f"flaky setup failed (attempt {Flaky.attempts[n]})")

    def get_prompt(self) -> list[TextBlock]:
        n = self.task_spec["n"]
        return [TextBlock(text=f"flaky task {n} (started after {Flaky.attempts.get(n, 0)} attempts)")]

    @tool
    def score(self) -> ToolOutput:
        """Finish the episode with reward 1.0."""
        return ToolOutput(blocks=[TextBlock(text="scored")], reward=1.0, finished=True)
