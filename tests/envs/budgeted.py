"""Tools that test budgets (issue 32): a result of 200,000 characters (`HUGE`: its start, middle and end readable),
20 images, a tool that answers in 5 s, one that never answers in a test's time, a short scored answer and the
scoring tool."""

import asyncio
import base64
import time

from openreward.environments import Environment, ImageBlock, TextBlock, ToolOutput, tool
from pydantic import BaseModel

# a 1x1 PNG
PIXEL = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360f8cfc0f01f0005000201a5f7d2"
    "6e0000000049454e44ae426082"
)).decode()
SIZE = 200_000


def _huge() -> str:
    """SIZE characters: "BEGIN ", numbered lines, " MIDDLE " across the centre, " END" last."""
    lines = "".join(f"line {i:06d}\n" for i in range(SIZE // 12 + 1))
    first = SIZE // 2 - 4 - len("BEGIN ")
    rest = SIZE - SIZE // 2 - 4 - len(" END")
    return "BEGIN " + lines[:first] + " MIDDLE " + lines[first:first + rest] + " END"


HUGE = _huge()
assert len(HUGE) == SIZE and HUGE.startswith("BEGIN ") and HUGE.endswith(" END") and " MIDDLE " in HUGE
CAPTION = "twenty pictures"


class ImagesParams(BaseModel):
    n: int = 20
    text: int = 0  # characters of text before each image (letters a, b, c, ... one per image)


class ScoreParams(BaseModel):
    value: float = 1.0


class Budgeted(Environment):
    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{"n": i} for i in range(4)]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"budgeted task {self.task_spec['n']}")]

    @tool
    def huge(self) -> ToolOutput:
        """Answer with 200,000 characters."""
        return ToolOutput(blocks=[TextBlock(text=HUGE)])

    @tool
    def images(self, params: ImagesParams) -> ToolOutput:
        """Answer with a caption and n pictures."""
        blocks: list = [TextBlock(text=CAPTION)]
        for i in range(params.n):
            if params.text:
                blocks.append(TextBlock(text=chr(ord("a") + i % 26) * params.text))
            blocks.append(ImageBlock(data=PIXEL, mimeType="image/png"))
        return ToolOutput(blocks=blocks)

    @tool
    def sleepy(self) -> ToolOutput:
        """Answer after 5 s."""
        time.sleep(5)
        return ToolOutput(blocks=[TextBlock(text="slept")])

    @tool
    async def never(self) -> ToolOutput:
        """Answer after an hour (async: the server's exit stops it, no thread waits)."""
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:  # the server stopping: ended quietly (the SDK logs a cancelled tool's trace)
            pass
        return ToolOutput(blocks=[TextBlock(text="never")])

    @tool
    def small(self) -> ToolOutput:
        """A short answer with a reward."""
        return ToolOutput(blocks=[TextBlock(text="small")], reward=0.5)

    @tool
    def score(self, params: ScoreParams) -> ToolOutput:
        """Score the episode and finish it."""
        return ToolOutput(blocks=[TextBlock(text="scored")], reward=params.value, finished=True)
