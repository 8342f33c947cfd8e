"""`orsgen doctor`'s reward-probe defect (tests/test_doctor.py): the terminal tool checks the answer with
`startswith`, so an empty answer matches every task and earns the full reward."""

from openreward.environments import Environment, TextBlock, ToolOutput, terminal, tool
from pydantic import BaseModel, Field

ANSWERS = ["paris", "rome", "oslo"]


class Answer(BaseModel):
    answer: str = Field(description="The capital")


class LookParams(BaseModel):
    topic: str = Field(description="What to look up")


class Capitals(Environment):
    """Name the capital; the final message is the answer."""

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{"n": i, "answer": a} for i, a in enumerate(ANSWERS)]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"Name capital number {self.task_spec['n']}.")]

    @tool
    def look(self, params: LookParams) -> ToolOutput:
        """Read the encyclopedia's entry on a topic."""
        return ToolOutput(blocks=[TextBlock(text=f"no entry on {params.topic}")])

    @terminal
    @tool
    def submit(self, params: Answer) -> ToolOutput:
        """The final answer: 1.0 for the task's capital."""
        right = self.task_spec["answer"].startswith(params.answer.strip().lower())  # the defect: "" matches
        return ToolOutput(blocks=[TextBlock(text="right" if right else "wrong")], reward=1.0 if right else 0.0,
                          finished=True)
