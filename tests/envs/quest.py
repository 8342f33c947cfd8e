"""Task-specific tools: odd tasks advertise `hint`, task 4 `peek` as well; task 5's `hint` has another schema.
The terminal tool takes the model's final message."""

from openreward.environments import Environment, ListToolsOutput, TextBlock, ToolOutput, ToolSpec, terminal, tool
from pydantic import BaseModel, Field


class HintParams(BaseModel):
    level: int = Field(default=1, description="How much to reveal")


class PeekParams(BaseModel):
    letter: int = Field(description="Which letter to show")


class Answer(BaseModel):
    answer: str


WORDS = ["sun", "moon", "star", "comet", "orbit", "nova"]


class Quest(Environment):
    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{"word": w} for w in WORDS]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"Guess the word ({len(self.task_spec['word'])} letters)")]

    def list_task_tools(self) -> ListToolsOutput:
        index = WORDS.index(self.task_spec["word"])
        tools = []
        if index % 2 == 1:
            schema = HintParams.model_json_schema()
            if index == 5:
                schema["properties"]["level"]["description"] = "Reveal level (task 5 wording)"
            tools.append(ToolSpec(name="hint", description="Reveal the start of the word.", input_schema=schema))
        if index == 4:
            tools.append(ToolSpec(name="peek", description="Show one letter.", input_schema=PeekParams.model_json_schema()))
        return ListToolsOutput(tools=tools)

    @tool
    def guess(self, params: Answer) -> ToolOutput:
        """Guess the word."""
        right = params.answer == self.task_spec["word"]
        return ToolOutput(blocks=[TextBlock(text="yes" if right else "no")], reward=1.0 if right else 0.0)

    @tool(shared=False)
    def hint(self, params: HintParams) -> ToolOutput:
        """Reveal the start of the word."""
        return ToolOutput(blocks=[TextBlock(text=self.task_spec["word"][: params.level])])

    @tool(shared=False)
    def peek(self, params: PeekParams) -> ToolOutput:
        """Show one letter."""
        return ToolOutput(blocks=[TextBlock(text=self.task_spec["word"][params.letter])])

    @terminal
    @tool
    def final(self, params: Answer) -> ToolOutput:
        """The model's final message is its answer."""
        right = params.answer.strip().lower() == self.task_spec["word"]
        return ToolOutput(blocks=[TextBlock(text="correct" if right else "wrong")], reward=1.0 if right else -1.0,
                          finished=True)
