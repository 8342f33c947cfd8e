"""The difficulty-aware task order's environment (issue 33): a reward that depends only on the task. Task i is
`always` (i % 3 == 0: `flip` pays 1.0), `never` (i % 3 == 1: 0.0) or `coin` (i % 3 == 2: 1.0 or 0.0 by a coin
seeded with the task and the call's `seed`, which the scripted model sets per rollout, so a rerun pays the same).
`flip` finishes the episode."""

import random

from openreward.environments import Environment, TextBlock, ToolOutput, tool
from pydantic import BaseModel, Field

TASKS = 12
KINDS = ("always", "never", "coin")


def kind(task: int) -> str:
    return KINDS[task % len(KINDS)]


def pays(task: int, seed: int) -> float:
    """What `flip(seed)` pays on `task`."""
    if kind(task) == "coin":
        return 1.0 if random.Random(f"{task}/{seed}").random() < 0.5 else 0.0
    return 1.0 if kind(task) == "always" else 0.0


class FlipParams(BaseModel):
    seed: int = Field(description="Any number")


class Coins(Environment):
    """Flip the task's coin."""

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{"n": i, "kind": kind(i)} for i in range(TASKS)]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"Task {self.task_spec['n']}: flip the coin")]

    @tool
    def flip(self, params: FlipParams) -> ToolOutput:
        """Flip the coin: 1.0 or 0.0, and the episode ends."""
        reward = pays(self.task_spec["n"], params.seed)
        return ToolOutput(blocks=[TextBlock(text="heads" if reward else "tails")], reward=reward, finished=True)
