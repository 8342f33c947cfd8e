"""Failures of starts and tools, for tests/test_start_and_tool_failures.py.

`Brittle`: splits train (4 tasks) and test (1); `score` gives 1.0, `crash` raises (the SDK then ends the session),
`secret` says whether a secret of that name reached the environment (never its value).
`Shaky`: the judged environment (served under its name, `Judged`), whose starts fail on demand: the JSON file named
by SHAKY_FAILS maps a task to how many of its next starts fail ({"0": 1}: the next start of task 0 fails).
"""

import json
import os
import threading
from pathlib import Path
from typing import ClassVar

from openreward.environments import Environment, TextBlock, ToolOutput, tool
from pydantic import BaseModel

from tests.envs.judged import Judged


class SecretParams(BaseModel):
    name: str


class Brittle(Environment):
    def __init__(self, task_spec: dict = {}, secrets: dict = {}) -> None:  # noqa: B006 - the SDK's signature
        super().__init__(task_spec, secrets)
        self.secrets = secrets

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train", "test"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{"n": i} for i in range(4 if split == "train" else 1)]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"brittle task {self.task_spec['n']}")]

    @tool
    def score(self) -> ToolOutput:
        """Score the episode: 1.0."""
        return ToolOutput(blocks=[TextBlock(text="scored")], reward=1.0)

    @tool
    def crash(self) -> ToolOutput:
        """A tool whose code raises."""
        raise RuntimeError("the tool's code broke")

    @tool
    def secret(self, params: SecretParams) -> ToolOutput:
        """Whether a secret of this name reached the environment."""
        return ToolOutput(blocks=[TextBlock(text=str(params.name in self.secrets))])


class Shaky(Judged):
    lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def name(cls) -> str:
        return "Judged"

    def setup(self) -> None:
        path = os.environ.get("SHAKY_FAILS")
        if not path:
            return
        task = str(self.task_spec["n"])
        with Shaky.lock:
            plan = json.loads(Path(path).read_text(encoding="utf-8")) if os.path.exists(path) else {}
            if not plan.get(task):
                return
            plan[task] -= 1
            Path(path).write_text(json.dumps(plan), encoding="utf-8")
        raise RuntimeError(f"task {task} was set to fail this start")
