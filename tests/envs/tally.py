"""A running total per session, so a result says which calls came before it on that session: `add` sleeps
TALLY_SLEEP seconds (0.2) first, `boom` raises (the SDK ends the session), `nap` sleeps as long as it is told,
`spill` answers with `n` words (a result too long for the completion: TRL rolls it back)."""

import os
import time

from openreward.environments import Environment, TextBlock, ToolOutput, tool
from pydantic import BaseModel


class AddParams(BaseModel):
    n: int


class NapParams(BaseModel):
    seconds: float


class SpillParams(BaseModel):
    n: int


class Tally(Environment):
    def __init__(self, task_spec: dict = {}, secrets: dict = {}) -> None:  # noqa: B006 - the SDK's signature
        super().__init__(task_spec, secrets)
        self.total = 0
        self.calls = 0

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{"n": i} for i in range(4)]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"tally task {self.task_spec['n']}")]

    @tool
    def add(self, params: AddParams) -> ToolOutput:
        """Add n to the session's total."""
        time.sleep(float(os.environ.get("TALLY_SLEEP", "0.2")))
        self.calls += 1
        self.total += params.n
        return ToolOutput(blocks=[TextBlock(text=f"total {self.total} after {self.calls} calls")],
                          reward=float(self.total), finished=False)

    @tool
    def boom(self) -> ToolOutput:
        """Raise."""
        raise RuntimeError("boom")

    @tool
    def nap(self, params: NapParams) -> ToolOutput:
        """Sleep, then answer."""
        time.sleep(params.seconds)
        self.calls += 1
        return ToolOutput(blocks=[TextBlock(text=f"napped after {self.calls} calls")])

    @tool
    def spill(self, params: SpillParams) -> ToolOutput:
        """Answer with n words."""
        self.calls += 1
        return ToolOutput(blocks=[TextBlock(text=" ".join(["total"] * params.n))])
