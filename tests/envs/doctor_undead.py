"""`orsgen doctor`'s lifecycle defect (tests/test_doctor.py): a session that takes calls after a tool finished its
episode. The SDK's server refuses them (it keeps `_episode_finished`); this environment drops that flag, as a
server that does not keep the ORS rule does, so a model can answer again until it is right."""

from typing import Any

from openreward.environments import Environment, TextBlock, ToolOutput, tool
from pydantic import BaseModel, Field


class GuessParams(BaseModel):
    number: int = Field(description="Your guess, 1 to 10")


class Guessing(Environment):
    """Guess the number."""

    @property
    def _episode_finished(self) -> bool:  # the defect: the episode never counts as finished
        return False

    @_episode_finished.setter
    def _episode_finished(self, value: Any) -> None:
        pass

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{"number": n} for n in (3, 8, 5)]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="Guess the number from 1 to 10.")]

    @tool
    def guess(self, params: GuessParams) -> ToolOutput:
        """One guess: 1.0 if right; the episode ends either way."""
        right = params.number == self.task_spec["number"]
        return ToolOutput(blocks=[TextBlock(text="right" if right else "wrong")], reward=1.0 if right else 0.0,
                          finished=True)
