"""What episode metrics must count (issue 18): split train has a normal task (0), one that never starts (1), one
whose first start fails (2) and one whose live prompt changes with every session (3: a pinned prompt goes stale);
split test has two normal tasks. `answer` scores 1.0 and finishes the episode; `fumble` raises (the SDK then ends
the session).

Start attempts are counted per task in the server process (class-level), so "first start" means the server's first.
"""

from typing import ClassVar

from openreward.environments import Environment, TextBlock, ToolOutput, tool

NORMAL, BROKEN, FIRST_FAILS, SHIFTING = 0, 1, 2, 3


class Metered(Environment):
    starts: ClassVar[dict[tuple[str, int], int]] = {}  # (split, task) -> setup() calls so far

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train", "test"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{"split": split, "n": i} for i in range(4 if split == "train" else 2)]

    def setup(self) -> None:
        key = (self.task_spec["split"], self.task_spec["n"])
        Metered.starts[key] = Metered.starts.get(key, 0) + 1
        if key == ("train", BROKEN):
            raise RuntimeError("this task never starts")
        if key == ("train", FIRST_FAILS) and Metered.starts[key] == 1:
            raise RuntimeError("the first start of this task fails")

    def get_prompt(self) -> list[TextBlock]:
        split, n = self.task_spec["split"], self.task_spec["n"]
        if (split, n) == ("train", SHIFTING):
            return [TextBlock(text=f"Answer task {n} (session {Metered.starts[(split, n)]})")]
        return [TextBlock(text=f"Answer {split} task {n}")]

    @tool
    def answer(self) -> ToolOutput:
        """Answer: reward 1.0, the episode is finished."""
        return ToolOutput(blocks=[TextBlock(text="answered")], reward=1.0, finished=True)

    @tool
    def fumble(self) -> ToolOutput:
        """Always fails."""
        raise RuntimeError("fumbled")
