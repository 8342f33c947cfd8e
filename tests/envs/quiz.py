"""A second test environment: keyword and reserved names, Literal/Optional arguments, negative rewards."""

from typing import Literal

from openreward.environments import Environment, TextBlock, ToolOutput, tool
from pydantic import BaseModel, ConfigDict, Field

QUESTIONS = [("What is 2+2?", "4", "math"), ("Capital of France?", "Paris", "geo"), ("3*3?", "9", "math")]


class AnswerParams(BaseModel):
    answer: str = Field(description="Your final answer")


class LookupParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    topic: Literal["math", "geo"] = Field(description="Which notes to read")
    limit: int | None = Field(default=None, description="Most characters to return")
    source: str = Field(default="notes", alias="from", description="Where to look")
    tags: list[str] = Field(default_factory=list, description="Filter tags")


class Quiz(Environment):
    """Answer a question; a wrong answer costs 0.5."""

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{"question": q, "answer": a, "topic": t} for q, a, t in QUESTIONS]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=self.task_spec["question"])]

    @tool
    def answer(self, params: AnswerParams) -> ToolOutput:
        """Submit the final answer."""
        right = params.answer.strip() == self.task_spec["answer"]
        return ToolOutput(blocks=[TextBlock(text="correct" if right else "wrong")], reward=1.0 if right else -0.5,
                          finished=right)

    @tool
    def lookup(self, params: LookupParams) -> ToolOutput:
        """Read the notes on a topic."""
        text = f"{params.topic} notes from {params.source}, tags={params.tags}"
        return ToolOutput(blocks=[TextBlock(text=text[: params.limit] if params.limit else text)])

    @tool
    def reset(self) -> ToolOutput:
        """A tool whose name TRL reserves: the adapter must keep it, under another attribute."""
        return ToolOutput(blocks=[TextBlock(text="reset tool ran")])
