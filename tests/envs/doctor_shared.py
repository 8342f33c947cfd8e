"""`orsgen doctor`'s isolation defect (tests/test_doctor.py): a scratchpad whose notes are a class attribute, so
every session appends to the one list (the mutable-default mistake). Otherwise an honest word-guessing task."""

from openreward.environments import Environment, TextBlock, ToolOutput, tool
from pydantic import BaseModel, Field

WORDS = ["amber", "birch", "cedar"]


class NoteParams(BaseModel):
    text: str = Field(description="What to write down")


class AnswerParams(BaseModel):
    answer: str = Field(description="The word")


class Scratchpad(Environment):
    """Guess the word; keep notes on the way."""

    notes: list[str] = []  # noqa: RUF012 - the defect: one list on the class, shared by every session

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{"word": w} for w in WORDS]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"Guess the {len(self.task_spec['word'])}-letter tree word.")]

    @tool
    def note(self, params: NoteParams) -> ToolOutput:
        """Write a note down; answers every note so far."""
        self.notes.append(params.text)
        return ToolOutput(blocks=[TextBlock(text="notes:\n" + "\n".join(self.notes))])

    @tool
    def answer(self, params: AnswerParams) -> ToolOutput:
        """Answer with the word: 1.0 if right; the episode ends."""
        right = params.answer.strip().lower() == self.task_spec["word"]
        return ToolOutput(blocks=[TextBlock(text="right" if right else "wrong")], reward=1.0 if right else 0.0,
                          finished=True)
