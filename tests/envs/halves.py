"""The echo environment with a tool that takes any text and answers with its length, so a model's argument holding
half of a surrogate pair (what `json.loads` makes of its `"\\ud83d"`) is a call that works and is scored
(tests/test_records_hostile.py). `echo` of such text fails on the server: the SDK cannot write the result as JSON."""

from openreward.environments import TextBlock, ToolOutput, tool
from pydantic import BaseModel

from examples.echo import Echo


class MeasureParams(BaseModel):
    text: str


class Halves(Echo):
    @tool
    def measure(self, params: MeasureParams) -> ToolOutput:
        """Count the characters of a text."""
        return ToolOutput(blocks=[TextBlock(text=f"{len(params.text)} characters")], reward=1.0, finished=True)
