"""An environment whose task list changes with SHIFTING_VARIANT (read at server start); its tools never change.
Variant b inserts a new task at index 1, so every later task moves down one place."""

import os

from openreward.environments import Environment, TextBlock, ToolOutput, tool
from pydantic import BaseModel, Field

VARIANT = os.environ.get("SHIFTING_VARIANT", "a")
TASKS = [{"id": "t0", "word": "alpha"}, {"id": "t1", "word": "bravo"}, {"id": "t2", "word": "charlie"}]
if VARIANT == "b":
    TASKS.insert(1, {"id": "inserted", "word": "zulu"})


class SayParams(BaseModel):
    text: str = Field(description="What to say")


class Shifting(Environment):
    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [dict(t) for t in TASKS]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"Say {self.task_spec['word']}")]

    @tool
    def say(self, params: SayParams) -> ToolOutput:
        """Say the word."""
        hit = params.text == self.task_spec["word"]
        return ToolOutput(blocks=[TextBlock(text=params.text)], reward=1.0 if hit else 0.0, finished=hit)
