"""Environments as others write them (issue 19): validators whose errors hold Python objects, a secret needed to
open a session, a split with no tasks, one task tool set for every task, a schema nested past orsgen's bounds."""

from typing import Any

from openreward.environments import Environment, ListToolsOutput, TextBlock, ToolOutput, ToolSpec, tool
from pydantic import BaseModel, Field, field_validator


class PickParams(BaseModel):
    count: int = Field(description="An even number")
    label: str = Field(default="x", description="A label")

    @field_validator("count")
    @classmethod
    def even(cls, value: int) -> int:
        if value % 2:  # pydantic keeps the exception itself in the error's ctx: ValueError(...) in the list's repr
            raise ValueError(f"count must be even, see https://example.com/rules ({value!r})")
        return value


class Picky(Environment):
    """Splits train (3 tasks) and test (1)."""

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train", "test"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{"n": i} for i in range(3 if split == "train" else 1)]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"pick {self.task_spec['n']}")]

    @tool
    def pick(self, params: PickParams) -> ToolOutput:
        """Pick an even number."""
        return ToolOutput(blocks=[TextBlock(text=f"picked {params.count}")], reward=1.0)


class Hollow(Environment):
    """A train split with no tasks."""

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return []

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="nothing")]

    @tool
    def noop(self) -> ToolOutput:
        """Do nothing."""
        return ToolOutput(blocks=[TextBlock(text="ok")])


class GradeParams(BaseModel):
    answer: str = Field(description="The answer to grade")


class Guarded(Environment):
    """A session opens only with the secret GRADER_KEY (its grader's API key); every task advertises `grade`."""

    def __init__(self, task_spec: Any = {}, secrets: dict[str, str] = {}) -> None:  # noqa: B006 - the SDK's signature
        super().__init__(task_spec, secrets)
        if not secrets.get("GRADER_KEY"):
            raise ValueError("GRADER_KEY must be provided via secrets")
        if secrets["GRADER_KEY"] == "wrong":
            raise ValueError(f"the grader refused the key {secrets['GRADER_KEY']} (api_key={secrets.get('api_key')})")
        self.secrets = secrets

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{"q": f"question {i}"} for i in range(4)]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=self.task_spec["q"])]

    def list_task_tools(self) -> ListToolsOutput:
        return ListToolsOutput(tools=[ToolSpec(name="grade", description="Grade an answer.",
                                               input_schema=GradeParams.model_json_schema())])

    @tool
    def answer(self, params: GradeParams) -> ToolOutput:
        """Submit the answer."""
        return ToolOutput(blocks=[TextBlock(text="noted")])

    @tool(shared=False)
    def grade(self, params: GradeParams) -> ToolOutput:
        """Grade an answer."""
        return ToolOutput(blocks=[TextBlock(text="graded")], reward=1.0)

    @tool
    def secret_of(self, params: GradeParams) -> ToolOutput:
        """Which value the environment got as the secret named `answer` (for the tests)."""
        return ToolOutput(blocks=[TextBlock(text=str(self.secrets.get(params.answer)))])


def nested(depth: int) -> dict[str, Any]:
    """An object schema `depth` objects deep."""
    node: dict[str, Any] = {"type": "string"}
    for i in range(depth):
        node = {"type": "object", "properties": {f"level{i}": node}}
    return node


class Abyss(Environment):
    """A tool whose schema nests 150 objects deep (300 JSON levels) and whose description is 1 MB."""

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{}]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="dive")]

    @classmethod
    def list_tools(cls) -> ListToolsOutput:
        listed = super().list_tools()
        schema = {"type": "object", "properties": {"plan": nested(150)}}
        listed.tools.append(ToolSpec(name="dive", description="Dive. " + "deeper " * 150_000, input_schema=schema))
        return listed

    @tool
    def surface(self) -> ToolOutput:
        """Come up."""
        return ToolOutput(blocks=[TextBlock(text="up")], reward=1.0)
