"""The graded environment (tests/envs/graded.py, served under its name, so the scripted model of
tests/harness/evaluation.py answers it) with starts that fail on demand and a split without tasks, for
tests/test_eval_hostile.py. The JSON file named by GRADED_FAILS maps a task to how many of its next starts fail
({"1": 3}: the next three starts of task 1 fail, so one reset and its two retries cannot start it, and a later reset
can); the split "empty" has no tasks."""

import json
import os
import threading
from pathlib import Path
from typing import ClassVar

from tests.envs.graded import Graded

EMPTY = "empty"


class ShakyGraded(Graded):
    lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def name(cls) -> str:
        return "Graded"

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train", EMPTY]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [] if split == EMPTY else super().list_tasks(split)

    def setup(self) -> None:
        super().setup()
        path = os.environ.get("GRADED_FAILS")
        task = str(self.task_spec["n"])
        with ShakyGraded.lock:
            plan = json.loads(Path(path).read_text(encoding="utf-8")) if path and os.path.exists(path) else {}
            if not plan.get(task):
                return
            plan[task] -= 1
            Path(path).write_text(json.dumps(plan), encoding="utf-8")
        raise RuntimeError(f"task {task} was set to fail this start")
