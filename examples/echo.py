"""The bundled example ORS environment: the model must echo a word back.

Serve it on loopback with ``python -m examples.echo --port 8031``.
"""

from openreward.environments import Environment, TextBlock, ToolOutput, tool
from pydantic import BaseModel, Field

WORDS = ["apple", "grape", "lemon", "mango", "peach", "plum", "kiwi", "lime"]


class EchoParams(BaseModel):
    text: str = Field(description="The text to echo back")


class HintParams(BaseModel):
    level: int = Field(default=1, ge=1, le=3, description="How much to reveal")


class Echo(Environment):
    """Echo the task's word back with the `echo` tool."""

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train", "test"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        words = WORDS if split == "train" else list(reversed(WORDS))
        return [{"id": f"{split}-{i}", "target": word, "difficulty": len(word)} for i, word in enumerate(words)]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"Echo the word {self.task_spec['target']}")]

    @tool
    def echo(self, params: EchoParams) -> ToolOutput:
        """Echo text back. Reward 1.0 and the episode ends when it is the task's word, 0.0 otherwise."""
        hit = params.text.strip() == self.task_spec["target"]
        return ToolOutput(
            blocks=[TextBlock(text=params.text)],
            reward=1.0 if hit else 0.0,
            finished=hit,
            metadata={"target": self.task_spec["target"]},
        )

    @tool
    def hint(self, params: HintParams) -> ToolOutput:
        """Reveal the first letters of the word.

        Args:
            level: how many letters to show
        """
        return ToolOutput(blocks=[TextBlock(text=self.task_spec["target"][: params.level])])


if __name__ == "__main__":
    from examples.serve import main

    main([f"{__name__}:Echo"])
