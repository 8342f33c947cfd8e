"""The graded and echo environments after a change, for tests/test_replay.py: served under the same names, with
REVISED=output a right answer says something else ("correct", the echo upper-cased), with REVISED=reward a wrong
answer to graded pays 0.25 and a right echo 0.5. Everything else is as before."""

import os

from openreward.environments import TextBlock, ToolOutput, tool

from examples.echo import Echo, EchoParams
from tests.envs.graded import AnswerParams, Graded

CHANGE = os.environ.get("REVISED", "output")


class RevisedGraded(Graded):
    @classmethod
    def name(cls) -> str:
        return "Graded"

    @tool
    def answer(self, params: AnswerParams) -> ToolOutput:
        """Submit your answer: 1.0 for the task's word, 0.0 otherwise; the episode ends."""
        right = params.text.strip() == self.task_spec["word"]
        text = ("correct" if CHANGE == "output" else "right") if right else "wrong"
        reward = 1.0 if right else 0.25 if CHANGE == "reward" else 0.0
        return ToolOutput(blocks=[TextBlock(text=text)], reward=reward, finished=True)


class RevisedEcho(Echo):
    @classmethod
    def name(cls) -> str:
        return "Echo"

    @tool
    def echo(self, params: EchoParams) -> ToolOutput:
        """Echo text back. Reward 1.0 and the episode ends when it is the task's word, 0.0 otherwise."""
        hit = params.text.strip() == self.task_spec["target"]
        text = params.text.upper() if CHANGE == "output" and hit else params.text
        reward = (0.5 if CHANGE == "reward" else 1.0) if hit else 0.0
        return ToolOutput(blocks=[TextBlock(text=text)], reward=reward, finished=hit,
                          metadata={"target": self.task_spec["target"]})
