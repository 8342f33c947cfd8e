"""`orsgen doctor`'s bad-arguments defect (tests/test_doctor.py): `move` requires `steps` and says so, but a
"lenient" validator fills in whatever is missing or unreadable, so a malformed call runs (and moves) instead of
being refused in words the model could learn from."""

from typing import Any

from openreward.environments import Environment, TextBlock, ToolOutput, tool
from pydantic import BaseModel, Field, model_validator


class MoveParams(BaseModel):
    steps: int = Field(description="How many steps to walk")

    @model_validator(mode="before")
    @classmethod
    def lenient(cls, data: Any) -> Any:  # the defect: a guess instead of an error
        if isinstance(data, dict) and not isinstance(data.get("steps"), int):
            return {**data, "steps": 1}
        return data


class Walk(Environment):
    """Walk to the task's spot."""

    def __init__(self, task_spec: dict = {}, secrets: dict = {}) -> None:  # noqa: B006 - the SDK's signature
        super().__init__(task_spec, secrets)
        self.at = 0

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{"spot": s} for s in (4, 6, 9)]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"Walk to spot {self.task_spec['spot']}.")]

    @tool
    def move(self, params: MoveParams) -> ToolOutput:
        """Walk forward: 1.0 and the episode ends at the task's spot."""
        self.at += params.steps
        there = self.at == self.task_spec["spot"]
        return ToolOutput(blocks=[TextBlock(text=f"at {self.at}")], reward=1.0 if there else None, finished=there)
