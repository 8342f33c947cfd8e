"""Tools whose images Pillow cannot read (an SVG, bytes that are no image format) and that score the episode: the
model still gets the result (tests/test_runtime_odd_configurations.py)."""

import base64

from openreward.environments import Environment, ImageBlock, TextBlock, ToolOutput, tool

SVG = base64.b64encode(b'<svg xmlns="http://www.w3.org/2000/svg" width="1" height="1"/>').decode()
NOISE = base64.b64encode(b"not an image at all").decode()


class Sketchy(Environment):
    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{"n": 0}]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="sketchy task")]

    @tool
    def sketch(self) -> ToolOutput:
        """Return a caption and an SVG drawing; 1.0."""
        return ToolOutput(blocks=[TextBlock(text="a sketch"), ImageBlock(data=SVG, mimeType="image/svg+xml")],
                          reward=1.0)

    @tool
    def noise(self) -> ToolOutput:
        """Return bytes that claim to be a PNG; 0.5."""
        return ToolOutput(blocks=[ImageBlock(data=NOISE, mimeType="image/png")], reward=0.5)
