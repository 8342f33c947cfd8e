"""`orsgen eval`'s test environment (issue 31): task i asks for the word `w<i>`; `answer(text)` scores 1.0 for it
and 0.0 for anything else, and finishes the episode. Task 5 never starts. Which tasks a model gets right is the
scripted endpoint's choice (tests/harness/chat_standin.py), so the figures a run reports are known exactly."""

from openreward.environments import Environment, TextBlock, ToolOutput, tool
from pydantic import BaseModel, Field

TASKS = 6
NEVER_STARTS = 5


class AnswerParams(BaseModel):
    text: str = Field(description="Your answer: the word the task asks for")


class Graded(Environment):
    """Answer with the task's word."""

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{"n": i, "word": f"w{i}"} for i in range(TASKS)]

    def setup(self) -> None:
        if self.task_spec["n"] == NEVER_STARTS:
            raise RuntimeError("this task never starts")

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"Task {self.task_spec['n']}: answer with the word {self.task_spec['word']}")]

    @tool
    def answer(self, params: AnswerParams) -> ToolOutput:
        """Submit your answer: 1.0 for the task's word, 0.0 otherwise; the episode ends."""
        right = params.text.strip() == self.task_spec["word"]
        return ToolOutput(blocks=[TextBlock(text="right" if right else "wrong")], reward=1.0 if right else 0.0,
                          finished=True)
