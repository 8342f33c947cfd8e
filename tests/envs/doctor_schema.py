"""`orsgen doctor`'s schema defect (tests/test_doctor.py): `search` needs a query, but its parameter model declares
it optional and demands it in a validator, so the schema the model is shown omits a required argument."""

from openreward.environments import Environment, TextBlock, ToolOutput, tool
from pydantic import BaseModel, Field, model_validator

BOOKS = ["dune", "emma", "ulysses"]


class SearchParams(BaseModel):
    query: str | None = Field(default=None, description="Words of the title")
    limit: int = Field(default=3, description="Most results")

    @model_validator(mode="after")
    def needs_a_query(self) -> "SearchParams":
        if self.query is None:  # the defect: required, yet the schema says optional
            raise ValueError("a query is required")
        return self


class AnswerParams(BaseModel):
    title: str = Field(description="The book's title")


class Library(Environment):
    """Find the book."""

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{"title": b} for b in BOOKS]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"Find the book whose title starts with {self.task_spec['title'][0]}.")]

    @tool
    def search(self, params: SearchParams) -> ToolOutput:
        """Search the catalog by title."""
        assert params.query is not None
        found = [b for b in BOOKS if params.query.lower() in b][: params.limit]
        return ToolOutput(blocks=[TextBlock(text=", ".join(found) or "nothing")])

    @tool
    def answer(self, params: AnswerParams) -> ToolOutput:
        """Answer with the title: 1.0 if right; the episode ends."""
        right = params.title.strip().lower() == self.task_spec["title"]
        return ToolOutput(blocks=[TextBlock(text="right" if right else "wrong")], reward=1.0 if right else 0.0,
                          finished=True)
