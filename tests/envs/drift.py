"""An environment whose tools change with DRIFT_VARIANT (read at server start): b adds a tool and edits one."""

import os

from openreward.environments import Environment, TextBlock, ToolOutput, tool
from pydantic import BaseModel, Field

VARIANT = os.environ.get("DRIFT_VARIANT", "a")


class SayParams(BaseModel):
    text: str = Field(description="What to say" if VARIANT == "a" else "What to say, loudly")


class Drift(Environment):
    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{"n": 0}, {"n": 1}]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"task {self.task_spec['n']}")]

    @tool
    def say(self, params: SayParams) -> ToolOutput:
        """Say something."""
        return ToolOutput(blocks=[TextBlock(text=params.text)])

    if VARIANT == "b":

        @tool
        def shout(self, params: SayParams) -> ToolOutput:
            """Say something loudly."""
            return ToolOutput(blocks=[TextBlock(text=params.text.upper())])
