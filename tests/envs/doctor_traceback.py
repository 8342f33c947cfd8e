"""`orsgen doctor`'s traceback defect (tests/test_doctor.py): `evaluate` catches every error and hands the model the
stack trace as its result."""

import traceback

from openreward.environments import Environment, TextBlock, ToolOutput, tool
from pydantic import BaseModel, Field


class EvaluateParams(BaseModel):
    expression: str = Field(description="An integer, as digits")


class Counter(Environment):
    """Reach the task's number."""

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{"target": t} for t in (3, 7, 12)]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"Evaluate an expression that gives {self.task_spec['target']}.")]

    @tool
    def evaluate(self, params: EvaluateParams) -> ToolOutput:
        """Evaluate the expression: 1.0 when it gives the task's number; the episode ends."""
        try:
            value = int(params.expression)
        except Exception:  # noqa: BLE001 - the defect: the traceback is the result
            return ToolOutput(blocks=[TextBlock(text=traceback.format_exc())])
        right = value == self.task_spec["target"]
        return ToolOutput(blocks=[TextBlock(text=str(value))], reward=1.0 if right else 0.0, finished=True)
