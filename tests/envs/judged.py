"""A conversation-shaped environment that judges groups: its prompt is a system turn, an earlier exchange and the
question (`get_messages` only); `score_group` ranks a group's answers against each other (the shortest correct
answer wins), which no pointwise reward can say. Each score_group request is appended to the JSON-lines file named
by JUDGED_LOG, as the server received it."""

import json
import os
from collections.abc import Sequence

from openreward.environments import Environment, GroupCandidate, GroupScore, Message, TextBlock, ToolOutput, tool
from pydantic import BaseModel, Field

SYSTEM = "You are terse: answer with as few words as you can."
TASKS = [("capital of France", "paris"), ("capital of Italy", "rome"), ("judge fails", "x"), ("colour of snow",
                                                                                              "white")]
FAILING = 2  # the task whose judge raises


class AnswerParams(BaseModel):
    text: str = Field(description="Your answer")


class Judged(Environment):
    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{"n": i, "question": q, "answer": a} for i, (q, a) in enumerate(TASKS)]

    def get_messages(self) -> list[Message]:
        return [
            Message(role="system", blocks=[TextBlock(text=SYSTEM)]),
            Message(role="user", blocks=[TextBlock(text="Warm-up: say hi")]),
            Message(role="assistant", blocks=[TextBlock(text="hi")]),
            Message(role="user", blocks=[TextBlock(text=f"Task {self.task_spec['n']}: the "
                                                      f"{self.task_spec['question']}?")]),
        ]

    @tool
    def answer(self, params: AnswerParams) -> ToolOutput:
        """Submit an answer; 1.0 when it contains the right word."""
        right = self.task_spec["answer"] in params.text.lower()
        return ToolOutput(blocks=[TextBlock(text="correct" if right else "wrong")], reward=1.0 if right else 0.0)

    def score_group(self, candidates: Sequence[GroupCandidate]) -> Sequence[GroupScore]:  # type: ignore[override]
        log = os.environ.get("JUDGED_LOG")
        if log:
            with open(log, "a", encoding="utf-8") as f:
                record = {"task": self.task_spec["n"], "candidates": [c.model_dump(mode="json") for c in candidates]}
                f.write(json.dumps(record) + "\n")
        if self.task_spec["n"] == FAILING:
            raise RuntimeError("the judge is down")
        answers = [_answer(c.messages) for c in candidates]
        correct = [a for a in answers if a is not None and self.task_spec["answer"] in a.lower()]
        best = min(map(len, correct)) if correct else None
        # 1.0 for the shortest correct answer(s), 0.5 for a longer correct one, 0.25 for a wrong one, 0.0 for none:
        # distinct values, so a test can tell each candidate's score
        return [GroupScore(reward=0.0 if a is None else 0.25 if a not in correct else 1.0 if len(a) == best else 0.5,
                           metadata={"answer": a}) for a in answers]


def _answer(messages: Sequence[Message]) -> str | None:
    """The text of the candidate's last `answer` tool call."""
    found = None
    for message in messages:
        for block in message.blocks:
            if block.type == "tool_call" and block.name == "answer":
                found = str(block.input.get("text"))
    return found


class Unjudged(Judged):
    """The same environment, served under the same name, without group scoring."""

    score_group = Environment.score_group  # type: ignore[assignment]

    @classmethod
    def name(cls) -> str:
        return "Judged"
