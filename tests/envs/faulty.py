"""Faults on demand: long outputs with spaces at SSE chunk boundaries, slow tools, failing setup and prompts."""

import time

from openreward.environments import Environment, TextBlock, ToolOutput, tool
from pydantic import BaseModel


class SlowParams(BaseModel):
    seconds: float


class SecretParams(BaseModel):
    name: str


class Faulty(Environment):
    def __init__(self, task_spec: dict = {}, secrets: dict = {}) -> None:  # noqa: B006 - the SDK's signature
        super().__init__(task_spec, secrets)
        self.secrets = secrets

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{"n": i} for i in range(6)]

    def setup(self) -> None:
        if self.task_spec["n"] == 3:
            raise ValueError("setup exploded")
        if self.task_spec["n"] == 5:
            time.sleep(8)  # still starting: the server holds /prompt (and answers 503 after 25 s)

    def get_prompt(self) -> list[TextBlock]:
        if self.task_spec["n"] == 4:
            raise KeyError("no prompt for you")
        return [TextBlock(text=f"faulty task {self.task_spec['n']}")]

    @tool
    def spacey(self) -> ToolOutput:
        """A result whose 4096-character SSE chunk boundary falls inside a run of spaces."""
        return ToolOutput(blocks=[TextBlock(text="x" * 4056 + " " * 10 + "END")])

    @tool
    def slow(self, params: SlowParams) -> ToolOutput:
        """Sleep, then answer."""
        time.sleep(params.seconds)
        return ToolOutput(blocks=[TextBlock(text=f"slept {params.seconds}")])

    @tool
    def secret_names(self, params: SecretParams) -> ToolOutput:
        """Whether a secret with this name reached the environment (never its value)."""
        return ToolOutput(blocks=[TextBlock(text=str(params.name in self.secrets))])
