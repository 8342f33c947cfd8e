"""`orsgen doctor`'s hang defect (tests/test_doctor.py): `think` waits for a reply that never comes (HANG seconds,
so the test's server frees its thread in the end)."""

import time

from openreward.environments import Environment, TextBlock, ToolOutput, tool
from pydantic import BaseModel, Field

HANG = 20.0


class ThinkParams(BaseModel):
    question: str = Field(description="What to think about")


class AnswerParams(BaseModel):
    answer: int = Field(description="The sum")


class Oracle(Environment):
    """Add two numbers."""

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{"a": i, "b": i + 1} for i in range(3)]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"What is {self.task_spec['a']} + {self.task_spec['b']}?")]

    @tool
    def think(self, params: ThinkParams) -> ToolOutput:
        """Ask the oracle."""
        time.sleep(HANG)  # the defect: an upstream call without a timeout
        return ToolOutput(blocks=[TextBlock(text="...")])

    @tool
    def answer(self, params: AnswerParams) -> ToolOutput:
        """Answer with the sum: 1.0 if right; the episode ends."""
        right = params.answer == self.task_spec["a"] + self.task_spec["b"]
        return ToolOutput(blocks=[TextBlock(text="right" if right else "wrong")], reward=1.0 if right else 0.0,
                          finished=True)
