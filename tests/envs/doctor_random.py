"""`orsgen doctor`'s determinism defect (tests/test_doctor.py): `grade` draws its reward from an unseeded random
number, so the same answer on the same task is paid differently from run to run. `Dice` is random by design and
says so in its tool's description: a warning, not a failure."""

import random

from openreward.environments import Environment, TextBlock, ToolOutput, tool
from pydantic import BaseModel, Field


class GradeParams(BaseModel):
    essay: str = Field(description="The essay")


class Essays(Environment):
    """Write an essay on the topic."""

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{"topic": t} for t in ("rivers", "bridges", "owls")]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"Write about {self.task_spec['topic']}.")]

    @tool
    def grade(self, params: GradeParams) -> ToolOutput:
        """Hand the essay in for grading; the episode ends."""
        score = round(random.random(), 3)  # the defect: an unseeded grader
        return ToolOutput(blocks=[TextBlock(text="graded")], reward=score, finished=True)


class Dice(Environment):
    """Roll a die."""

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{"sides": 6}]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="Roll the die.")]

    @tool
    def roll(self) -> ToolOutput:
        """Roll the die: a random reward from 1/6 to 1; the episode ends."""
        face = random.randint(1, self.task_spec["sides"])
        return ToolOutput(blocks=[TextBlock(text=str(face))], reward=face / self.task_spec["sides"], finished=True)
