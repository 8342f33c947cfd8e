"""`orsgen doctor`'s server-error defect (tests/test_doctor.py): `lookup` raises KeyError on any key it does not
know, which its schema allows: the server answers the call with an error event (on /call, what a 500 is), and the
SDK ends the session."""

from openreward.environments import Environment, TextBlock, ToolOutput, tool
from pydantic import BaseModel, Field

TABLE = {"h": "hydrogen", "he": "helium", "li": "lithium"}


class LookupParams(BaseModel):
    symbol: str = Field(description="An element's symbol")


class AnswerParams(BaseModel):
    answer: str = Field(description="The element's name")


class Elements(Environment):
    """Name the element of a symbol."""

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{"symbol": s} for s in TABLE]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"Which element is {self.task_spec['symbol']}?")]

    @tool
    def lookup(self, params: LookupParams) -> ToolOutput:
        """Look an element up by its symbol."""
        return ToolOutput(blocks=[TextBlock(text=TABLE[params.symbol.lower()])])  # the defect: KeyError

    @tool
    def answer(self, params: AnswerParams) -> ToolOutput:
        """Answer with the element's name: 1.0 if right; the episode ends."""
        right = params.answer.strip().lower() == TABLE[self.task_spec["symbol"]]
        return ToolOutput(blocks=[TextBlock(text="right" if right else "wrong")], reward=1.0 if right else 0.0,
                          finished=True)
