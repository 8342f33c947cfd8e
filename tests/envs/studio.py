"""Rewards, failures and images on demand: each tool does what its arguments say."""

import base64

from openreward.environments import Environment, ImageBlock, TextBlock, ToolOutput, tool
from pydantic import BaseModel

# a 1x1 PNG
PIXEL = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360f8cfc0f01f0005000201a5f7d2"
    "6e0000000049454e44ae426082"
)).decode()


class ScoreParams(BaseModel):
    value: float | None = None
    finish: bool = False
    fail: bool = False


class Studio(Environment):
    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{"n": i, "prompt": f"overwritten? {i}", "environment": "nope"} for i in range(70)]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"studio task {self.task_spec['n']}")]

    @tool
    def score(self, params: ScoreParams) -> ToolOutput:
        """Return the reward asked for, or fail."""
        if params.fail:
            raise RuntimeError("asked to fail")
        return ToolOutput(blocks=[TextBlock(text="scored")], reward=params.value, finished=params.finish,
                          metadata={"value": params.value})

    @tool
    def draw(self) -> ToolOutput:
        """Return a caption and a picture."""
        return ToolOutput(blocks=[TextBlock(text="a pixel"), ImageBlock(data=PIXEL, mimeType="image/png")])
