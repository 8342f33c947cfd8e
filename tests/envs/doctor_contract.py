"""`orsgen doctor`'s contract defect (tests/test_doctor.py): a tool without a docstring, so the model gets its name
and nothing else."""

from openreward.environments import Environment, TextBlock, ToolOutput, tool
from pydantic import BaseModel, Field


class MoveParams(BaseModel):
    to: str = Field(description="A square, like e4")


class Chess(Environment):
    """Play the task's move."""

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{"move": m} for m in ("e4", "d4", "c4")]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="Play the best first move.")]

    @tool
    def move(self, params: MoveParams) -> ToolOutput:  # the defect: no docstring, so no description
        right = params.to.strip().lower() == self.task_spec["move"]
        return ToolOutput(blocks=[TextBlock(text="good" if right else "bad")], reward=1.0 if right else 0.0,
                          finished=True)
